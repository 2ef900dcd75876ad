"""`python -m bench.generation_path`: what the chat pipeline costs per token, with and without
vLLM's metrics.

A micro-benchmark of a chat completion's stream (`ChatRun.stream`) alone, in one
process, with no transport: answers of `--tokens` tokens from the zero-delay echo
engine (one event-loop pass per token, as in the throughput benchmark), through the
real pipeline (template, tokenizer, the generation loop, stop strings, the chunk
builder). Two variants,
interleaved run by run so that drift in the machine's speed touches both alike:

* `plain`: the pipeline without a meter;
* `vllm metrics`: the pipeline recording every engine request for vLLM's metrics
  (`realtime/observability/vllm_metrics.py`), as `build_app` sets it up.

The difference between the two is what those metrics cost per token (and per
request, spread over its tokens). It is the number to compare before and after a
change to `pipeline/generation.py` or `observability/vllm_metrics.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from contextlib import aclosing

from prometheus_client import CollectorRegistry

from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.run import ChatRun
from realtime.engine.echo import EchoEngine
from realtime.observability.vllm_metrics import VllmMetrics
from realtime.pipeline import ChatPipeline

VARIANTS = ("plain", "vllm metrics")


async def _run(pipeline: ChatPipeline, tokens: int, answers: int) -> float:
    """Seconds to stream `answers` answers of `tokens` tokens each."""
    content = " ".join(f"w{i}" for i in range(tokens))
    body = {"model": "echo", "stream": True, "messages": [{"role": "user", "content": content}]}
    started = time.perf_counter()
    for _ in range(answers):
        run = ChatRun.prepare(pipeline, parse_chat_request(body))
        async with aclosing(run.stream()) as chunks:
            async for _chunk in chunks:
                pass
    return time.perf_counter() - started


async def _measure(
    tokens: int, answers: int, repeats: int, variants: tuple[str, ...] = VARIANTS
) -> dict[str, list[float]]:
    engine = EchoEngine()
    await engine.start()
    info = engine.info
    pipelines = {
        "plain": ChatPipeline(engine),
        "vllm metrics": ChatPipeline(
            engine,
            meter=VllmMetrics(CollectorRegistry(), info.name, info.context_length, engine.snapshot),
        ),
    }
    for name in variants:  # warm-up: imports, first allocations
        await _run(pipelines[name], tokens, 1)
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name in variants:
            runs[name].append(await _run(pipelines[name], tokens, answers))
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.generation_path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tokens", type=int, default=1000, help="tokens per answer")
    parser.add_argument("--answers", type=int, default=20, help="answers per run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: proves it runs")
    parser.add_argument(
        "--only",
        choices=VARIANTS,
        help="run one variant (for an instruction count: valgrind --tool=callgrind, once per "
        "variant, the difference over the tokens streamed)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.answers, args.repeats = 50, 2, 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # the server runs on uvloop; without it the numbers are only relative
        pass
    variants = (args.only,) if args.only else VARIANTS
    runs = asyncio.run(_measure(args.tokens, args.answers, args.repeats, variants))
    per_token = args.tokens * args.answers
    if args.only:
        seconds = statistics.median(runs[args.only])
        print(f"{args.only}: {seconds / per_token * 1e9:.0f} ns per token")
        return
    medians = {name: statistics.median(runs[name]) / per_token * 1e9 for name in VARIANTS}
    for name in VARIANTS:
        spread = [s / per_token * 1e9 for s in runs[name]]
        print(
            f"{name:>13}: {medians[name]:8.0f} ns per token  (median of {args.repeats}; "
            f"spread {min(spread):.0f}-{max(spread):.0f} ns)"
        )
    ratios = [m / p for m, p in zip(runs["vllm metrics"], runs["plain"], strict=True)]
    print(
        f"   difference: {medians['vllm metrics'] - medians['plain']:8.0f} ns per token; "
        f"paired ratio {statistics.median(ratios):.3f} "
        f"({min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
