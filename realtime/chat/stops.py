"""Stop strings matched across token boundaries.

Text is held back while it could still be the start of a stop string, so no part
of a stop string ever reaches the client unless `include_stop_str_in_output` asks
for it. Only the longest stop string minus one character is ever held.

All stop strings are searched at once by one Aho-Corasick automaton
(`pyahocorasick`): what a piece of text costs does not grow with the number of
stop strings, only with the text and the held characters (at most the longest
stop string). A request may bring dozens of them (`--max-stop-strings`).
"""

from __future__ import annotations

import re

import ahocorasick


class StopMatcher:
    def __init__(self, stops: list[str], *, include_stop: bool = False):
        unique = list(dict.fromkeys(s for s in stops if s))
        self._include = include_stop
        self._hold_max = max((len(s) for s in unique), default=1) - 1
        self._held = ""
        self.matched: str | None = None
        self._automaton: ahocorasick.Automaton | None = None
        #: The characters a stop string starts with: where a held suffix can begin.
        self._starts: re.Pattern[str] | None = None
        if unique:
            automaton = ahocorasick.Automaton()
            for stop in unique:
                automaton.add_word(stop, stop)
            automaton.make_automaton()
            self._automaton = automaton
            firsts = "".join(sorted({re.escape(s[0]) for s in unique}))
            self._starts = re.compile(f"[{firsts}]")

    @property
    def active(self) -> bool:
        return self._automaton is not None

    def feed(self, text: str, *, check: bool = True) -> str:
        """Accept new text; return what may be emitted now. Check `matched` afterwards.

        With `check=False` (the answer is still shorter than `min_tokens`) no stop
        can end it; text that could begin a stop string is still held back.
        """
        automaton = self._automaton
        if automaton is None:
            return text
        buffer = self._held + text
        if check:
            # The stop that *ends* first is the one generation would have hit first
            # token by token; choosing by start would depend on how text was split.
            # The automaton reports matches by end position; of those ending at the
            # same character the longest (the earliest start) wins.
            hit_end, hit = -1, ""
            for end, stop in automaton.iter(buffer):
                if hit_end != -1 and end != hit_end:
                    break
                if len(stop) > len(hit):
                    hit_end, hit = end, stop
            if hit:
                self.matched = hit
                self._held = ""
                return buffer[: hit_end + 1] if self._include else buffer[: hit_end + 1 - len(hit)]
        keep = self._partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """Release held text once generation ended without a match."""
        held, self._held = self._held, ""
        return held

    def _partial_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of `buffer` that begins some stop string."""
        assert self._automaton is not None and self._starts is not None
        for found in self._starts.finditer(buffer, max(0, len(buffer) - self._hold_max)):
            start = found.start()
            # `match`: is this text a prefix of (or equal to) some stop string?
            if self._automaton.match(buffer[start:]):
                return len(buffer) - start
        return 0
