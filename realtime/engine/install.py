"""How to install the CPU engine's optional parts, said once for every message that says it.

The engine's ImportError gives it, and so does `realtime.testing.tiny_model`, which needs the
same torch and transformers.

The CPU engine's extra is installed with the repository's constraints file, which
pins the PyTorch release the project is tested with: where that release's CPU
build is offered, pip takes it, while a plain `torch` requirement resolves to the
newest release and, on Linux, several GB of CUDA packages a CPU engine never uses.
"""

from __future__ import annotations

CPU_INSTALL_HINT = (
    "from a clone of the repository, pip install -c constraints.txt -e '.[cpu]'"
    " (docs/howto/serve-a-model.md)"
)
