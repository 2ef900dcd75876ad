"""Keep the exllamav2 extension a GPU run built, so the next run can skip the build.

`python -m bench.gpu_proof.extension save [--out DIR]` compresses the
`exllamav2_ext` torch built (JIT, in its extension cache) into
DIR/exllamav2_ext.so.xz (about 11 MiB for one architecture). Carried back in
`gpu-ext/` (ignored by git), `scripts/gpu-proof` puts it on the path and
exllamav2 imports it instead of compiling. It is only valid for the same torch,
CUDA and GPU architecture.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import sys
from pathlib import Path


def built_extension() -> Path | None:
    """The .so torch's extension cache holds for exllamav2_ext, if any."""
    from torch.utils.cpp_extension import _get_build_directory

    folder = Path(_get_build_directory("exllamav2_ext", False))
    found = sorted(folder.glob("exllamav2_ext*.so"))
    return found[0] if found else None


def save(out: Path) -> Path | None:
    source = built_extension()
    if source is None:
        print("gpu-proof: no built exllamav2 extension to save", file=sys.stderr)
        return None
    out.mkdir(parents=True, exist_ok=True)
    target = out / "exllamav2_ext.so.xz"
    with source.open("rb") as src, lzma.open(target, "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst)
    print(f"gpu-proof: saved the built extension as {target}", file=sys.stderr)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_proof.extension")
    parser.add_argument("command", choices=["save"])
    parser.add_argument("--out", type=Path, default=Path("gpu-proof-out"))
    args, _ = parser.parse_known_args(argv)
    return 0 if save(args.out) is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
