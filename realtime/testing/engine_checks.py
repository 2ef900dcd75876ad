"""The engine conformance checks: what the server relies on an engine to do, measured.

Each check is an `async def check(subject, engine)` that drives a started engine
through `generate()` alone (no server, no socket) and raises `ConformanceFailure`
with a sentence that says what the engine did and what it must do instead. Work
is measured on the engine through the subject's `tokens_computed(engine)`
counter, not inferred from what a client received: a cancelled request must stop
*computing*, which no client can see.

`realtime.testing.conformance.EngineConformance` runs them as pytest tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import math
import unittest
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from realtime.engine.base import (
    Engine,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopConditions,
)
from realtime.engine.errors import EngineRequestError, GenerationError
from realtime.engine.snapshot import EngineSnapshot, ReportsSnapshot
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.info import ModelInfo

#: The default prompt's text (the engine's own tokenizer encodes it). Long enough for
#: an engine that echoes its prompt to answer `stream_tokens` tokens.
PROMPT_TEXT = (
    "The conformance kit sends this text to every engine it checks. A river runs past "
    "the old mill, where seven ravens watch the water turn the wheel. Quick brown foxes "
    "jump over lazy dogs; five boxing wizards jump quickly; a wizard's job is to vex "
    "chumps quickly in fog. Numbers: 3, 14, 159, 2653. Questions? Why do kites fly, "
    "and how far can a paper plane glide before the wind gives up on it? Nobody in the "
    "village could say, so they built a tower of crates and threw planes from the top "
    "until the sun went down and the lamps came on along the harbour wall. The next "
    "morning the baker counted forty planes in the square, each one folded differently, "
    "and decided that the best design was the one that had landed on his roof. "
    "Meanwhile the ferry crossed the bay twice an hour, carrying bicycles, goats, "
    "letters and a piano that nobody had ordered, while gulls argued over crusts."
)


class ConformanceFailure(AssertionError):
    """The engine broke the contract; the message says how, and what to do instead."""


class Subject(Protocol):
    """What the checks need to know about the engine under test (the test class)."""

    #: the engine returns logprobs when a request asks for them
    claims_logprobs: bool
    #: tokens one step of a request computes (the slack a cancel is allowed)
    tokens_per_step: int
    #: tokens the streaming check asks for
    stream_tokens: int
    #: max_tokens of the request the cancel checks cut short
    cancel_tokens: int
    #: greedy answers do not depend on which other requests run alongside
    batch_invariant: bool

    def make_engine(self) -> Engine: ...

    def tokens_computed(self, engine: Engine) -> int: ...

    def prompt_token_ids(self, engine: Engine) -> list[int]: ...

    def sampling(self) -> SamplingParams: ...

    def eos_request(self, engine: Engine, request_id: str) -> EngineRequest | None: ...

    def refused_request(self, engine: Engine, request_id: str) -> EngineRequest: ...


#: A check: drives a started engine, raises ConformanceFailure (or unittest.SkipTest).
Check = Callable[[Subject, Engine], Awaitable[None]]

_ids = itertools.count(1)


def request_id() -> str:
    return f"conformance-{next(_ids)}"


def make_request(
    subject: Subject,
    engine: Engine,
    *,
    max_tokens: int | None,
    prompt: Sequence[int] | None = None,
    ignore_eos: bool = True,
    stop_token_ids: Sequence[int] = (),
    logprobs: int | None = None,
    logit_bias: dict[int, float] | None = None,
) -> EngineRequest:
    """A request with the subject's (greedy by default) sampling."""
    sampling = subject.sampling()
    if logit_bias:
        sampling.logit_bias = dict(logit_bias)
    return EngineRequest(
        request_id(),
        list(prompt if prompt is not None else subject.prompt_token_ids(engine)),
        sampling=sampling,
        stop=StopConditions(
            max_tokens=max_tokens, stop_token_ids=list(stop_token_ids), ignore_eos=ignore_eos
        ),
        logprobs=logprobs,
    )


@dataclass
class Run:
    """What one request produced."""

    request: EngineRequest
    outputs: list[EngineOutput] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return [t for output in self.outputs for t in output.token_ids]

    @property
    def finish(self) -> FinishReason | None:
        return self.outputs[-1].finish_reason if self.outputs else None

    def describe(self) -> str:
        reason = self.finish.value if self.finish is not None else None
        return f"{len(self.tokens)} tokens in {len(self.outputs)} outputs, finish_reason {reason}"


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fail(why: str) -> ConformanceFailure:
    return ConformanceFailure(why)


def _stream(engine: Engine, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
    stream = engine.generate(request)
    if not hasattr(stream, "aclose") or not hasattr(stream, "__anext__"):
        raise fail(
            f"generate() returned a {type(stream).__name__}, not an async generator: closing"
            " it (aclose) is how the server cancels a request"
        )
    return stream


def _check_output(output: object, request: EngineRequest, index: int) -> EngineOutput:
    where = f"output {index} of request {request.request_id!r}"
    if not isinstance(output, EngineOutput):
        raise fail(f"{where} is a {type(output).__name__}, not an EngineOutput")
    if not isinstance(output.token_ids, list) or not all(
        isinstance(t, int) for t in output.token_ids
    ):
        raise fail(f"{where}: token_ids must be a list of ints, got {output.token_ids!r}")
    if output.finish_reason is not None and not isinstance(output.finish_reason, FinishReason):
        raise fail(f"{where}: finish_reason must be a FinishReason, got {output.finish_reason!r}")
    return output


async def drive(
    engine: Engine,
    request: EngineRequest,
    *,
    on_first: Callable[[], None] | None = None,
) -> Run:
    """Run `request` to its end; every way of not ending properly is a failure."""
    run = Run(request)
    limit = request.stop.max_tokens
    try:
        async with contextlib.aclosing(_stream(engine, request)) as stream:
            async for output in stream:
                run.outputs.append(_check_output(output, request, len(run.outputs) + 1))
                if on_first is not None and len(run.outputs) == 1:
                    on_first()
                if output.finish_reason is not None:
                    extra = await anext(stream, None)
                    if extra is not None:
                        raise fail(
                            f"request {request.request_id!r}: an output came after the one with"
                            f" finish_reason {output.finish_reason.value}; that one must be last"
                        )
                    break
                if limit is not None and len(run.tokens) > limit:
                    raise fail(
                        f"request {request.request_id!r} asked for max_tokens={limit} and got"
                        f" {len(run.tokens)} tokens without a finish_reason: stop at max_tokens"
                        " with finish_reason length"
                    )
    except (ConformanceFailure, asyncio.CancelledError):
        raise
    except GenerationError as exc:
        raise fail(
            f"request {request.request_id!r}, which the engine should run, failed: {one_line(exc)}"
        ) from exc
    except Exception as exc:
        raise fail(
            f"generate() raised {one_line(exc)}, which is not a realtime.engine.errors."
            "GenerationError: the server answers that with a 500 internal_error"
        ) from exc
    if run.finish is None:
        raise fail(
            f"request {request.request_id!r} ended after {run.describe()}: the last output of"
            " every request must carry a finish_reason"
        )
    return run


def expect_length(run: Run, tokens: int, what: str) -> None:
    if run.finish is not FinishReason.LENGTH or len(run.tokens) != tokens:
        raise fail(
            f"{what}: asked for max_tokens={tokens} (ignore_eos) and got {run.describe()};"
            f" expected exactly {tokens} tokens and finish_reason length"
        )


# --- the checks ---


async def check_lifecycle(subject: Subject, engine: Engine) -> None:
    """`info` describes the model; `ready` follows start() and close()."""
    info = engine.info
    if not isinstance(info, ModelInfo):
        raise fail(f"info is a {type(info).__name__}, not a realtime.model.info.ModelInfo")
    if not isinstance(info.context_length, int) or info.context_length < 2:
        raise fail(f"info.context_length must be the model's context, got {info.context_length!r}")
    ids = info.tokenizer.encode("hello")
    if not ids or not all(isinstance(t, int) for t in ids):
        raise fail(f"info.tokenizer.encode('hello') returned {ids!r}, not token ids")
    await engine.start()
    if engine.ready is not True or engine.unavailable_reason is not None:
        raise fail(
            f"after start(), ready is {engine.ready!r} and unavailable_reason is"
            f" {engine.unavailable_reason!r}; expected True and None"
        )
    expect_length(await drive(engine, make_request(subject, engine, max_tokens=2)), 2, "lifecycle")
    await engine.close()
    reason = engine.unavailable_reason
    if engine.ready is not False or not isinstance(reason, str) or not reason:
        raise fail(
            f"after close(), ready is {engine.ready!r} and unavailable_reason is {reason!r};"
            " expected False and a sentence saying why (clients are shown it)"
        )


async def check_streaming(subject: Subject, engine: Engine) -> None:
    """Token ids arrive as they are computed, not all at the end."""
    wanted = subject.stream_tokens
    base = subject.tokens_computed(engine)
    seen_at_first: list[int] = []
    request = make_request(subject, engine, max_tokens=wanted)
    run = await drive(
        engine,
        request,
        on_first=lambda: seen_at_first.append(subject.tokens_computed(engine) - base),
    )
    expect_length(run, wanted, "streaming")
    counted = subject.tokens_computed(engine) - base
    if counted < wanted:
        raise fail(
            f"tokens_computed() rose by {counted} while the engine generated {wanted} tokens:"
            " it must count every token the engine computes (the cancel checks rely on it)"
        )
    if len(run.outputs) < 2 or seen_at_first[0] >= wanted:
        raise fail(
            f"streaming: the first output arrived after the engine had computed"
            f" {seen_at_first[0]} of {wanted} tokens ({run.describe()}): generate() must"
            " yield token ids as they are computed"
        )


async def check_max_tokens(subject: Subject, engine: Engine) -> None:
    """Exactly max_tokens tokens, then finish_reason length."""
    for tokens in (1, 5):
        run = await drive(engine, make_request(subject, engine, max_tokens=tokens))
        expect_length(run, tokens, "max_tokens")


async def check_stop_token_ids(subject: Subject, engine: Engine) -> None:
    """A stop token id ends the request on that token, which is counted and marked."""
    eos = engine.info.tokenizer.eos_token_ids
    reference = await drive(engine, make_request(subject, engine, max_tokens=24))
    tokens = reference.tokens
    position = next(
        (i for i in range(2, len(tokens)) if tokens[i] not in tokens[:i] and tokens[i] not in eos),
        None,
    )
    if position is None:
        raise fail(
            f"stop_token_ids: the greedy answer {tokens} has no new token after its second to"
            " stop on; give the subject a prompt_token_ids() with a more varied answer"
        )
    stop = tokens[position]
    run = await drive(engine, make_request(subject, engine, max_tokens=24, stop_token_ids=[stop]))
    expected = tokens[: position + 1]
    if run.finish is not FinishReason.STOP or run.tokens != expected:
        raise fail(
            f"stop_token_ids=[{stop}]: expected the answer to end on that token, its"
            f" {position + 1}th, with finish_reason stop ({expected}); got {run.describe()}:"
            f" {run.tokens}"
        )
    if not run.outputs[-1].stopped_on_token:
        raise fail(
            f"stop_token_ids=[{stop}]: the last output must set stopped_on_token=True, so that"
            " the stop token's text is not shown"
        )


async def check_eos(subject: Subject, engine: Engine) -> None:
    """EOS ends a request with finish_reason eos; ignore_eos generates on."""
    eos = engine.info.tokenizer.eos_token_ids
    request = subject.eos_request(engine, request_id())
    if request is None:
        raise unittest.SkipTest(
            "the tokenizer names no EOS token id; override eos_request() to check EOS"
        )
    run = await drive(engine, request)
    if run.finish is not FinishReason.EOS:
        raise fail(
            f"a request that should end on EOS ({_bias_note(request)}) ended with"
            f" {run.describe()}: expected finish_reason eos"
        )
    shown = [i for i, t in enumerate(run.tokens) if t in eos]
    if shown and (shown != [len(run.tokens) - 1] or not run.outputs[-1].stopped_on_token):
        raise fail(
            f"EOS id {run.tokens[shown[0]]} is at position {shown[0] + 1} of {run.tokens}:"
            " an EOS token may only be the last token, with stopped_on_token=True"
        )
    if eos and request.sampling.logit_bias and not request.stop.ignore_eos:
        ignoring = make_request(
            subject, engine, max_tokens=6, ignore_eos=True, logit_bias=request.sampling.logit_bias
        )
        expect_length(await drive(engine, ignoring), 6, "ignore_eos with EOS the likeliest token")


def _bias_note(request: EngineRequest) -> str:
    bias = request.sampling.logit_bias
    return f"logit_bias {bias}" if bias else f"max_tokens={request.stop.max_tokens}"


async def check_logprobs(subject: Subject, engine: Engine) -> None:
    """Each token's logprob, and the top alternatives asked for, in order."""
    if not subject.claims_logprobs:
        raise unittest.SkipTest("the subject does not claim logprobs (claims_logprobs = False)")
    for top in (2, 0):
        run = await drive(engine, make_request(subject, engine, max_tokens=8, logprobs=top))
        expect_length(run, 8, f"logprobs={top}")
        for index, output in enumerate(run.outputs, start=1):
            _check_logprobs(output, index, top)


def _check_logprobs(output: EngineOutput, index: int, top: int) -> None:
    where = f"logprobs={top}, output {index}"
    entries = output.logprobs
    if not isinstance(entries, list) or len(entries) != len(output.token_ids):
        raise fail(
            f"{where}: expected one TokenLogprob per token id ({len(output.token_ids)}),"
            f" got {entries!r}"
        )
    for token_id, entry in zip(output.token_ids, entries, strict=True):
        if not isinstance(entry, TokenLogprob) or entry.token_id != token_id:
            raise fail(f"{where}: {entry!r} is not the TokenLogprob of token {token_id}")
        if not (math.isfinite(entry.logprob) and entry.logprob <= 1e-6):
            raise fail(f"{where}: token {token_id}'s logprob {entry.logprob} is not a log of p")
        alternatives = entry.top[:top]  # the server shows the first `top`; more is harmless
        if top and not alternatives:
            raise fail(f"{where}: asked for the top {top} alternatives, got none")
        values = [lp for _, lp in alternatives]
        if values != sorted(values, reverse=True):
            raise fail(f"{where}: the top alternatives must be sorted, likeliest first: {values}")
        if values and entry.logprob < values[0] - 1e-3:
            raise fail(
                f"{where}: greedy sampling chose token {token_id} (logprob {entry.logprob}),"
                f" but the top alternative is {alternatives[0]}: the logprobs do not match"
                " the choice"
            )


async def check_concurrent(subject: Subject, engine: Engine) -> None:
    """Requests run together each get their own answer, whole."""
    prompt = subject.prompt_token_ids(engine)
    requests = [
        make_request(subject, engine, max_tokens=5 + i, prompt=prompt[i:]) for i in range(4)
    ]
    runs = await asyncio.gather(*(drive(engine, request) for request in requests))
    for i, run in enumerate(runs):
        expect_length(run, 5 + i, f"concurrent request {i + 1} of 4")
    if not subject.batch_invariant:
        return
    for i, run in enumerate(runs):
        alone = await drive(
            engine, make_request(subject, engine, max_tokens=5 + i, prompt=prompt[i:])
        )
        if alone.tokens != run.tokens:
            raise fail(
                f"concurrent request {i + 1} of 4 got {run.tokens} alongside the others but"
                f" {alone.tokens} alone: requests must not leak into each other (set"
                " batch_invariant = False if greedy answers legitimately depend on the batch)"
            )


async def _cancel_and_measure(
    subject: Subject,
    engine: Engine,
    cancel: Callable[[EngineRequest], Awaitable[None]],
    how: str,
) -> None:
    probe = make_request(subject, engine, max_tokens=4)
    before = subject.tokens_computed(engine)
    await drive(engine, probe)
    probe_work = subject.tokens_computed(engine) - before
    long = make_request(subject, engine, max_tokens=subject.cancel_tokens)
    started = subject.tokens_computed(engine)
    await cancel(long)
    at_cancel = subject.tokens_computed(engine)
    if at_cancel - started >= subject.cancel_tokens:
        raise fail(
            f"cancel ({how}): the request of {subject.cancel_tokens} tokens was already"
            " computed when the kit cancelled it after 2: raise cancel_tokens"
        )
    await drive(engine, make_request(subject, engine, max_tokens=4))
    extra = subject.tokens_computed(engine) - at_cancel - probe_work
    if extra > subject.tokens_per_step:
        raise fail(
            f"cancel ({how}): after the request was cancelled the engine computed {extra} more"
            f" tokens for it while a 4-token request ran (allowed: {subject.tokens_per_step},"
            " the step already running): cancelling must stop the request's work"
        )


async def check_cancel_by_close(subject: Subject, engine: Engine) -> None:
    """Closing the iterator of `generate()` stops the request within one step."""

    async def cancel(request: EngineRequest) -> None:
        stream = _stream(engine, request)
        got = 0
        try:
            async for output in stream:
                got += len(output.token_ids)
                if output.finish_reason is not None or got >= 2:
                    break
        finally:
            await stream.aclose()

    await _cancel_and_measure(subject, engine, cancel, "the iterator closed")


async def check_cancel_by_task(subject: Subject, engine: Engine) -> None:
    """Cancelling the task that iterates `generate()` stops the request within one step."""

    async def cancel(request: EngineRequest) -> None:
        two = asyncio.Event()

        async def consume() -> None:
            got = 0
            async for output in _stream(engine, request):
                got += len(output.token_ids)
                if got >= 2:
                    two.set()
                if output.finish_reason is not None:
                    return

        task = asyncio.create_task(consume())
        waiter = asyncio.create_task(two.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    await _cancel_and_measure(subject, engine, cancel, "the consuming task cancelled")


async def check_errors(subject: Subject, engine: Engine) -> None:
    """A request the engine cannot run is refused with EngineRequestError, alone."""
    request = subject.refused_request(engine, request_id())
    what = (
        f"a prompt of {len(request.prompt_token_ids)} tokens (context {engine.info.context_length})"
    )
    outputs = 0
    try:
        async with contextlib.aclosing(_stream(engine, request)) as stream:
            async for _ in stream:
                outputs += 1
                if outputs > 1:
                    break
    except EngineRequestError as exc:
        message = exc.message if isinstance(exc.message, str) else ""
        if outputs or not message.strip() or "\n" in message or "Traceback" in message:
            raise fail(
                f"{what}: refused after {outputs} outputs with message {message!r}; refuse"
                " before any output, with one line a client can read"
            ) from exc
    except GenerationError as exc:
        raise fail(
            f"{what}: raised {one_line(exc)}; a request that cannot run is the request's"
            " fault: raise EngineRequestError (a 400 for that request alone)"
        ) from exc
    except Exception as exc:
        raise fail(
            f"{what}: raised {one_line(exc)}, which is not a realtime.engine.errors."
            "GenerationError: the server answers that with a 500 internal_error"
        ) from exc
    else:
        raise fail(
            f"{what} was answered ({outputs} outputs) instead of refused: raise"
            " EngineRequestError for a request the engine cannot run"
        )
    if not engine.ready:
        raise fail(f"after refusing {what}, the engine is no longer ready")
    expect_length(
        await drive(engine, make_request(subject, engine, max_tokens=2)), 2, "after an error"
    )


#: How long the snapshot check waits for a snapshot to show what happened: a proxy may
#: answer with the state its engine last reported, a step or two old.
SNAPSHOT_SETTLE_SECONDS = 10.0


async def _snapshot_until(
    engine: ReportsSnapshot, holds: Callable[[EngineSnapshot], bool], what: str
) -> EngineSnapshot:
    deadline = asyncio.get_running_loop().time() + SNAPSHOT_SETTLE_SECONDS
    while True:
        snapshot = _snapshot(engine)
        if holds(snapshot):
            return snapshot
        if asyncio.get_running_loop().time() > deadline:
            raise fail(f"snapshot(): {what}; after {SNAPSHOT_SETTLE_SECONDS} s it says {snapshot}")
        await asyncio.sleep(0.01)


def _snapshot(engine: ReportsSnapshot) -> EngineSnapshot:
    try:
        snapshot = engine.snapshot()
    except Exception as exc:
        raise fail(f"snapshot() raised {one_line(exc)}; it must always answer") from exc
    if inspect.isawaitable(snapshot):
        raise fail("snapshot() returned an awaitable: it must answer at once, on the event loop")
    if not isinstance(snapshot, EngineSnapshot):
        raise fail(f"snapshot() returned {type(snapshot).__name__}, not an EngineSnapshot")
    kv = snapshot.kv_cache
    if kv is not None and not (kv.block_size > 0 and 0 <= kv.used_blocks <= kv.total_blocks):
        raise fail(f"snapshot(): a KV cache of {kv} is not one (0 <= used <= total blocks)")
    return snapshot


async def check_snapshot(subject: Subject, engine: Engine) -> None:
    """An engine that reports its state (`snapshot()`) counts a request while it runs,
    counts it no more once it is closed, and never counts a counter backwards."""
    if not isinstance(engine, ReportsSnapshot):
        return  # optional: the server then counts the requests it streams
    idle = _snapshot(engine)
    if idle.running or idle.waiting:
        raise fail(f"snapshot() of an engine with no request counts {idle}")
    stream = _stream(engine, make_request(subject, engine, max_tokens=subject.cancel_tokens))
    try:
        await anext(stream)
        busy = await _snapshot_until(
            engine,
            lambda s: s.running + s.waiting >= 1,
            "a request streaming (one output read, the rest not) is neither running nor waiting",
        )
    finally:
        await stream.aclose()
    await drive(engine, make_request(subject, engine, max_tokens=2))
    after = await _snapshot_until(
        engine,
        lambda s: s.running == 0 and s.waiting == 0,
        "every request has ended (one closed, one finished), yet some still count",
    )
    for name in ("prefix_cache_queries", "prefix_cache_hits", "preemptions"):
        earlier, later = getattr(busy, name), getattr(after, name)
        if later < getattr(idle, name) or later < earlier:
            raise fail(f"snapshot(): {name} went down ({earlier} to {later}); it only counts up")


#: Every check, by the name its test carries.
CHECKS: dict[str, Check] = {
    "lifecycle": check_lifecycle,
    "streaming": check_streaming,
    "max_tokens": check_max_tokens,
    "stop_token_ids": check_stop_token_ids,
    "eos": check_eos,
    "logprobs": check_logprobs,
    "concurrent": check_concurrent,
    "cancel_by_close": check_cancel_by_close,
    "cancel_by_task": check_cancel_by_task,
    "errors": check_errors,
    "snapshot": check_snapshot,
}
