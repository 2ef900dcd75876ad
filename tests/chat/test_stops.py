"""StopMatcher: stop strings matched across arbitrary text boundaries, never leaked."""

from __future__ import annotations

import itertools
import random

import pytest

from realtime.chat.stops import StopMatcher


def run(
    stops: list[str], parts: list[str], *, include_stop: bool = False
) -> tuple[str, str | None]:
    """Feed `parts` as a generation loop does; return (all emitted text, matched stop)."""
    matcher = StopMatcher(stops, include_stop=include_stop)
    out = ""
    for part in parts:
        out += matcher.feed(part)
        if matcher.matched is not None:
            return out, matcher.matched
    return out + matcher.flush(), None


def reference(stops: list[str], text: str, *, include_stop: bool = False) -> tuple[str, str | None]:
    """What a client must see: text before the first stop to appear in the stream.

    Scanning end positions models generation: the first stop to be completed wins; among
    stops completed by the same character the longest (earliest-starting) one wins.
    """
    for end in range(1, len(text) + 1):
        done = [s for s in stops if s and text[:end].endswith(s)]
        if done:
            stop = max(done, key=len)
            return (text[:end] if include_stop else text[: end - len(stop)]), stop
    return text, None


def splits(text: str) -> list[list[str]]:
    """Whole, char by char, and every two-piece split."""
    out = [[text], list(text)]
    out += [[text[:i], text[i:]] for i in range(1, len(text))]
    return out


# --- examples ---


def test_no_stops_is_passthrough() -> None:
    matcher = StopMatcher([])
    assert matcher.active is False
    assert matcher.feed("END") == "END"
    assert matcher.feed("") == ""
    assert matcher.feed(" more") == " more"
    assert matcher.matched is None
    assert matcher.flush() == ""


def test_empty_stop_strings_are_ignored() -> None:
    matcher = StopMatcher(["", ""])
    assert matcher.active is False
    assert matcher.feed("abc") == "abc"


def test_active_with_stops() -> None:
    assert StopMatcher(["x"]).active is True


def test_stop_within_one_feed() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("Hello END world") == "Hello "
    assert matcher.matched == "END"


def test_stop_split_char_by_char() -> None:
    matcher = StopMatcher(["END"])
    emitted = []
    for char in "Hello END world":
        emitted.append(matcher.feed(char))
        if matcher.matched:
            break
    assert emitted == ["H", "e", "l", "l", "o", " ", "", "", ""]
    assert matcher.matched == "END"


def test_stop_across_many_feeds() -> None:
    matcher = StopMatcher(["<|im_end|>"])
    assert matcher.feed("The answer") == "The answer"
    assert matcher.feed(" is 4.<|") == " is 4."
    assert matcher.feed("im_") == ""
    assert matcher.matched is None
    assert matcher.feed("end|>\nuser") == ""
    assert matcher.matched == "<|im_end|>"


def test_hold_back_then_release_when_the_prefix_breaks() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("abc E") == "abc "
    assert matcher.feed("N") == ""
    assert matcher.feed("x") == "ENx"
    assert matcher.matched is None


def test_only_a_suffix_that_begins_a_stop_is_held() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("NDE") == "ND"
    assert matcher.feed("ND") == ""
    assert matcher.matched == "END"


def test_flush_releases_held_text() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("abc EN") == "abc "
    assert matcher.flush() == "EN"
    assert matcher.flush() == ""
    assert matcher.matched is None


def test_hold_is_at_most_longest_stop_minus_one() -> None:
    matcher = StopMatcher(["abcdef", "xy"])
    assert matcher.feed("abcde") == ""
    assert matcher.feed("x") == "abcde"
    assert matcher.feed("z") == "xz"


def test_earliest_stop_wins() -> None:
    matcher = StopMatcher(["world", "lo"])
    assert matcher.feed("hello world") == "hel"
    assert matcher.matched == "lo"


def test_earliest_stop_wins_regardless_of_list_order() -> None:
    assert run(["lo", "world"], ["hello world"]) == ("hel", "lo")
    assert run(["world", "lo"], ["hello world"]) == ("hel", "lo")
    assert run(["world", "lo"], list("hello world")) == ("hel", "lo")


def test_include_stop() -> None:
    matcher = StopMatcher(["END"], include_stop=True)
    assert matcher.feed("abENDcd") == "abEND"
    assert matcher.matched == "END"


def test_include_stop_across_feeds() -> None:
    assert run(["END"], ["ab", "E", "N", "Dcd"], include_stop=True) == ("abEND", "END")


@pytest.mark.parametrize("parts", splits("aaab"), ids=str)
def test_repeated_prefix(parts: list[str]) -> None:
    """Stop "aab" in "aaab": the first "aa" is a false start that must not hide the match."""
    assert run(["aab"], parts) == ("a", "aab")


@pytest.mark.parametrize("parts", splits("abababc"), ids=str)
def test_self_overlapping_stop(parts: list[str]) -> None:
    assert run(["ababc"], parts) == ("ab", "ababc")


@pytest.mark.parametrize("parts", splits("xaaaax"), ids=str)
def test_stop_of_one_repeated_char(parts: list[str]) -> None:
    assert run(["aa"], parts) == ("x", "aa")


def test_no_match_flushes_everything() -> None:
    assert run(["END"], ["E", "N", "E", "N"]) == ("ENEN", None)


def test_stop_at_the_very_start() -> None:
    assert run(["END"], ["END", "x"]) == ("", "END")


@pytest.mark.parametrize(
    ("stops", "text", "include_stop", "expected"),
    [
        # "bc" is completed (by "c") before "abcd" could be; char by char gives "a".
        (["abcd", "bc"], "abcd", False, ("a", "bc")),
        (["bc", "abcd"], "abcd", False, ("a", "bc")),
        (["xyz", "y"], "xyz", False, ("x", "y")),
        # "ab" is completed before "abc"; with include_stop the emitted text differs.
        (["abc", "ab"], "abc", True, ("ab", "ab")),
    ],
)
def test_result_does_not_depend_on_token_boundaries(
    stops: list[str], text: str, include_stop: bool, expected: tuple[str, str]
) -> None:
    """One stop inside another: the outcome must be the same however the text is chunked."""
    assert reference(stops, text, include_stop=include_stop) == expected
    results = {tuple(parts): run(stops, parts, include_stop=include_stop) for parts in splits(text)}
    assert results == dict.fromkeys(results, expected)


# --- property-style: random texts, random stops, random split points ---


def _random_split(rng: random.Random, text: str) -> list[str]:
    cuts = (
        sorted(rng.sample(range(1, len(text)), rng.randint(0, len(text) - 1)))
        if len(text) > 1
        else []
    )
    bounds = [0, *cuts, len(text)]
    parts = [text[a:b] for a, b in itertools.pairwise(bounds)]
    # Sometimes feed empty strings too, as a detokenizer does for partial characters.
    for _ in range(rng.randint(0, 2)):
        parts.insert(rng.randint(0, len(parts)), "")
    return parts


def _substring_free(stops: list[str]) -> bool:
    return not any(a != b and a in b for a in stops for b in stops)


def _longest_partial(text: str, stops: list[str]) -> int:
    for n in range(len(text), 0, -1):
        if any(len(s) > n and s.startswith(text[-n:]) for s in stops):
            return n
    return 0


def _check(stops: list[str], text: str, parts: list[str], include_stop: bool) -> None:
    expected, expected_stop = reference(stops, text, include_stop=include_stop)
    hold_max = max(len(s) for s in stops) - 1
    matcher = StopMatcher(stops, include_stop=include_stop)
    fed = emitted = ""
    for part in parts:
        fed += part
        emitted += matcher.feed(part)
        # Never ahead of the answer: nothing emitted is later found to belong to a stop.
        assert expected.startswith(emitted), (stops, text, parts, emitted)
        if not include_stop:
            assert not any(s in emitted for s in stops), (stops, text, parts, emitted)
        if matcher.matched is not None:
            break
        # Never more held back than needed, and never more than the longest stop minus one.
        held = len(fed) - len(emitted)
        assert held == _longest_partial(fed, stops), (stops, text, parts, emitted)
        assert held <= hold_max
    else:
        emitted += matcher.flush()
    assert (emitted, matcher.matched) == (expected, expected_stop), (stops, text, parts)


@pytest.mark.parametrize("seed", range(20))
def test_random_texts_and_splits(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    while checked < 250:
        alphabet = rng.choice(["ab", "abc", "ab\n", "xyz<|>"])
        stops = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(1, 3))
        ]
        stops = list(dict.fromkeys(stops))
        if not _substring_free(stops):
            continue  # one stop inside another: see test_result_does_not_depend_on_token_boundaries
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        include_stop = rng.random() < 0.3
        for _ in range(4):
            _check(stops, text, _random_split(rng, text), include_stop)
        _check(stops, text, list(text), include_stop)
        _check(stops, text, [text], include_stop)
        checked += 1


@pytest.mark.parametrize("seed", range(5))
def test_random_texts_single_stop(seed: int) -> None:
    rng = random.Random(1000 + seed)
    for _ in range(300):
        stop = "".join(rng.choice("aab") for _ in range(rng.randint(1, 6)))
        text = "".join(rng.choice("ab") for _ in range(rng.randint(0, 25)))
        for _ in range(3):
            _check([stop], text, _random_split(rng, text), False)


def test_random_texts_with_any_stops() -> None:
    """Like test_random_texts_and_splits, but stops may contain one another."""
    rng = random.Random(77)
    for _ in range(1500):
        alphabet = rng.choice(["ab", "abc"])
        stops = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(1, 3))
        ]
        stops = list(dict.fromkeys(stops))
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        include_stop = rng.random() < 0.3
        for parts in ([text], list(text), _random_split(rng, text)):
            _check(stops, text, parts, include_stop)


# --- many stop strings: one automaton for all of them ---


@pytest.mark.parametrize("seed", range(4))
def test_many_stops_match_like_the_reference(seed: int) -> None:
    """Dozens of stops that overlap and contain one another, fed in random pieces."""
    rng = random.Random(500 + seed)
    for _ in range(60):
        alphabet = rng.choice(["ab", "abc", "a\nb<|>"])
        stops = list(
            dict.fromkeys(
                "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
                for _ in range(rng.randint(10, 64))
            )
        )
        text = "".join(rng.choice(alphabet + "xyz") for _ in range(rng.randint(0, 60)))
        include_stop = rng.random() < 0.3
        for parts in ([text], list(text), _random_split(rng, text)):
            _check(stops, text, parts, include_stop)


def test_stops_beyond_the_basic_plane() -> None:
    for parts in (["a😀b🎉c"], list("a😀b🎉c"), ["a😀", "b🎉c"]):
        assert run(["b🎉", "😀x"], parts) == ("a😀", "b🎉")
    assert run(["🎉🎉"], ["x🎉", "y"]) == ("x🎉y", None)
    matcher = StopMatcher(["é🎉"])
    assert matcher.feed("caféé") == "café"  # the last é could begin the stop
    assert matcher.feed("🎉 rest") == "" and matcher.matched == "é🎉"


def test_duplicate_stops_and_regex_characters_are_plain_text() -> None:
    assert run(["]", "]", "^", "\\", "-"], ["ab", "c]d"]) == ("abc", "]")
    assert run(["[a-z]"], ["x[a-", "z]y"]) == ("x", "[a-z]")
    assert run(["a.c"], ["abc a.c"]) == ("abc ", "a.c")


def test_a_stop_found_while_min_tokens_holds_can_still_end_the_answer_later() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("xEN", check=False) == "x"  # held: could begin the stop
    assert matcher.feed("D tail", check=True) == "" and matcher.matched == "END"
