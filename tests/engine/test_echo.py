"""The echo model: a reversible vocabulary-free tokenizer and a counting, cancellable engine."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realtime.engine.base import Engine, EngineOutput, EngineRequest, StopConditions
from realtime.engine.echo import ECHO_TEMPLATE, EchoEngine, EchoTokenizer
from realtime.engine.errors import EngineFailure, EngineUnavailable
from realtime.engine.recent import RECENT_REQUESTS
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.tokenizer import fewest_tokens

TEXTS = [
    "",
    "a",
    "hello",
    "Hello, world! How are you today?",
    "supercalifragilisticexpialidocious",
    "   leading and trailing   ",
    "tabs\tand\t\tmore\t",
    "line one\nline two\r\n\n\nend\n",
    "    ",
    "\n",
    "emoji \U0001f389\U0001f389\U0001f389 party \U0001f468\u200d\U0001f469\u200d\U0001f467 family",
    "\u4e2d\u6587\u6587\u672c\u6d4b\u8bd5\uff0c\u8fd8\u6709\u6807\u70b9\u3002",
    "caf\u00e9 cafe\u0301 n\u0303 a\u0308\u0301\u0323",
    "\u0301 leading combining mark",
    "mixed\u00e9\u4e2d\U0001f389aZ \u00a0nbsp\u3000ideographic space",
    "nul\x00byte and \x01 control \x7f",
    "\ufeffBOM and \uffff max BMP and \U0010ffff max",
    "x" * 1000,
    "\U0001f389" * 50,
]


@pytest.fixture
def tok() -> EchoTokenizer:
    return EchoTokenizer()


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tok: EchoTokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert tok.decode(ids) == text


@pytest.mark.parametrize("text", TEXTS)
def test_ids_and_pieces_are_bounded(tok: EchoTokenizer, text: str) -> None:
    for token_id in tok.encode(text):
        assert 0 < token_id < 2**56
        raw = token_id.to_bytes((token_id.bit_length() + 7) // 8, "big")
        assert raw[0] == 0x01
        piece = tok.token_text(token_id)
        assert 1 <= len(piece.encode("utf-8")) <= 6
        assert piece.encode("utf-8") == raw[1:]


@pytest.mark.parametrize("text", TEXTS)
def test_decode_stream_gives_the_same_text(tok: EchoTokenizer, text: str) -> None:
    stream = tok.decode_stream()
    pieces = [stream.step(t) for t in tok.encode(text)]
    assert all(p for p in pieces)
    assert "".join(p or "" for p in pieces) == text


def test_exhaustive_small_alphabet_round_trip(tok: EchoTokenizer) -> None:
    """Every string of length <= 4 over characters of each UTF-8 width and whitespace."""
    alphabet = ["a", " ", "\n", "\u00e9", "\u4e2d", "\U0001f389", "\u0301"]
    texts = [""]
    for _ in range(4):
        texts = [t + c for t in texts for c in alphabet] + texts
    for text in set(texts):
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert all(len(tok.token_text(t).encode()) <= 6 for t in ids)


def test_pieces(tok: EchoTokenizer) -> None:
    assert [tok.token_text(t) for t in tok.encode("hello world")] == ["hello", " world"]
    assert [tok.token_text(t) for t in tok.encode("abcdefgh ij")] == ["abcdef", "gh", " ij"]
    assert [tok.token_text(t) for t in tok.encode("a  b\n")] == ["a", "  b", "\n"]
    # Multi-byte characters are never split: 3 x 2-byte, then 2 x 3-byte, then 4-byte alone.
    assert [tok.token_text(t) for t in tok.encode("\u00e9\u00e9\u00e9\u00e9")] == [
        "\u00e9\u00e9\u00e9",
        "\u00e9",
    ]
    assert [tok.token_text(t) for t in tok.encode("\u4e2d\u4e2d\u4e2d")] == [
        "\u4e2d\u4e2d",
        "\u4e2d",
    ]
    assert [tok.token_text(t) for t in tok.encode("\U0001f389\U0001f389")] == [
        "\U0001f389",
        "\U0001f389",
    ]


def test_token_id_encoding(tok: EchoTokenizer) -> None:
    assert tok.encode("a") == [0x0161]
    assert tok.encode("hi") == [0x016869]
    assert tok.token_text(0x0161) == "a"


def test_no_eos_tokens(tok: EchoTokenizer) -> None:
    assert tok.eos_token_ids == frozenset()


# --- the model: template ---


def test_info_and_template() -> None:
    engine = EchoEngine(model_name="echo-x", context_length=99)
    info = engine.info
    assert info.name == "echo-x"
    assert info.context_length == 99
    assert info.owned_by == "realtime"
    assert isinstance(info.tokenizer, EchoTokenizer)
    assert info.chat_template.source == ECHO_TEMPLATE
    assert isinstance(engine, Engine)


def test_template_renders_the_last_user_message() -> None:
    template = EchoEngine().info.chat_template
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "se"},
                {"type": "image_url"},
                {"type": "text", "text": "cond"},
            ],
        },
        {"role": "assistant", "content": "later"},
    ]
    assert template.render(messages) == "second"
    assert template.render([{"role": "system", "content": "only"}]) == ""
    assert template.render([{"role": "user", "content": "  keep\nspaces  "}]) == "  keep\nspaces  "


# --- the model: engine ---


async def collect(engine: EchoEngine, request: EngineRequest) -> list[EngineOutput]:
    return [out async for out in engine.generate(request)]


@pytest.fixture
async def engine() -> EchoEngine:
    engine = EchoEngine()
    await engine.start()
    return engine


@pytest.mark.anyio
async def test_ready_lifecycle() -> None:
    engine = EchoEngine()
    assert engine.ready is False
    await engine.start()
    assert engine.ready is True
    engine.unavailable = "GPU fell off the bus"
    assert engine.ready is False
    engine.unavailable = None
    await engine.close()
    assert engine.ready is False


@pytest.mark.anyio
async def test_generates_the_prompt_back(engine: EchoEngine) -> None:
    outputs = await collect(engine, EngineRequest("r1", [11, 12, 13]))
    assert outputs == [
        EngineOutput([11], None, None, cached_tokens=0),
        EngineOutput([12], None, None),
        EngineOutput([13], None, FinishReason.EOS),
    ]
    stats = engine.stats
    assert stats.requests_started == 1
    assert stats.requests_finished == 1
    assert stats.requests_cancelled == 0
    assert stats.tokens_generated == 3
    assert stats.active == 0
    assert stats.tokens_by_request == {"r1": 3}


@pytest.mark.anyio
async def test_empty_prompt_finishes_with_eos(engine: EchoEngine) -> None:
    outputs = await collect(engine, EngineRequest("r", []))
    assert outputs == [EngineOutput([], None, FinishReason.EOS, cached_tokens=0)]
    assert engine.stats.requests_finished == 1
    assert engine.stats.tokens_generated == 0


@pytest.mark.anyio
async def test_max_tokens_finishes_with_length(engine: EchoEngine) -> None:
    request = EngineRequest("r", [1, 2, 3, 4], stop=StopConditions(max_tokens=2))
    outputs = await collect(engine, request)
    assert [o.token_ids for o in outputs] == [[1], [2]]
    assert [o.finish_reason for o in outputs] == [None, FinishReason.LENGTH]
    assert engine.stats.tokens_generated == 2
    assert engine.stats.requests_finished == 1


@pytest.mark.anyio
async def test_max_tokens_equal_to_prompt_is_length(engine: EchoEngine) -> None:
    outputs = await collect(engine, EngineRequest("r", [1, 2], stop=StopConditions(max_tokens=2)))
    assert outputs[-1].finish_reason is FinishReason.LENGTH


@pytest.mark.anyio
async def test_stop_token_ids_finish_with_stop(engine: EchoEngine) -> None:
    request = EngineRequest("r", [1, 2, 3, 4], stop=StopConditions(stop_token_ids=[3, 9]))
    outputs = await collect(engine, request)
    assert [o.token_ids for o in outputs] == [[1], [2], [3]]
    assert outputs[-1].finish_reason is FinishReason.STOP
    assert engine.stats.requests_finished == 1


@pytest.mark.anyio
async def test_stop_token_respects_min_tokens(engine: EchoEngine) -> None:
    request = EngineRequest(
        "r", [7, 7, 7, 8], stop=StopConditions(stop_token_ids=[7], min_tokens=2)
    )
    outputs = await collect(engine, request)
    assert [o.token_ids for o in outputs] == [[7], [7], [7]]
    assert outputs[-1].finish_reason is FinishReason.STOP


@pytest.mark.anyio
async def test_logprobs(engine: EchoEngine) -> None:
    outputs = await collect(engine, EngineRequest("r", [5, 6], logprobs=3))
    assert [o.logprobs for o in outputs] == [
        [TokenLogprob(5, 0.0, [(5, 0.0)])],
        [TokenLogprob(6, 0.0, [(6, 0.0)])],
    ]


@pytest.mark.anyio
async def test_logprobs_zero_still_reports_the_sampled_token(engine: EchoEngine) -> None:
    outputs = await collect(engine, EngineRequest("r", [5], logprobs=0))
    assert outputs[0].logprobs == [TokenLogprob(5, 0.0, [(5, 0.0)])]


@pytest.mark.anyio
async def test_closing_early_counts_as_cancelled_and_stops(engine: EchoEngine) -> None:
    prompt = list(range(1, 101))
    async with aclosing(engine.generate(EngineRequest("c", prompt))) as outputs:
        seen = 0
        async for _ in outputs:
            seen += 1
            assert engine.stats.active == 1
            if seen == 3:
                break
    for _ in range(5):
        await asyncio.sleep(0)
    stats = engine.stats
    assert stats.requests_started == 1
    assert stats.requests_cancelled == 1
    assert stats.requests_finished == 0
    assert stats.active == 0
    assert stats.tokens_generated == 3
    assert stats.tokens_by_request == {"c": 3}


@pytest.mark.anyio
async def test_closing_right_after_the_final_output_counts_as_finished(engine: EchoEngine) -> None:
    """The pipeline stops iterating once it sees a finish reason and closes the iterator."""
    for request in (
        EngineRequest("eos", [1, 2]),
        EngineRequest("len", [1, 2, 3], stop=StopConditions(max_tokens=2)),
        EngineRequest("stop", [1, 2, 3], stop=StopConditions(stop_token_ids=[2])),
    ):
        async with aclosing(engine.generate(request)) as outputs:
            async for out in outputs:
                if out.finish_reason is not None:
                    break
    assert engine.stats.requests_finished == 3
    assert engine.stats.requests_cancelled == 0
    assert engine.stats.active == 0


@pytest.mark.anyio
async def test_concurrent_requests_are_counted_separately(engine: EchoEngine) -> None:
    results = await asyncio.gather(
        collect(engine, EngineRequest("a", [1, 2, 3])),
        collect(engine, EngineRequest("b", [4, 5])),
    )
    assert [[o.token_ids for o in r] for r in results] == [[[1], [2], [3]], [[4], [5]]]
    assert engine.stats.tokens_by_request == {"a": 3, "b": 2}
    assert engine.stats.tokens_generated == 5
    assert engine.stats.requests_finished == 2
    assert engine.stats.active == 0


@pytest.mark.anyio
async def test_unavailable_raises(engine: EchoEngine) -> None:
    engine.unavailable = "model not loaded"
    with pytest.raises(EngineUnavailable) as info:
        await collect(engine, EngineRequest("r", [1, 2]))
    assert info.value.message == "engine unavailable: model not loaded"
    assert engine.stats.requests_started == 0
    assert engine.stats.tokens_generated == 0
    assert engine.stats.active == 0


@pytest.mark.anyio
async def test_fail_after_tokens_raises_mid_stream(engine: EchoEngine) -> None:
    engine.fail_after_tokens = 2
    seen: list[list[int]] = []
    with pytest.raises(EngineFailure) as info:
        async for out in engine.generate(EngineRequest("r", [1, 2, 3, 4])):
            seen.append(out.token_ids)
    assert type(info.value) is EngineFailure
    assert info.value.message == "echo engine: injected failure"
    assert seen == [[1], [2]]
    assert engine.stats.tokens_generated == 2
    assert engine.stats.requests_finished == 0
    assert engine.stats.active == 0


@pytest.mark.anyio
async def test_fail_after_tokens_beyond_the_prompt_does_not_fail(engine: EchoEngine) -> None:
    engine.fail_after_tokens = 3
    outputs = await collect(engine, EngineRequest("r", [1, 2, 3]))
    assert outputs[-1].finish_reason is FinishReason.EOS


@pytest.mark.anyio
async def test_per_request_counts_keep_only_the_most_recent_requests(engine: EchoEngine) -> None:
    """One entry per request kept forever was a leak (about 200 bytes a request)."""
    for n in range(RECENT_REQUESTS + 500):
        await collect(engine, EngineRequest(f"r{n}", [11, 12]))
    counts = engine.stats.tokens_by_request
    assert len(counts) == RECENT_REQUESTS
    last = RECENT_REQUESTS + 499
    assert counts[f"r{last}"] == 2 and "r0" not in counts
    assert engine.stats.requests_finished == RECENT_REQUESTS + 500


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_the_tokenizer_floor_never_exceeds_the_real_count(text: str) -> None:
    echo = EchoTokenizer()
    assert echo.fewest_tokens(text) <= len(echo.encode(text))
    assert fewest_tokens(echo, text) == echo.fewest_tokens(text)
    dense = "abcdef" * 100  # six characters a token: the floor is exact
    assert echo.fewest_tokens(dense) == len(echo.encode(dense)) == 100


@pytest.mark.anyio
@pytest.mark.parametrize("per_step", [1, 4])
async def test_tokens_per_step_is_how_many_tokens_one_loop_pass_generates(per_step: int) -> None:
    engine = EchoEngine(tokens_per_step=per_step)
    await engine.start()
    prompt = EchoTokenizer().encode(" word" * 10)
    passes = 0
    stop = asyncio.Event()

    async def count_passes() -> None:
        nonlocal passes
        while not stop.is_set():
            passes += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_passes())
    await asyncio.sleep(0)
    seen: list[tuple[int, int]] = []  # (pass, token count) of each output
    async with aclosing(engine.generate(EngineRequest("r", prompt))) as outputs:
        async for out in outputs:
            seen.append((passes, len(out.token_ids)))
    stop.set()
    await counter
    assert all(count == 1 for _, count in seen)  # each token is still its own output
    by_pass = [sum(1 for p, _ in seen if p == n) for n in sorted({p for p, _ in seen})]
    assert by_pass == [per_step] * (10 // per_step) + ([10 % per_step] if 10 % per_step else [])


def test_tokens_per_step_must_be_positive() -> None:
    with pytest.raises(ValueError, match="tokens_per_step"):
        EchoEngine(tokens_per_step=0)
