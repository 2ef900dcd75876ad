"""`python -m bench.batching [--quick] [--repeats N] [--out DIR] [--vllm-venv DIR | --no-vllm]
[--api-servers 1,2]`.

Writes DIR/batching.md, DIR/batching.json and DIR/batching.png (default DIR:
docs/benchmarks) and prints the goals. vLLM comes from the venv that
`bash bench/batching/install_vllm.sh` builds (default `.venv-vllm`); without it the
scenario says so and measures our server alone. Exit status 1 if a goal was missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from bench import plots
from bench.batching.report import write_markdown
from bench.batching.scenario import Params, run
from bench.context import RunContext
from bench.machine_load import LoadMonitor, other_cores, snapshot
from bench.procs import ROOT, raise_fd_limit
from bench.report import fmt, meta_for


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,4,8,16, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("every concurrency must be at least 1")
    return levels


def _front_ends(text: str) -> tuple[int, ...]:
    counts = _levels(text)
    if 1 not in counts:
        raise argparse.ArgumentTypeError("must include 1: the goals judge one front end")
    return tuple(sorted(set(counts)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batching", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="concurrency 1,2; 16 tokens; one front end"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (default 3)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument(
        "--vllm-venv",
        type=Path,
        default=ROOT / ".venv-vllm",
        help="vLLM's venv (default .venv-vllm)",
    )
    parser.add_argument("--no-vllm", action="store_true", help="measure our server only")
    parser.add_argument("--concurrency", type=_levels, help="default 1,4,8,16 (1,2 if --quick)")
    parser.add_argument("--tokens", type=int, help="tokens per answer (default 128)")
    parser.add_argument("--threads", type=int, help="our server's --threads (default 1)")
    parser.add_argument(
        "--api-servers",
        type=_front_ends,
        metavar="N,N",
        help="our server's --api-servers values to measure, 1 among them (default 1,2; 1 if"
        " --quick); N > 1 is reported as `realtime N front ends`",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    params = Params.for_mode(args.quick)
    if args.concurrency:
        params = dataclasses.replace(params, concurrency=args.concurrency)
    if args.tokens:
        params = dataclasses.replace(params, tokens=args.tokens)
    if args.threads:
        params = dataclasses.replace(params, threads=args.threads)
    if args.api_servers:
        params = dataclasses.replace(params, api_servers=args.api_servers)
    command = " ".join(["python -m bench.batching", *(argv if argv is not None else sys.argv[1:])])
    args.out.mkdir(parents=True, exist_ok=True)
    raise_fd_limit()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-batching-") as scratch, LoadMonitor() as load:
        ctx = RunContext(quick=args.quick, repeats=args.repeats, scratch=Path(scratch))
        before = snapshot()
        result = run(ctx, params, None if args.no_vllm else args.vllm_venv)
        result.background = (other_cores(before, snapshot()), load.reset_peak())
    result.seconds = time.monotonic() - started
    meta = meta_for(command, args.quick, args.repeats)
    image = plots.render(result, args.out)
    write_markdown(args.out / "batching.md", result, meta, image)
    document = {"meta": meta, "scenario": result.to_json()}
    (args.out / "batching.json").write_text(json.dumps(document, indent=2) + "\n")
    for goal in result.goals:
        print(f"{goal.status:>4}  {goal.name}: {fmt(goal.value)} {goal.unit} ({goal.target})")
    return 1 if any(goal.status == "miss" for goal in result.goals) else 0


if __name__ == "__main__":
    raise SystemExit(main())
