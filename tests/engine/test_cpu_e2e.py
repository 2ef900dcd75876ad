"""The CPU engine behind the real server: the `openai` SDK over HTTP, `websockets` on
/v1/realtime, the tiny model underneath. Token ids come back through
`nvext.extra_fields`; work is proven by the engine's counters, never by timing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import httpx  # noqa: E402
import openai  # noqa: E402
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from tests.conftest import RunningServer, start_server, wait_until  # noqa: E402
from tests.served_engines import CPU_MODES, cpu_engine, in_process  # noqa: E402

MODEL = "tiny"
TEXT = "Write a short poem about the sea and the wind, please."


@pytest.fixture(scope="module", params=CPU_MODES)
def server(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, request.param, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


@pytest.fixture
def sdk(server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        yield client


def engine_of(server: RunningServer) -> Any:
    """The served cpu engine: `CpuEngine`, or the `EngineProxy` of one in its own process."""
    return server.engine


def prompt_ids(server: RunningServer, text: str) -> list[int]:
    info = engine_of(server).info
    return info.tokenizer.encode(info.chat_template.render([{"role": "user", "content": text}]))


def greedy_with_logits(model: Any, prompt: list[int], n: int) -> tuple[list[int], list[Any]]:
    ids, logits = list(prompt), []
    with torch.inference_mode():
        for _ in range(n):
            step = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            logits.append(step)
            ids.append(int(torch.argmax(step)))
    return ids[len(prompt) :], logits


def user(text: str) -> Any:  # the SDK's message TypedDicts, or plain JSON
    return [{"role": "user", "content": text}]


def token_ids_of(completion: Any) -> list[int]:
    nvext = (completion.model_extra or {})["nvext"]
    ids: list[int] = nvext["completion_token_ids"]
    return ids


IDS = {"nvext": {"extra_fields": ["completion_token_ids"]}}


# --- HTTP with the openai SDK ---


def test_sdk_greedy_token_ids_logprobs_and_cached_tokens(
    server: RunningServer, sdk: openai.OpenAI, reference: Any
) -> None:
    text = "Greedy parity: " + TEXT
    prompt = prompt_ids(server, text)
    body: dict[str, Any] = dict(
        model=MODEL,
        messages=user(text),
        temperature=0,
        max_tokens=8,
        logprobs=True,
        top_logprobs=2,
        extra_body={"ignore_eos": True, **IDS},
    )
    first = sdk.chat.completions.create(**body)
    expected, logits = greedy_with_logits(reference, prompt, 8)
    assert token_ids_of(first) == expected
    assert first.choices[0].finish_reason == "length"
    assert first.usage is not None
    assert first.usage.prompt_tokens == len(prompt) and first.usage.completion_tokens == 8
    assert first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    content = first.choices[0].logprobs.content
    assert content is not None and len(content) == 8
    for entry, token, step in zip(content, expected, logits, strict=True):
        logprobs = torch.log_softmax(step, dim=-1)
        assert entry.logprob == pytest.approx(float(logprobs[token]), abs=1e-4)
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)

    again = sdk.chat.completions.create(**body)
    assert token_ids_of(again) == expected
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached == len(prompt) - 1  # everything but the token whose logits pick the first
    stats = engine_of(server).stats.request(again.id)
    assert stats.prefill_reused == cached and stats.prefill_computed == 1


def test_sdk_seeded_sampling_is_deterministic(sdk: openai.OpenAI) -> None:
    def sample(seed: int) -> list[int]:
        completion = sdk.chat.completions.create(
            model=MODEL,
            messages=user("Seeds: " + TEXT),
            temperature=1.0,
            seed=seed,
            max_tokens=10,
            extra_body={"ignore_eos": True, **IDS},
        )
        return token_ids_of(completion)

    first = sample(11)
    assert sample(11) == first
    assert sample(12) != first


def spanning_stop(server: RunningServer, ids: list[int]) -> tuple[str, str]:
    """A 4-character stop string across a token boundary, first seen there; and the text."""
    tokenizer = engine_of(server).info.tokenizer
    full = tokenizer.decode(ids)
    for k in range(1, len(ids)):
        before = tokenizer.decode(ids[:k])
        b = len(before)
        stop = full[b - 2 : b + 2]
        if (
            full.startswith(before)
            and b >= 2
            and len(stop) == 4
            and "\ufffd" not in full[: b + 2]
            and full.find(stop) == b - 2
            and tokenizer.decode(ids[k - 1 : k])  # the boundary is between two real pieces
        ):
            return stop, full
    raise AssertionError(f"no usable token boundary in {full!r}")


def test_a_stop_string_across_tokens_never_leaks(server: RunningServer, sdk: openai.OpenAI) -> None:
    messages = user("Stops: " + TEXT)
    free = sdk.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0,
        max_tokens=24,
        extra_body={"ignore_eos": True, **IDS},
    )
    stop, full = spanning_stop(server, token_ids_of(free))
    stream: Any = sdk.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0,
        max_tokens=24,
        stop=[stop],
        stream=True,
        extra_body={"ignore_eos": True},
    )
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    streamed = "".join(pieces)
    assert streamed == full[: full.index(stop)]
    assert finish == "stop"


# --- /v1/realtime with websockets ---


def frame(request_id: str, text: str, **extra: Any) -> str:
    body: dict[str, Any] = {"type": "response.create", "request_id": request_id, "model": MODEL}
    return json.dumps({**body, "messages": user(text), **extra})


async def frames_until_done(ws: ClientConnection) -> list[dict[str, Any]]:
    frames = []
    while True:
        got = json.loads(await ws.recv())
        frames.append(got)
        if got.get("type") in ("response.done", "error"):
            return frames


def contents(frames: list[dict[str, Any]]) -> list[str]:
    return [
        f["choices"][0]["delta"].get("content") or ""
        for f in frames
        if f.get("object") == "chat.completion.chunk" and f["choices"]
    ]


@pytest.mark.anyio
async def test_multibyte_characters_stream_whole(server: RunningServer) -> None:
    tokenizer = engine_of(server).info.tokenizer
    text = "\u4e2d\U0001f389"  # a CJK character and an emoji: 3 + 4 UTF-8 bytes
    ids = tokenizer.encode(text)
    assert len(ids) > 2 and len(set(ids)) == len(ids)  # split into distinct byte pieces
    # Make greedy decoding spell exactly these ids: descending biases, and a repetition
    # penalty that halves a used id's (large, positive) logit.
    bias = {str(token): 100.0 - 5 * i for i, token in enumerate(ids)}
    async with connect(server.ws_url) as ws:
        await ws.send(
            frame(
                "mb",
                "Say something.",
                temperature=0,
                max_tokens=len(ids),
                logit_bias=bias,
                repetition_penalty=2.0,
                nvext={"extra_fields": ["completion_token_ids"]},
            )
        )
        frames = await frames_until_done(ws)
    final = next(f for f in frames if f.get("nvext"))
    assert final["nvext"]["completion_token_ids"] == ids
    pieces = [p for p in contents(frames) if p]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert len(pieces) <= 2 < len(ids)  # held back until each character was whole
    assert frames[-1]["type"] == "response.done" and frames[-1]["status"] == "completed"


@pytest.mark.anyio
async def test_a_cancel_on_the_socket_stops_the_forward_passes(server: RunningServer) -> None:
    engine = engine_of(server)
    async with connect(server.ws_url) as ws:
        await ws.send(frame("long", "Cancel me: " + TEXT, max_tokens=3000, ignore_eos=True))
        chunks: list[dict[str, Any]] = []
        while len(chunks) < 3:
            chunks.append(json.loads(await ws.recv()))
        completion_id = chunks[0]["id"]
        await ws.send(json.dumps({"type": "response.cancel", "request_id": "long"}))
        frames = await frames_until_done(ws)
        assert frames[-1]["type"] == "response.done" and frames[-1]["status"] == "cancelled"
        await asyncio.to_thread(wait_until, lambda: engine.stats.request(completion_id).cancelled)
        stopped_at = engine.stats.request(completion_id).forward_passes
        await ws.send(frame("next", "And now something short.", max_tokens=3))
        after = await frames_until_done(ws)
        assert after[-1]["status"] == "completed"
    assert engine.stats.request(completion_id).forward_passes == stopped_at
    assert stopped_at < 3000


class Gate:
    """Holds the engine's forward passes until opened (a long prefill, on demand)."""

    def __init__(self, model: Any):
        self.model = model
        self.open = threading.Event()
        self.entered = threading.Event()

    def __call__(self, **kwargs: Any) -> Any:
        self.entered.set()
        if not self.open.wait(timeout=60):
            raise RuntimeError("the test never opened the gate")
        return self.model(**kwargs)


@pytest.mark.anyio
async def test_a_long_prefill_does_not_stall_other_sockets(server: RunningServer) -> None:
    engine = engine_of(server)
    if not in_process(engine):
        pytest.skip("the engine process steps the model away from the event loop by design")
    backend = engine.backend
    assert backend is not None
    gate = Gate(backend.model)
    backend.model = gate
    try:
        async with connect(server.ws_url) as busy, connect(server.ws_url) as other:
            long_text = " ".join(f"paragraph {i} about tides and harbours" for i in range(120))
            await busy.send(frame("prefill", long_text, max_tokens=2))
            assert await asyncio.to_thread(gate.entered.wait, 30)
            # The engine thread is inside a forward pass; the server must still answer.
            pong = await other.ping()
            await asyncio.wait_for(pong, 30)
            async with httpx.AsyncClient(base_url=server.http_url) as http:
                health = await http.get("/health", timeout=30)
            assert health.status_code == 200
            assert not gate.open.is_set()
            gate.open.set()
            done = await frames_until_done(busy)
            assert done[-1]["type"] == "response.done" and done[-1]["status"] == "completed"
    finally:
        gate.open.set()
        backend.model = gate.model


# --- continuous batching through the real server ---


TOPICS = ("harbours", "tides", "storms", "gulls", "lanterns", "reefs", "currents", "fog")


def test_eight_concurrent_requests_share_passes_and_keep_their_token_ids(
    server: RunningServer,
) -> None:
    engine = engine_of(server)

    async def ask(client: openai.AsyncOpenAI, topic: str, salt: str) -> Any:
        return await client.chat.completions.create(
            model=MODEL,
            messages=user(f"Batching: a few words about {topic}."),
            temperature=0,
            max_tokens=48,
            extra_body={"ignore_eos": True, "cache_salt": salt, **IDS},
        )

    async def main() -> tuple[list[Any], list[Any]]:
        async with openai.AsyncOpenAI(
            base_url=server.http_url + "/v1", api_key="x", max_retries=0
        ) as client:
            # Alone, one after another; then all eight at once. Different salts keep the
            # second round from starting out of the first one's cached prefixes.
            alone = [await ask(client, topic, "alone") for topic in TOPICS]
            together = await asyncio.gather(*(ask(client, t, "together") for t in TOPICS))
            return alone, list(together)

    alone, together = asyncio.run(main())
    same = sum(token_ids_of(a) == token_ids_of(b) for a, b in zip(alone, together, strict=True))
    # A near tie may flip when float results differ in a batch; none does on this model.
    assert same >= 7, f"{8 - same} of 8 answers changed when batched"
    assert all(len(token_ids_of(c)) == 48 for c in together)
    batches = [engine.stats.request(c.id).largest_batch for c in together]
    assert max(batches) >= 4, batches  # they really shared forward passes
    assert all(engine.stats.request(c.id).largest_batch == 1 for c in alone)


@pytest.mark.anyio
async def test_a_cancel_in_a_batch_stops_only_that_sequence(server: RunningServer) -> None:
    engine = engine_of(server)
    async with connect(server.ws_url) as ws:
        for name in ("keep-1", "keep-2", "victim"):
            await ws.send(
                frame(name, f"Batch cancel {name}: " + TEXT, max_tokens=400, ignore_eos=True)
            )
        ids: dict[str, str] = {}
        seen: dict[str, int] = {}
        while seen.get("victim", 0) < 5:
            got = json.loads(await ws.recv())
            if got.get("object") == "chat.completion.chunk":
                ids[got["request_id"]] = got["id"]
                seen[got["request_id"]] = seen.get(got["request_id"], 0) + 1
        await ws.send(json.dumps({"type": "response.cancel", "request_id": "victim"}))
        statuses: dict[str, str] = {}
        while len(statuses) < 3:
            got = json.loads(await ws.recv())
            if got.get("type") == "response.done":
                statuses[got["request_id"]] = got["status"]
    victim = engine.stats.request(ids["victim"])
    await asyncio.to_thread(wait_until, lambda: victim.cancelled)
    stopped_at = victim.forward_passes
    await asyncio.to_thread(wait_until, lambda: engine.stats.requests_started > 0)
    assert statuses == {"victim": "cancelled", "keep-1": "completed", "keep-2": "completed"}
    assert engine.stats.request(ids["victim"]).forward_passes == stopped_at
    assert engine.stats.request(ids["victim"]).largest_batch >= 2
    assert all(engine.stats.request(ids[k]).tokens_generated == 400 for k in ("keep-1", "keep-2"))


def test_the_server_log_has_no_deprecation_warning(tiny_model_dir: Path) -> None:
    """`realtime serve --engine cpu` as an operator runs it: its log stays free of the
    model library's FutureWarning/DeprecationWarning, alone and batched."""
    argv = ["-m", "realtime", "serve", "--engine", "cpu", "--model", str(tiny_model_dir)]
    argv += ["--model-name", MODEL, "--port", "0", "--log-level", "info"]
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    try:
        assert proc.stdout is not None
        log: list[str] = []
        port = None
        while port is None and len(log) < 200:
            log.append(proc.stdout.readline())
            port = re.search(r"http://127\.0\.0\.1:(\d+)/v1", log[-1])
        assert port is not None, log
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{port[1]}/v1", api_key="x", max_retries=0
        ) as sdk:

            def ask(topic: str) -> None:
                sdk.chat.completions.create(
                    model=MODEL, messages=user(f"Warnings: {topic}"), max_tokens=6, temperature=0
                )

            ask("alone")
            threads = [threading.Thread(target=ask, args=(t,)) for t in TOPICS[:4]]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    log.append(out)
    text = "".join(log)
    assert "Warning" not in text and "deprecated" not in text, text[-3000:]
