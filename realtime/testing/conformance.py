"""The engine conformance kit as pytest tests: subclass `EngineConformance` in your suite.

    from realtime.testing import EngineConformance

    class TestMyEngine(EngineConformance):
        def make_engine(self):
            return MyEngine(...)

        def tokens_computed(self, engine):
            return engine.tokens_generated  # every token computed, all requests

pytest collects one test per check (`test_streaming`, `test_cancel_by_close`, ...).
Each builds a fresh engine, starts it, runs its check on a fresh event loop with
plain `asyncio` (no pytest plugin needed) and closes it. A broken contract fails
with `ConformanceFailure`, whose message says what the engine did and what it
must do; a check that does not apply (logprobs the engine does not claim, EOS
without EOS ids) is skipped with the reason. The class attributes and the
hook methods below tune the kit to the engine; the checks are in
`engine_checks.py`.
"""

from __future__ import annotations

import asyncio

from realtime.engine.base import Engine, EngineRequest, SamplingParams, StopConditions
from realtime.testing.engine_checks import CHECKS, PROMPT_TEXT, Check, ConformanceFailure


class EngineConformance:
    """The checks every engine must pass to be served; see the module docstring."""

    #: The engine returns logprobs when asked (`EngineRequest.logprobs`); False skips them.
    claims_logprobs: bool = True
    #: Tokens one step computes for one request: what a cancel may still cost.
    tokens_per_step: int = 1
    #: Tokens the streaming check asks for: more than the engine computes ahead of a
    #: reader that has not taken the first output yet.
    stream_tokens: int = 80
    #: max_tokens of the request the cancel checks cut short after two tokens.
    cancel_tokens: int = 1000
    #: Greedy answers are the same alone and alongside other requests.
    batch_invariant: bool = True
    #: Seconds a check may take before it fails as hung.
    timeout_seconds: float = 120.0

    # --- hooks: the first two are required ---

    def make_engine(self) -> Engine:
        """A new engine, not started (each check starts and closes its own)."""
        raise NotImplementedError("EngineConformance subclasses implement make_engine()")

    def tokens_computed(self, engine: Engine) -> int:
        """Tokens `engine` has generated so far, all requests together, counted where
        they are computed (not where they are delivered)."""
        raise NotImplementedError("EngineConformance subclasses implement tokens_computed()")

    def prompt_token_ids(self, engine: Engine) -> list[int]:
        """The prompt of the kit's requests: `PROMPT_TEXT` in the engine's tokenizer."""
        return engine.info.tokenizer.encode(PROMPT_TEXT)

    def sampling(self) -> SamplingParams:
        """The sampling of the kit's requests: greedy, so that answers repeat."""
        return SamplingParams(temperature=0.0)

    def eos_request(self, engine: Engine, request_id: str) -> EngineRequest | None:
        """A request that must end with finish_reason eos: EOS made the likeliest token by
        logit_bias. None (the check is skipped) when the tokenizer names no EOS id."""
        eos = engine.info.tokenizer.eos_token_ids
        if not eos:
            return None
        sampling = self.sampling()
        sampling.logit_bias = {token: 100.0 for token in sorted(eos)}
        return EngineRequest(
            request_id,
            self.prompt_token_ids(engine),
            sampling=sampling,
            stop=StopConditions(max_tokens=16),
        )

    def refused_request(self, engine: Engine, request_id: str) -> EngineRequest:
        """A request the engine must refuse: a prompt filling the whole context."""
        prompt = self.prompt_token_ids(engine)
        length = engine.info.context_length
        repeated = prompt * (length // max(1, len(prompt)) + 1)
        return EngineRequest(request_id, repeated[:length], stop=StopConditions(max_tokens=1))

    # --- the tests ---

    def test_lifecycle(self) -> None:
        self._run("lifecycle", started=False)

    def test_streaming(self) -> None:
        self._run("streaming")

    def test_max_tokens(self) -> None:
        self._run("max_tokens")

    def test_stop_token_ids(self) -> None:
        self._run("stop_token_ids")

    def test_eos(self) -> None:
        self._run("eos")

    def test_logprobs(self) -> None:
        self._run("logprobs")

    def test_concurrent(self) -> None:
        self._run("concurrent")

    def test_cancel_by_close(self) -> None:
        self._run("cancel_by_close")

    def test_cancel_by_task(self) -> None:
        self._run("cancel_by_task")

    def test_errors(self) -> None:
        self._run("errors")

    def test_snapshot(self) -> None:
        self._run("snapshot")

    def _run(self, name: str, *, started: bool = True) -> None:
        asyncio.run(self._checked(CHECKS[name], name, started=started))

    async def _checked(self, check: Check, name: str, *, started: bool) -> None:
        engine = self.make_engine()
        if started:
            await engine.start()
        try:
            await asyncio.wait_for(check(self, engine), self.timeout_seconds)
        except asyncio.TimeoutError:
            raise ConformanceFailure(
                f"{name}: no result within {self.timeout_seconds} s: the engine hung (a request"
                " that never ends, or a cancel that never returns)"
            ) from None
        finally:
            if started or engine.ready:  # the lifecycle check closes the engine itself
                await engine.close()
