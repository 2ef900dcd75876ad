"""The cpu engine: transformers on PyTorch, batched continuously on one model thread.

`engine.py` is the engine the registry builds; `backend.py` its model half (the
batch scheduler); `runner.py` the forward passes; `batch_cache.py` the KV layout;
`sampling.py` logits to tokens; `stats.py` its counters. Importing this package
imports torch (the registry imports it only when the cpu engine is chosen).
"""

from realtime.engine.cpu.engine import CpuEngine

__all__ = ["CpuEngine"]
