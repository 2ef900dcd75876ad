"""vLLM's metric names on a real server's /metrics, parsed with prometheus_client's parser:
checked against the list read from vLLM 0.32's source, and watched as requests run on the
echo engine and on the cpu engine (the tiny model, its forward passes held by a gate)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.observability.vllm_metrics import NOT_EXPORTED, request_tokens_buckets
from tests.conftest import RunningServer, async_wait_until, scrape_metrics
from tests.ws.wsclient import chat, collect_until_terminal, recv_frame

pytestmark = pytest.mark.anyio

VLLM_LIST = Path(__file__).resolve().parents[1] / "observability" / "vllm_0_32_metrics.tsv"
LONG = " ".join(f"w{i}" for i in range(20))


def vllm_list() -> dict[str, tuple[str, list[str], str]]:
    """name -> (type, label names, buckets) from the list taken from vLLM's source."""
    rows = {}
    for line in VLLM_LIST.read_text().splitlines():
        if line and not line.startswith("#"):
            name, kind, labels, buckets, _condition = line.split("\t")
            rows[name] = (kind, labels.split(","), buckets)
    return rows


def families(base_url: str) -> dict[str, Any]:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def key(name: str, **labels: str) -> str:
    """A sample's key in `scrape_metrics`' dict, with the model's labels."""
    every = {"engine": "0", "model_name": labels.pop("model", "echo"), **labels}
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(every.items())) + "}"


def check_against_vllm(found: dict[str, Any], context_length: int, *, kv_cache: bool) -> None:
    """Every vLLM 0.32 metric is exported with vLLM's type, labels and buckets, or named in
    NOT_EXPORTED with a reason; no other `vllm:` family is exported."""
    listed = vllm_list()
    assert set(NOT_EXPORTED) <= set(listed), "a reason for a metric vLLM 0.32 does not have"
    # prometheus_client writes each counter's and histogram's `_created` series as a
    # gauge family of its own in the text format (vLLM's too).
    exported = {n for n in found if n.startswith("vllm:") and not n.endswith("_created")}
    assert exported <= set(listed), exported - set(listed)
    for name, (kind, labels, buckets) in listed.items():
        if name in NOT_EXPORTED:
            assert name not in found, name
            continue
        if name == "vllm:cache_config_info" and not kv_cache:
            assert name not in found
            continue
        assert name in found, name
        family = found[name]
        assert family.type == kind, name
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        assert samples, name
        for sample in samples:
            names = set(sample.labels) - {"le"}
            if name == "vllm:cache_config_info":
                # A subset of CacheConfig's fields: those with a meaning here.
                assert {"block_size", "num_gpu_blocks", "engine"} <= names <= set(labels)
            else:
                assert names == set(labels), (name, names, labels)
        if kind == "histogram":
            family_name, _, bounds = buckets.partition("=")
            expected = (
                request_tokens_buckets(context_length)
                if family_name == "request_tokens"
                else [float(b) for b in bounds.split(",")]
            )
            les = [float(s.labels["le"]) for s in samples if s.name.endswith("_bucket")]
            assert les == [*expected, float("inf")], name


async def scrape(server: RunningServer) -> dict[str, float]:
    return await asyncio.to_thread(scrape_metrics, server.http_url)


async def test_the_echo_servers_vllm_metrics_are_vllms_and_move_as_requests_run(
    server_factory: Callable[..., RunningServer],
) -> None:
    server = server_factory(ServerConfig(echo_delay=0.05, log_level="warning"))
    before = await scrape(server)
    assert before[key("vllm:num_requests_running")] == 0
    assert before[key("vllm:time_to_first_token_seconds_count")] == 0
    body = {
        "model": "echo",
        "messages": [{"role": "user", "content": LONG}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                chunks.append(chunk)
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    break
        # One token is out and the rest is still streaming (one every 50 ms).
        during = await scrape(server)
        assert during[key("vllm:num_requests_running")] == 1
        assert during[key("vllm:time_to_first_token_seconds_count")] == 1
        assert during[key("vllm:e2e_request_latency_seconds_count")] == 0
        async for line in lines:
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    usage = chunks[-1]["usage"]
    after = await scrape(server)
    assert after[key("vllm:num_requests_running")] == 0
    assert after[key("vllm:time_to_first_token_seconds_count")] == 1
    assert after[key("vllm:e2e_request_latency_seconds_count")] == 1
    assert after[key("vllm:request_success_total", finished_reason="stop")] == 1
    assert after[key("vllm:generation_tokens_total")] == usage["completion_tokens"]
    assert after[key("vllm:prompt_tokens_total")] == usage["prompt_tokens"]
    assert after[key("vllm:request_prompt_tokens_sum")] == usage["prompt_tokens"]
    # The echo engine hands over one token per output: a gap between each two.
    gaps = after[key("vllm:inter_token_latency_seconds_count")]
    assert gaps == usage["completion_tokens"] - 1
    # Every gap is the engine's 50 ms pause or more: none in the buckets below 50 ms.
    assert after[key("vllm:inter_token_latency_seconds_bucket", le="0.025")] == 0
    assert after[key("vllm:inter_token_latency_seconds_sum")] >= 0.05 * gaps

    # A socket request cancelled mid-stream: its tokens count, not as a success; and a
    # non-streamed HTTP request is timed too (the engine's outputs, not the transport's).
    async with connect(server.ws_url) as ws:
        await ws.send(chat(LONG, request_id="c", stream_options={"include_usage": True}))
        await recv_frame(ws)
        await ws.send(json.dumps({"type": "response.cancel", "request_id": "c"}))
        frames = await collect_until_terminal(ws)
    cancelled = frames[-1]
    assert cancelled["status"] == "cancelled"
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as client:
        plain = {"model": "echo", "messages": [{"role": "user", "content": "one two"}]}
        whole = (await client.post("/v1/chat/completions", json=plain)).json()
    await async_wait_until(lambda: server.engine.stats.active == 0)
    last = await scrape(server)
    assert last[key("vllm:time_to_first_token_seconds_count")] == 3
    assert last[key("vllm:e2e_request_latency_seconds_count")] == 2
    assert last[key("vllm:request_success_total", finished_reason="stop")] == 2
    assert last[key("vllm:request_success_total", finished_reason="abort")] == 0
    assert last[key("vllm:generation_tokens_total")] == (
        usage["completion_tokens"]
        + cancelled["usage"]["completion_tokens"]
        + whole["usage"]["completion_tokens"]
    )
    assert last[key("vllm:num_requests_running")] == 0
    check_against_vllm(families(server.http_url), server.engine.info.context_length, kv_cache=False)


# --- the cpu engine ----------------------------------------------------------------


@pytest.fixture
def cpu_server(tiny_model_dir: Path, server_factory: Callable[..., RunningServer]) -> RunningServer:
    pytest.importorskip("torch")
    from realtime.engine.cpu.engine import CpuEngine

    # Two rows in the batch, so a third request waits for a place.
    engine = CpuEngine(tiny_model_dir, model_name="tiny", max_batch_size=2)
    server = server_factory(ServerConfig(log_level="warning"), engine)
    assert engine.backend is not None and engine.backend.batch_blocks is not None
    return server


def tiny(text: str) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 3,
        "temperature": 0,
        "ignore_eos": True,
    }


async def test_the_cpu_engines_queue_batch_rows_and_prefix_cache_are_vllms_signals(
    cpu_server: RunningServer,
) -> None:
    from tests.engine.step_gate import step_gate

    server, engine = cpu_server, cpu_server.engine
    context = engine.info.context_length
    m = await scrape(server)
    # Blocks of 16 tokens; two places in the batch, each of up to the context's length.
    info = key(
        "vllm:cache_config_info",
        block_size="16",
        num_gpu_blocks=str(2 * -(-context // 16)),
        cache_dtype="float32",
        enable_prefix_caching="True",
    ).replace('model_name="echo",', "")
    assert m[info] == 1
    assert m[key("vllm:kv_cache_usage_perc", model="tiny")] == 0
    gate = step_gate(engine)
    try:
        before = await _three_requests_through_two_rows(server, engine, gate)
    finally:
        gate.open()  # a failed check must not leave the engine thread at the gate

    # The first request's KV went to the prefix cache when it ended: the same prompt
    # again starts from it.
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as client:
        again = (await client.post("/v1/chat/completions", json=tiny("The first request."))).json()
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    after = await scrape(server)

    def grew(name: str, **labels: str) -> float:
        return after[key(name, model="tiny", **labels)] - before[key(name, model="tiny", **labels)]

    assert grew("vllm:prefix_cache_queries_total") == again["usage"]["prompt_tokens"]
    assert grew("vllm:prefix_cache_hits_total") == cached
    assert grew("vllm:prompt_tokens_cached_total") == cached
    assert grew("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == cached
    check_against_vllm(families(server.http_url), context, kv_cache=True)


async def _three_requests_through_two_rows(
    server: RunningServer, engine: Any, gate: Any
) -> dict[str, float]:
    """Three requests into a batch of two rows, the forward passes let through one by one,
    scraped at each stage; returns the scrape once all three are answered."""

    def value(m: dict[str, float], name: str, **labels: str) -> float:
        return m[key(name, model="tiny", **labels)]

    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as client:

        def post(text: str) -> asyncio.Task[httpx.Response]:
            return asyncio.create_task(client.post("/v1/chat/completions", json=tiny(text)))

        first = post("The first request.")
        await gate.until_entered(1)  # its prefill is in the engine's first forward pass
        others = [post("A second request."), post("And a third one.")]
        # The engine thread takes new requests between passes: both wait meanwhile.
        await async_wait_until(lambda: engine.snapshot().waiting == 2)
        m = await scrape(server)
        assert value(m, "vllm:num_requests_running") == 1
        assert value(m, "vllm:num_requests_waiting") == 2
        assert value(m, "vllm:kv_cache_usage_perc") == 0  # its prefill is still running
        gate.allow(1)
        await gate.until_entered(2)  # two in the batch (both places), the third waits
        during = await scrape(server)
        assert value(during, "vllm:num_requests_running") == 2
        assert value(during, "vllm:num_requests_waiting") == 1
        gate.open()
        answers = [(await r).json() for r in [first, *others]]
    # Then the first request held its prompt's KV (the second's prefill was next).
    held = -(-answers[0]["usage"]["prompt_tokens"] // 16)
    total = 2 * -(-engine.info.context_length // 16)
    assert value(during, "vllm:kv_cache_usage_perc") == held / total
    m = await scrape(server)
    assert value(m, "vllm:num_requests_running") == 0
    assert value(m, "vllm:num_requests_waiting") == 0
    assert value(m, "vllm:kv_cache_usage_perc") == 0
    assert value(m, "vllm:request_success_total", finished_reason="length") == 3
    assert value(m, "vllm:time_to_first_token_seconds_count") == 3
    assert value(m, "vllm:generation_tokens_total") == 9
    assert value(m, "vllm:prompt_tokens_total") == sum(a["usage"]["prompt_tokens"] for a in answers)
    return m


async def test_open_metrics_lets_a_router_scrape_without_the_key_and_nothing_else(
    server_factory: Callable[..., RunningServer],
) -> None:
    keys = ("sk-router-test",)
    closed = server_factory(ServerConfig(api_keys=keys, log_level="warning"))
    opened = server_factory(ServerConfig(api_keys=keys, open_metrics=True, log_level="warning"))
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(closed.http_url + "/metrics")).status_code == 401
        scraped = await client.get(opened.http_url + "/metrics")
        assert scraped.status_code == 200
        assert "vllm:num_requests_running" in scraped.text
        refused = await client.post(opened.http_url + "/v1/chat/completions", json=body)
        assert refused.status_code == 401
        models = await client.get(opened.http_url + "/v1/models")
        assert models.status_code == 401
