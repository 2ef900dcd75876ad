"""fold_chunk: text deltas of one request fold; anything a client may act on does not."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from realtime.chat.coalesce import fold_chunk
from realtime.chat.delta import DeltaGenerator
from realtime.model.generation import FinishReason
from realtime.protocol.output import ReasoningDelta, ToolCallStart


def _gen(**kwargs: Any) -> DeltaGenerator:
    kwargs.setdefault("completion_id", "chatcmpl-x")
    return DeltaGenerator(model="m", prompt_tokens=3, **kwargs)


def _text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_content_chunks_fold_into_the_same_text() -> None:
    gen = _gen()
    first = gen.content_chunk("Hel")
    second = gen.content_chunk("lo")
    assert first is not None and second is not None
    assert fold_chunk(first, second)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "Hello"}
    assert first["choices"][0]["finish_reason"] is None


def test_folding_keeps_the_text_of_a_whole_stream() -> None:
    gen = _gen(include_usage=True)
    chunks = [c for piece in ("a", "b", " c", "d") if (c := gen.content_chunk(piece))]
    expected = _text(copy.deepcopy(chunks))
    head = chunks[0]
    for later in chunks[1:]:
        assert fold_chunk(head, later)
    assert _text([head]) == expected == "ab cd"
    assert head["usage"] is None


def test_logprobs_concatenate_in_order() -> None:
    gen = _gen(logprobs=True)
    lp = [{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}]
    lq = [{"token": "b", "logprob": -0.2, "bytes": [98], "top_logprobs": []}]
    first, second = gen.content_chunk("a", lp), gen.content_chunk("b", lq)
    assert first is not None and second is not None
    assert fold_chunk(first, second)
    assert first["choices"][0]["logprobs"] == {"content": lp + lq, "refusal": None}


def test_continuous_usage_keeps_the_later_figure() -> None:
    gen = _gen(include_usage=True, continuous_usage=True)
    gen.add_tokens([1])
    first = gen.content_chunk("a")
    gen.add_tokens([2])
    second = gen.content_chunk("b")
    assert first is not None and second is not None
    assert fold_chunk(first, second)
    assert first["usage"]["completion_tokens"] == 2


def test_reasoning_folds_with_reasoning_only() -> None:
    gen = _gen()
    [first] = gen.event_chunks([ReasoningDelta("think")])
    [second] = gen.event_chunks([ReasoningDelta("ing")])
    content = gen.content_chunk("answer")
    assert content is not None
    assert not fold_chunk(second, content)
    assert fold_chunk(first, second)
    assert first["choices"][0]["delta"] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "thinking",
    }


@pytest.mark.parametrize("case", ["finish", "tool_call", "other_id", "logprobs_mismatch"])
def test_what_must_not_fold(case: str) -> None:
    gen = _gen(logprobs=case == "logprobs_mismatch")
    first = gen.content_chunk("a")
    assert first is not None
    before = copy.deepcopy(first)
    if case == "finish":
        later = gen.finish_chunks(FinishReason.EOS)[0]
    elif case == "tool_call":
        [later] = gen.event_chunks([ToolCallStart(0, "call_1", "f")])
    elif case == "other_id":
        later = _gen(completion_id="chatcmpl-y").content_chunk("b") or {}
        later["choices"][0]["delta"].pop("role")
    else:
        later = gen.content_chunk("b", [{"token": "b", "logprob": 0.0, "top_logprobs": []}])
        assert later is not None
        first["choices"][0]["logprobs"] = None
        before = copy.deepcopy(first)
    assert not fold_chunk(first, later)
    assert first == before
