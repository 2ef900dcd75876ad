"""Terminal plumbing for the REPL: Ctrl-C handling, line editing and history, colour, spinner.

Kept apart from the chat logic so that `repl.py` reads as the protocol it speaks.
"""

from __future__ import annotations

import importlib
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TextIO

#: Where the REPL keeps its input history: in the home directory, if that is writable.
HISTORY_FILE_NAME = ".realtime_history"
HISTORY_LENGTH = 1000


class InterruptGate:
    """SIGINT as a counter while an answer streams, `KeyboardInterrupt` everywhere else.

    Why not just catch `KeyboardInterrupt` around `recv()`: the exception can be
    raised between websockets taking a frame off its queue and returning it, and
    that frame (possibly the request's terminal frame) would be lost. While
    `counting()` is active the handler only bumps `count`; the REPL polls `recv()`
    with a short timeout and acts on the count, so no exception ever unwinds
    through library code mid-stream. At the prompt, `input()` is interrupted as
    usual.
    """

    def __init__(self) -> None:
        self.count = 0
        self._counting = False
        self._previous: Any = None

    def install(self) -> None:
        self._previous = signal.signal(signal.SIGINT, self._handle)

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.count = 0
        self._counting = True
        try:
            yield
        finally:
            self._counting = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._counting:
            self.count += 1
            return
        raise KeyboardInterrupt


def _readline() -> ModuleType | None:
    try:
        return importlib.import_module("readline")
    except ImportError:  # Windows without pyreadline: plain input() still works
        return None


def enable_line_editing() -> None:
    """Importing readline gives `input()` editing and in-session history, where available."""
    _readline()


def input_with_text(prompt: str, text: str) -> str:
    """`input(prompt)` with `text` already typed on the line, ready to edit or send.

    Without readline the line starts empty; the caller says what to type instead.
    """
    rl = _readline()
    if rl is None or not text:
        return input(prompt)
    rl.set_startup_hook(lambda: rl.insert_text(text))
    try:
        return input(prompt)
    finally:
        rl.set_startup_hook(None)


def default_history_file() -> Path | None:
    """`~/.realtime_history` when the home directory (or that file) is writable, else None.

    Why the check: a shared or read-only home (containers, CI) must not make the
    REPL fail or leave half-written files; history then stays in memory.
    """
    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        return None
    path = home / HISTORY_FILE_NAME
    if path.exists():
        return path if os.access(path, os.W_OK) else None
    return path if home.is_dir() and os.access(home, os.W_OK) else None


class History:
    """Readline history persisted to a file between sessions (no file: memory only)."""

    def __init__(self, path: Path | None):
        self.path = path
        self._readline = _readline()

    def load(self) -> None:
        if self._readline is None:
            return
        self._readline.set_history_length(HISTORY_LENGTH)
        if self.path is not None and self.path.exists():
            try:
                self._readline.read_history_file(str(self.path))
            except OSError:
                self.path = None  # unreadable: do not overwrite it either

    def save(self) -> None:
        if self._readline is None or self.path is None:
            return
        try:
            self._readline.write_history_file(str(self.path))
        except OSError:
            pass

    def replace_last(self, count: int, entry: str) -> None:
        """Fold the `count` lines of a multi-line message into one history entry."""
        rl = self._readline
        if rl is None or count < 2:
            return
        length = rl.get_current_history_length()
        if length < count:
            return
        for _ in range(count):
            rl.remove_history_item(rl.get_current_history_length() - 1)
        rl.add_history(entry)


class Spinner:
    """A one-character spinner drawn at the start of the line while the first token is awaited.

    Only on a terminal that can move the cursor back (TTY, TERM not dumb): in a
    pipe or a log the frames would be noise.
    """

    FRAMES = "|/-\\"
    INTERVAL = 0.1

    def __init__(self, stream: TextIO):
        isatty = getattr(stream, "isatty", None)
        self.stream = stream
        self.enabled = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self._shown = False
        self._index = 0
        self._last = 0.0

    def tick(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._shown and now - self._last < self.INTERVAL:
            return
        self._last = now
        self.stream.write("\r" + self.FRAMES[self._index % len(self.FRAMES)])
        self.stream.flush()
        self._index += 1
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.stream.write("\r \r")
            self.stream.flush()
            self._shown = False


class Style:
    """ANSI colour only for a real terminal, and never when NO_COLOR or TERM=dumb is set."""

    def __init__(self, stream: TextIO, enabled: bool | None = None):
        isatty = getattr(stream, "isatty", None)
        self.enabled = (
            bool(isatty and isatty())
            and "NO_COLOR" not in os.environ
            and os.environ.get("TERM") != "dumb"
            if enabled is None
            else enabled
        )

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)
