"""The wheels the GPU proof carries: downloaded where a registry answers, installed where none does.

The lent GPU machines have CUDA's compiler, PyTorch, transformers, tokenizers,
jinja2 and ninja, but no network, and not what the server itself needs
(starlette, uvicorn, pydantic, websockets, the openai SDK, exllamav2). So:

* `download` (run by `scripts/gpu-wheels` on a machine with a registry) resolves
  realtime's runtime requirements plus the openai SDK for each target Python with
  `pip install --dry-run --report` (binary wheels for manylinux x86-64 only, pinned
  to the versions this environment has, which the test suite ran with), then
  fetches every wheel of that closure with `pip download --no-deps`, and
  exllamav2 0.3.2. Its wheel is pure Python: no prebuilt extension on PyPI matches
  the machines' torch and CUDA, so exllamav2 compiles its extension with ninja on
  first import (JIT), which `scripts/gpu-proof` runs for the GPU's architecture
  only. The folder (`wheels/`, ignored by git) is what a device call carries.
* `install` (run by `scripts/gpu-proof` there) installs from that folder only
  (`--no-index`): exllamav2 without its declared requirements (pandas and
  fastparquet serve its quantizer; the rest are on the machine), then the
  requirements, resolved against what the machine already has - a carried wheel
  is installed only where the machine lacks the package or has a version the
  requirement refuses.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXLLAMAV2 = "exllamav2==0.3.2"
#: What drives the server besides realtime's own requirements.
DRIVER_REQUIREMENTS = ("openai>=1.40",)
#: The Python of the lent machines' image (seen 3.12.3); more with --python.
DEFAULT_PYTHONS = ("3.12",)
#: pip matches a manylinux tag exactly, so every glibc from 2.5 to the image's 2.39 is named
#: (llguidance, for one, ships only manylinux_2_31).
PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(39, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
#: Never carried: huge, and part of the machines' image by definition of "a CUDA machine".
NOT_CARRIED = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")


def requirements() -> list[str]:
    """realtime's runtime requirements (pyproject.toml) plus the driver's."""
    # Python 3.11+ (the machine running `download`); mypy checks bench/ as 3.10 (pyproject).
    import tomllib  # type: ignore[import-not-found]

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    return [*project["dependencies"], *DRIVER_REQUIREMENTS]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _local_pins() -> list[str]:
    """`name==version` for every distribution in this environment (the tested versions)."""
    pins = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and not NOT_CARRIED.match(_normalize(name)) and _normalize(name) != "realtime":
            pins[_normalize(name)] = f"{name}=={dist.version}"
    return sorted(pins.values())


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
    )


def _platform_args(python: str) -> list[str]:
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def resolve(python: str, pins: list[str]) -> list[tuple[str, str]]:
    """The (name, version) closure of `requirements()` for `python`, by pip's resolver."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        constraints = Path(scratch) / "constraints.txt"
        constraints.write_text("\n".join(pins) + "\n")
        base = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
        base += ["--target", str(Path(scratch) / "target"), *_platform_args(python)]
        done = _pip(*base, "-c", str(constraints), *requirements())
        if done.returncode != 0:  # a pinned version without a wheel for this Python
            done = _pip(*base, *requirements())
        if done.returncode != 0:
            raise SystemExit(f"pip could not resolve for Python {python}:\n{done.stderr[-3000:]}")
        installs = json.loads(report.read_text())["install"]
    return sorted((item["metadata"]["name"], item["metadata"]["version"]) for item in installs)


def download(dest: Path, pythons: list[str]) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    pins = _local_pins()
    manifest = [f"# wheels for scripts/gpu-proof; Pythons {', '.join(pythons)}"]
    for python in pythons:
        wanted = [
            f"{name}=={version}"
            for name, version in resolve(python, pins)
            if not NOT_CARRIED.match(_normalize(name))
        ]
        done = _pip("download", "--no-deps", "--dest", str(dest), *_platform_args(python), *wanted)
        if done.returncode != 0:
            raise SystemExit(f"pip download failed for Python {python}:\n{done.stderr[-3000:]}")
        manifest += [f"python {python}: {spec}" for spec in wanted]
    done = _pip("download", "--no-deps", "--dest", str(dest), EXLLAMAV2)
    if done.returncode != 0:
        raise SystemExit(f"pip download {EXLLAMAV2} failed:\n{done.stderr[-3000:]}")
    manifest.append(f"any python: {EXLLAMAV2} (pure Python; builds its CUDA extension on import)")
    (dest / "MANIFEST.txt").write_text("\n".join(manifest) + "\n")
    size = sum(f.stat().st_size for f in dest.glob("*.whl"))
    print(f"{len(list(dest.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {dest}")
    return 0


def install(source: Path) -> int:
    """Install from `source` only; a package the machine lacks and no wheel provides fails."""
    if not source.is_dir() or not any(source.glob("exllamav2-*.whl")):
        print(
            f"gpu-proof: no carried wheels in {source}/ (run scripts/gpu-wheels where a package "
            "registry is reachable, then carry that folder)",
            file=sys.stderr,
        )
        return 3
    local = ["--no-index", "--find-links", str(source), "--quiet"]
    steps = [["install", *local, "--no-deps", EXLLAMAV2], ["install", *local, *requirements()]]
    for step in steps:
        done = _pip(*step)
        if done.returncode != 0:
            print(
                f"gpu-proof: pip {' '.join(step)} failed:\n{done.stderr[-3000:]}", file=sys.stderr
            )
            return 3
    print(
        f"gpu-proof: installed from {source}/: exllamav2 {importlib.metadata.version('exllamav2')}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_proof.wheels", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("download", help="fetch the wheels (needs a package registry)")
    get.add_argument("--dest", type=Path, default=ROOT / "wheels")
    get.add_argument(
        "--python",
        default=",".join(DEFAULT_PYTHONS),
        help="comma-separated target Pythons (default %(default)s)",
    )
    put = sub.add_parser("install", help="install the carried wheels (no network)")
    put.add_argument("--dir", type=Path, default=ROOT / "wheels")
    args = parser.parse_args(argv)
    if args.command == "download":
        return download(args.dest, [p.strip() for p in args.python.split(",") if p.strip()])
    return install(args.dir)


if __name__ == "__main__":
    raise SystemExit(main())
