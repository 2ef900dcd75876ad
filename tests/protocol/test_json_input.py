"""The JSON nesting check: where the limit lies, what the error names, what it skips."""

from __future__ import annotations

import gc
import pickle
from collections.abc import Callable

import orjson
import pytest

from realtime.protocol.json_input import (
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_JSON_VALUES,
    JsonTooDeepError,
    TooManyJsonValuesError,
    check_shape,
    decode_checked,
    decoded_as,
    load_json,
    parse_json,
)


def objects(depth: int) -> str:
    """`depth` nested objects: {"a": {"a": ... 1}}."""
    return '{"a":' * depth + "1" + "}" * depth


def arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("make", [objects, arrays])
def test_the_limit_counts_the_outermost_container_as_level_one(make: Callable[[int], str]) -> None:
    assert load_json(make(64), 64) is not None
    with pytest.raises(JsonTooDeepError):
        load_json(make(65), 64)
    assert load_json(make(3), 3) is not None
    with pytest.raises(JsonTooDeepError):
        load_json(make(4), 3)


def test_scalars_and_empty_containers_have_no_depth_to_speak_of() -> None:
    for text in ("1", '"x"', "null", "{}", "[]"):
        assert load_json(text, 1) == orjson.loads(text)


def test_the_error_names_the_first_keys_on_the_way_down() -> None:
    body = '{"model": "m", "messages": [{"role": "user", "x": ' + objects(80) + "}]}"
    with pytest.raises(JsonTooDeepError) as info:
        load_json(body, DEFAULT_MAX_JSON_DEPTH)
    error = info.value
    assert error.param == "messages.0.x.a"
    assert error.code == "json_too_deep" and error.status == 400
    assert error.message.startswith("messages.0.x.a: JSON nested deeper than 64 levels")


def test_a_deep_branch_is_found_among_wide_shallow_ones() -> None:
    shallow = ", ".join(f'"k{i}": [1, 2, {{"b": [3]}}]' for i in range(200))
    body = "{" + shallow + ', "deep": {"list": [0, ' + arrays(70) + "]}}"
    with pytest.raises(JsonTooDeepError) as info:
        load_json(body, 64)
    assert info.value.param == "deep.list.1.0"  # at most four elements


def test_wide_documents_within_the_limit_pass() -> None:
    wide = orjson.dumps({"a": [{"b": i, "c": [i, {"d": i}]} for i in range(20_000)]})
    check_shape(orjson.loads(wide), 5)
    with pytest.raises(JsonTooDeepError):
        check_shape(orjson.loads(wide), 4)


def test_deeper_than_the_decoder_goes_is_the_same_error_without_a_param() -> None:
    with pytest.raises(JsonTooDeepError) as info:
        parse_json(arrays(5000), 64)
    assert info.value.param is None
    assert (
        info.value.message == "JSON nested deeper than 64 levels (this server's --max-json-depth)"
    )


def test_text_that_is_not_json_is_left_to_the_caller() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        parse_json("{not json", 64)
    with pytest.raises(orjson.JSONDecodeError):
        parse_json(b"", 64)


def test_parsing_leaves_the_garbage_collector_as_it_found_it() -> None:
    assert gc.isenabled()
    load_json(objects(10), 64)
    assert gc.isenabled()
    with pytest.raises(orjson.JSONDecodeError):
        parse_json("[", 64)
    assert gc.isenabled()
    gc.disable()
    try:
        load_json("[1]", 64)
        assert not gc.isenabled()
    finally:
        gc.enable()


# --- the value count ---


def test_values_up_to_the_limit_pass_and_one_more_is_refused() -> None:
    # The body counts one, `a` one, and each of its items one.
    check_shape(orjson.loads('{"a": [1, 2, 3]}'), 64, 5)
    with pytest.raises(TooManyJsonValuesError) as info:
        check_shape(orjson.loads('{"a": [1, 2, 3, 4]}'), 64, 5)
    error = info.value
    assert (error.param, error.code, error.status) == ("a", "too_many_json_values", 400)
    assert error.message == (
        "a: more than 5 JSON values in one request (this server's --max-json-values)"
    )


def test_the_field_named_is_the_one_holding_most() -> None:
    body = {"model": "m", "messages": [{"x": [0] * 10}], "stop": ["a"] * 30, "n": 1}
    with pytest.raises(TooManyJsonValuesError) as info:
        check_shape(body, 64, 40)
    assert info.value.param == "stop"
    with pytest.raises(TooManyJsonValuesError) as info:
        check_shape([0] * 50, 64, 40)
    assert info.value.param is None


def test_a_huge_flat_array_is_refused_without_walking_it() -> None:
    body = orjson.loads(b'{"messages": [{"zeros": [' + b"0," * 999_999 + b"0]}]}")
    with pytest.raises(TooManyJsonValuesError) as info:
        load_json(orjson.dumps(body), 64, DEFAULT_MAX_JSON_VALUES)
    assert info.value.param == "messages"


# --- decoded elsewhere: `decode_checked` and what comes back from the decode process ---

DOCUMENTS = [
    b'{"request_id": "r", "messages": [1, 2, 3]}',
    b'{"request_id": "r", "zeros": [' + b",".join([b"0"] * 50) + b"]}",
    b'{"type": "x", "deep": ' + b"[" * 10 + b"]" * 10 + b"}",
    b"[" * 2000 + b"]" * 2000,
    b'{"a": [1, 2',
    b"not json",
    b'"just a string"',
]


def _outcome(call: Callable[[], object]) -> tuple[str, object]:
    try:
        return "value", call()
    except orjson.JSONDecodeError as exc:
        return "syntax", str(exc)
    except (JsonTooDeepError, TooManyJsonValuesError) as exc:
        return type(exc).__name__, (str(exc), exc.param, exc.code)


@pytest.mark.parametrize("raw", DOCUMENTS)
def test_a_document_decoded_elsewhere_gets_what_load_json_gives_or_raises(raw: bytes) -> None:
    """Through pickling (the trip back from the decode process), for a body and a frame."""
    direct = _outcome(lambda: load_json(raw, 8, 20))
    decoded = pickle.loads(pickle.dumps(decode_checked(raw, 8, 20)))
    assert _outcome(decoded.checked_value) == direct
    text = raw.decode()
    with decoded_as(text, decoded):
        assert _outcome(lambda: load_json(text, 8, 20)) == direct


def test_a_refused_document_keeps_only_its_envelope_for_the_dialect() -> None:
    """A frame refused for its shape can still be answered by its id, and brings back
    none of the values that broke the limit."""
    raw = b'{"request_id": "r7", "type": "response.create", "zeros": [' + b"0," * 99 + b"0]}"
    text = raw.decode()
    with decoded_as(text, pickle.loads(pickle.dumps(decode_checked(raw, 8, 20)))):
        envelope = parse_json(text, 8)
    assert envelope == {"request_id": "r7", "type": "response.create"}
    with pytest.raises(TooManyJsonValuesError) as refused:
        check_shape(envelope, 8, 20)
    assert refused.value.param == "zeros"


def test_only_the_very_text_decoded_elsewhere_is_answered_from_it() -> None:
    """An equal string, or the same one outside the block, is decoded as usual."""
    text = '{"a": 1}'
    other = "".join(['{"a": ', "1}"])
    with decoded_as(text, decode_checked(b'{"a": 2}', 8, 20)):
        assert parse_json(text, 8) == {"a": 2}
        assert parse_json(other, 8) == {"a": 1}
    assert parse_json(text, 8) == {"a": 1}
