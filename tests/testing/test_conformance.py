"""The conformance kit against every engine of ours, and against engines broken on purpose.

Each `Test...Engine` class runs the whole kit (one pytest test per check) the way a
third-party suite does. The broken engines each fail one check, with a message
that says why.
"""

from __future__ import annotations

import asyncio
import json
import unittest
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path

import pytest

from realtime.engine.base import Engine, EngineOutput, EngineRequest, StopConditions
from realtime.engine.echo import EchoEngine
from realtime.engine.scripted import ScriptedEngine
from realtime.testing import PROMPT_TEXT, ConformanceFailure, EngineConformance
from realtime.testing import fake_exllamav2 as fake
from tests.testing.push_engine import Defects, PushEngine

pytest_plugins = ["tests.model_fixtures"]


class TestEchoEngine(EngineConformance):
    def make_engine(self) -> Engine:
        return EchoEngine()

    def tokens_computed(self, engine: Engine) -> int:
        assert isinstance(engine, EchoEngine)
        return engine.stats.tokens_generated

    def eos_request(self, engine: Engine, request_id: str) -> EngineRequest | None:
        # The echo model has no EOS token: it ends with eos once its prompt is echoed.
        return EngineRequest(request_id, engine.info.tokenizer.encode("short and done"))


class TestScriptedEngine(EngineConformance):
    def make_engine(self) -> Engine:
        return ScriptedEngine([{"match": "harbour", "reply": PROMPT_TEXT}])

    def tokens_computed(self, engine: Engine) -> int:
        assert isinstance(engine, ScriptedEngine)
        return engine.stats.tokens_generated

    def eos_request(self, engine: Engine, request_id: str) -> EngineRequest | None:
        # Without a model the script's tokenizer has no EOS: a reply ends with eos.
        return EngineRequest(request_id, self.prompt_token_ids(engine))


class TestCpuEngine(EngineConformance):
    @pytest.fixture(autouse=True)
    def _model(self, tiny_model_dir: Path) -> None:
        pytest.importorskip("torch")
        self.model_dir = tiny_model_dir

    def make_engine(self) -> Engine:
        from realtime.engine.cpu.engine import CpuEngine

        return CpuEngine(self.model_dir, threads=1)

    def tokens_computed(self, engine: Engine) -> int:
        return engine.stats.tokens_generated  # type: ignore[attr-defined, no-any-return]


class TestExLlamaV2EngineOnTheFake(EngineConformance):
    @pytest.fixture(autouse=True)
    def _fake(self, monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> Iterator[None]:
        self.state = fake.install(monkeypatch)
        size = int(json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"])

        def logits(sequence: list[int], prompt_length: int) -> list[float]:
            # Sure of every next token, printable ASCII (never held back), never EOS by itself.
            out = [0.0] * size
            out[33 + len(sequence) % 90] = 10.0
            return out

        self.state.logits_fn = logits
        self.model_dir = tiny_model_dir
        yield
        self.state.open_gate()

    def make_engine(self) -> Engine:
        from realtime.engine.exllamav2.engine import ExLlamaV2Engine

        return ExLlamaV2Engine(self.model_dir)

    def tokens_computed(self, engine: Engine) -> int:
        return sum(1 for stage, _, _ in self.state.forwards if stage == "gen")


class TestPushEngine(EngineConformance):
    """The engine the broken ones are copies of: it passes, so each failure below is its defect."""

    defects = Defects()

    def make_engine(self) -> Engine:
        return PushEngine(self.defects)

    def tokens_computed(self, engine: Engine) -> int:
        assert isinstance(engine, PushEngine)
        return engine.computed


def kit_for(**defects: bool) -> EngineConformance:
    class Broken(TestPushEngine):
        pass

    Broken.defects = Defects(**defects)
    return Broken()


@pytest.mark.parametrize(
    ("defect", "test", "why"),
    [
        (
            "ignores_cancel",
            "test_cancel_by_close",
            r"cancel \(the iterator closed\): after the request was cancelled the engine computed"
            r" \d+ more tokens for it .* cancelling must stop the request's work",
        ),
        ("ignores_cancel", "test_cancel_by_task", r"consuming task cancelled\): after the"),
        ("ignores_max_tokens", "test_max_tokens", r"asked for max_tokens=1 and got 2 tokens"),
        ("ignores_stop_ids", "test_stop_token_ids", r"stop_token_ids=\[\d+\]: expected the answer"),
        ("ignores_eos", "test_eos", r"should end on EOS \(logit_bias \{999: 100.0\}\) ended with"),
        ("no_finish_reason", "test_max_tokens", r"must carry a finish_reason"),
        ("plain_errors", "test_errors", r"raised ValueError: prompt too long, which is not"),
        ("not_streaming", "test_streaming", r"after the engine had computed 80 of 80 tokens"),
        ("no_logprobs", "test_logprobs", r"expected one TokenLogprob per token id \(1\), got None"),
        ("shared_state", "test_concurrent", r"alongside the others but .* alone"),
        ("ready_after_close", "test_lifecycle", r"after close\(\), ready is True"),
    ],
)
def test_a_broken_engine_fails_with_the_reason(defect: str, test: str, why: str) -> None:
    kit = kit_for(**{defect: True})
    with pytest.raises(ConformanceFailure, match=why):
        getattr(kit, test)()


def test_a_hung_engine_fails_instead_of_hanging() -> None:
    class Hangs(PushEngine):
        async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
            await asyncio.Event().wait()  # never answers
            yield EngineOutput([])

    kit = kit_for()
    kit.make_engine = Hangs  # type: ignore[method-assign]
    kit.timeout_seconds = 0.05
    with pytest.raises(ConformanceFailure, match=r"max_tokens: no result within 0.05 s"):
        kit.test_max_tokens()


def test_logprobs_not_claimed_are_skipped_with_the_reason() -> None:
    kit = kit_for(no_logprobs=True)
    kit.claims_logprobs = False
    with pytest.raises(unittest.SkipTest, match="does not claim logprobs"):
        kit.test_logprobs()


def test_the_hooks_must_be_written() -> None:
    with pytest.raises(NotImplementedError, match="implement make_engine"):
        EngineConformance().test_max_tokens()


def test_refused_request_fills_the_context() -> None:
    kit = kit_for()
    engine = PushEngine()
    request = kit.refused_request(engine, "r")
    assert len(request.prompt_token_ids) == engine.info.context_length
    assert request.stop == StopConditions(max_tokens=1)
