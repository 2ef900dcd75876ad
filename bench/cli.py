"""`python -m bench [--quick] [--scenarios a,b] [--out DIR] [--repeats N] [--retries N]`.

Runs the chosen scenarios (all by default) in order, each against its baseline
in the same session, and writes DIR/results.md, DIR/results.json and one PNG per
scenario. A scenario that fails is reported as failed (with the error in the
report) and the others still run; the exit status is 1 if any failed. With
`--retries N` a scenario that raised runs again, up to N times, and the report
names what it raised each time (the CI smoke run: one scenario's harness once
timed out on a loaded machine, which says nothing about the others).
Progress goes to stderr, the goal summary to stdout.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from bench import plots, report
from bench.context import RunContext
from bench.machine_load import LoadMonitor, other_cores, snapshot
from bench.procs import raise_fd_limit
from bench.results import ScenarioResult
from bench.scenarios import MODULES, by_name

DEFAULT_OUT = Path("docs/benchmarks")
#: Other processes' CPU under which the machine counts as quiet (`--quiet-wait`).
QUIET_CORES = 0.25


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes: every scenario in seconds (the CI smoke run)",
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(m.NAME for m in MODULES),
        help="comma-separated subset of: %(default)s",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default %(default)s)"
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each scenario, wait up to this long for other processes to leave the "
        "CPUs alone (under 0.25 cores over 2 s); 0 = do not wait (default)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per variant; the report shows their median (default 3)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=0,
        help="run a scenario that raised again, up to this many times; the report names "
        "each error that was retried (default 0: a raise fails the scenario)",
    )
    return parser


def _wait_for_quiet(ctx: RunContext, name: str, limit: float) -> None:
    """Bounded wait for a quiet machine; the measured background load is reported anyway."""
    deadline = time.monotonic() + limit
    while True:
        start = snapshot()
        time.sleep(2.0)
        busy = other_cores(start, snapshot())
        if busy < QUIET_CORES:
            return
        if time.monotonic() > deadline:
            ctx.log(name, f"machine still busy ({busy:.2f} cores of other work); starting anyway")
            return
        ctx.log(name, f"waiting for a quiet machine ({busy:.2f} cores of other work)")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    modules = by_name()
    chosen = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in modules]
    if unknown or not chosen:
        print(f"unknown scenario(s) {unknown}; choose from {', '.join(modules)}", file=sys.stderr)
        return 2
    if args.repeats < 1 or args.retries < 0:
        print("--repeats must be at least 1 and --retries at least 0", file=sys.stderr)
        return 2
    raise_fd_limit()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(
        ["python -m bench"]
        + (["--quick"] if args.quick else [])
        + ([f"--scenarios {','.join(chosen)}"] if len(chosen) < len(modules) else [])
        + ([f"--repeats {args.repeats}"] if args.repeats != 3 else [])
        + ([f"--retries {args.retries}"] if args.retries else [])
        + ([f"--quiet-wait {args.quiet_wait:g}"] if args.quiet_wait else [])
    )
    results: list[ScenarioResult] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch, LoadMonitor() as monitor:
        ctx = RunContext(quick=args.quick, repeats=args.repeats, scratch=Path(scratch))
        for name in chosen:
            module = modules[name]
            ctx.log(name, "starting")
            if args.quiet_wait > 0:
                _wait_for_quiet(ctx, name, args.quiet_wait)
            started = time.monotonic()
            before = snapshot()
            monitor.reset_peak()
            retried: list[str] = []
            result: ScenarioResult
            while True:
                try:
                    result = module.run(ctx)
                except Exception as exc:
                    traceback.print_exc()
                    error = f"{type(exc).__name__}: {exc}"
                    if len(retried) < args.retries:
                        retried.append(error)
                        ctx.log(name, f"raised ({error}); running it again")
                        continue
                    failed = True
                    result = ScenarioResult(name, module.TITLE, module.SUMMARY, {})
                    result.notes.append(f"FAILED: {error}")
                    result.detail["error"] = error
                break
            for error in retried:
                result.notes.append(f"Run again after it raised: {error}")
            if retried:
                result.detail["retried"] = retried
            result.seconds = time.monotonic() - started
            result.background = (other_cores(before, snapshot()), monitor.reset_peak())
            results.append(result)
            ctx.log(name, f"done in {result.seconds:.1f} s")
    images = {}
    for result in results:
        image = plots.render(result, out)
        if image is not None:
            images[result.name] = image
    meta = report.meta_for(command, args.quick, args.repeats)
    report.write_json(out / "results.json", meta, results)
    report.write_markdown(out / "results.md", meta, results, images)
    for result in results:
        for goal in result.goals:
            print(
                f"{goal.status:>4}  {result.name}: {goal.name}: "
                f"{report.fmt(goal.value)} {goal.unit} (target {goal.target})"
            )
        for error in result.detail.get("retried", ()):
            print(f"RETRIED  {result.name}: {error}")
        if "error" in result.detail:
            print(f"FAIL  {result.name}: {result.detail['error']}")
    return 1 if failed else 0
