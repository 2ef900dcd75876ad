"""The engine process through `EngineProxy`: backpressure and cancels cross the boundary
(proven on counters read from the engine process), and a dead engine process fails every
request in flight with a retryable `EngineUnavailable`."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from pathlib import Path

import pytest

from realtime.engine.base import EngineRequest, SamplingParams, StopConditions
from realtime.engine.errors import EngineRequestError, EngineUnavailable
from realtime.engine.process.launcher import EngineProcess, EngineStartError
from realtime.engine.process.proxy import ENGINE_EXITED, EngineProxy
from realtime.engine.process.spec import EngineSpec, runs_in_process
from tests.conftest import async_wait_until
from tests.engine.process_fixtures import attach, cpu_spec

pytest.importorskip("torch")


def long_request(proxy: EngineProxy, request_id: str, max_tokens: int = 400) -> EngineRequest:
    return EngineRequest(
        request_id,
        proxy.info.tokenizer.encode("a long answer about the harbour, please"),
        sampling=SamplingParams(temperature=0.0),
        stop=StopConditions(max_tokens=max_tokens, ignore_eos=True),
    )


def test_a_reader_that_lags_pauses_its_request_in_the_engine(cpu_process: EngineProcess) -> None:
    async def run() -> None:
        proxy = attach(cpu_process)
        await proxy.start()
        try:
            request = long_request(proxy, "lagging")
            async with aclosing(proxy.generate(request)) as outputs:
                first = await anext(outputs)
                assert first.token_ids
                # Not reading: the channel fills, and the engine leaves the request out.
                await async_wait_until(lambda: proxy.stats.request("lagging").paused > 0)
                held = proxy.stats.request("lagging").tokens_generated
                assert held < 400
                limit = proxy.handshake.output_limit if proxy.handshake else 0
                assert held <= 1 + limit + 8  # what was computed before the pause arrived
                # A paused request computes nothing: a later read finds the same count.
                await asyncio.sleep(0.2)
                assert proxy.stats.request("lagging").tokens_generated == held
                tokens = len(first.token_ids)
                async for output in outputs:
                    tokens += len(output.token_ids)
                assert tokens == 400
            assert proxy.core.stats.jobs_resumed >= 1
        finally:
            await proxy.close()

    asyncio.run(run())


def test_a_cancel_stops_the_request_in_the_engine(cpu_process: EngineProcess) -> None:
    async def run() -> None:
        proxy = attach(cpu_process)
        await proxy.start()
        try:
            cancelled = proxy.core.stats.jobs_cancelled
            async with aclosing(proxy.generate(long_request(proxy, "cut", 5000))) as outputs:
                await anext(outputs)
            stats = proxy.stats.request("cut")  # read after the cancel: it was handled first
            assert stats.cancelled
            assert proxy.core.stats.jobs_cancelled == cancelled + 1
            done = stats.tokens_generated
            # A short request runs; the cancelled one computes nothing more meanwhile.
            async with aclosing(proxy.generate(long_request(proxy, "after", 4))) as outputs:
                async for _ in outputs:
                    pass
            assert proxy.stats.request("cut").tokens_generated == done < 5000
        finally:
            await proxy.close()

    asyncio.run(run())


def test_a_front_end_that_goes_away_has_its_requests_cancelled(cpu_process: EngineProcess) -> None:
    async def run() -> None:
        watcher = attach(cpu_process)
        await watcher.start()
        proxy = attach(cpu_process)
        await proxy.start()
        try:
            outputs = proxy.generate(long_request(proxy, "orphan", 5000))
            await anext(outputs)
            proxy._disconnect()  # the front end's process died: its socket closes
            await async_wait_until(lambda: watcher.stats.request("orphan").cancelled)
            assert watcher.stats.request("orphan").tokens_generated < 5000
        finally:
            await proxy.close()
            await watcher.close()

    asyncio.run(run())


def test_a_request_the_engine_refuses_is_its_own_error(cpu_process: EngineProcess) -> None:
    async def run() -> None:
        proxy = attach(cpu_process)
        await proxy.start()
        try:
            bad = EngineRequest("bad", [10**6], stop=StopConditions(max_tokens=2))
            with pytest.raises(EngineRequestError, match="prompt token ids must be in"):
                async with aclosing(proxy.generate(bad)) as outputs:
                    async for _ in outputs:
                        pass
            assert proxy.ready
        finally:
            await proxy.close()

    asyncio.run(run())


def test_engine_state_is_read_across_the_boundary(cpu_process: EngineProcess) -> None:
    async def run() -> None:
        proxy = attach(cpu_process)
        await proxy.start()
        try:
            assert proxy.query("backend.has_work()") is False  # a method's result
            assert proxy.query("options.max_batch_size") == 32
            assert (await proxy.aquery("stats")).batching is True
            with pytest.raises(LookupError, match="private"):
                proxy.query("_core")
            with pytest.raises(LookupError, match="AttributeError"):
                proxy.query("no_such_thing")
        finally:
            await proxy.close()

    asyncio.run(run())


def test_when_the_engine_process_dies_requests_fail_retryably(tiny_model_dir: Path) -> None:
    async def run() -> None:
        proxy = EngineProxy(cpu_spec(tiny_model_dir))
        deaths: list[str] = []
        proxy.on_death(deaths.append)
        await proxy.start()
        try:
            outputs = proxy.generate(long_request(proxy, "doomed", 5000))
            await anext(outputs)
            assert proxy.process is not None
            proxy.process.kill()
            with pytest.raises(EngineUnavailable, match="retry"):
                async for _ in outputs:
                    pass
            assert not proxy.ready
            assert proxy.unavailable_reason is not None
            assert "the engine process exited" in proxy.unavailable_reason
            assert deaths and "the engine process exited" in deaths[0]
            with pytest.raises(EngineUnavailable):
                await anext(proxy.generate(long_request(proxy, "late")))
            with pytest.raises(EngineUnavailable):
                proxy.stats  # noqa: B018
        finally:
            await proxy.close()

    asyncio.run(run())
    assert ENGINE_EXITED.endswith("retry the request")


def test_an_engine_that_cannot_load_says_why_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(EngineStartError, match=r"config\.json"):
        EngineProcess(EngineSpec("cpu", {"model_dir": str(tmp_path)})).start_sync()


def test_an_engine_not_built_on_the_threaded_core_cannot_run_apart(tiny_model_dir: Path) -> None:
    spec = EngineSpec("realtime.engine.echo:EchoEngine", {})
    with pytest.raises(EngineStartError, match="not built on ThreadedEngineCore"):
        EngineProcess(spec).start_sync()


@pytest.mark.parametrize(
    ("engine", "setting", "expected"),
    [
        ("cpu", "auto", True),
        ("exllamav2", "auto", True),
        ("cpu", "off", False),
        ("echo", "auto", False),
        ("scripted", "off", False),
        ("my.engines:Bigram", "auto", False),
        ("my.engines:Bigram", "on", True),
    ],
)
def test_which_engines_run_apart(engine: str, setting: str, expected: bool) -> None:
    assert runs_in_process(engine, setting) is expected


def test_echo_cannot_be_asked_to_run_apart() -> None:
    with pytest.raises(ValueError, match="the echo engine runs in the server's process"):
        runs_in_process("echo", "on")
