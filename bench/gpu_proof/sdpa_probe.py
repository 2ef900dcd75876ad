"""Why the first pass over each context length decodes slowly without flash-attn.

exllamav2 without flash-attn runs attention through torch's
`scaled_dot_product_attention` with a lower-right causal mask, and every decode
step has a new key length. This probe times one decode-shaped SDPA call per key
length, twice over the same lengths (first pass: new shapes; second pass: seen
shapes), with each SDPA backend torch may pick, so the report can say which
backend pays per new shape. `python -m bench.gpu_proof.sdpa_probe` (GPU only).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any


def _pass(torch: Any, lengths: range, heads: int, head_dim: int) -> float:
    """Median milliseconds of one decode-shaped SDPA call per key length."""
    from torch.nn.attention.bias import causal_lower_right
    from torch.nn.functional import scaled_dot_product_attention

    q = torch.randn(1, heads, 1, head_dim, device="cuda", dtype=torch.half)
    times = []
    for length in lengths:
        k = torch.randn(1, heads, length, head_dim, device="cuda", dtype=torch.half)
        torch.cuda.synchronize()
        start = time.perf_counter()
        scaled_dot_product_attention(q, k, k, causal_lower_right(1, length))
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def probe(first: int = 2000, count: int = 40) -> dict[str, Any]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out: dict[str, Any] = {"torch": torch.__version__, "lengths": [first, first + count * 4]}
    backends = {
        "default": None,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "math": SDPBackend.MATH,
    }
    for offset, (name, backend) in enumerate(backends.items()):
        # Each backend gets lengths no other backend has seen.
        lengths = range(first + offset, first + offset + count * 8, 8)
        try:
            if backend is None:
                one, two = _pass(torch, lengths, 4, 128), _pass(torch, lengths, 4, 128)
            else:
                with sdpa_kernel([backend]):
                    one, two = _pass(torch, lengths, 4, 128), _pass(torch, lengths, 4, 128)
            out[name] = {"first_pass_ms": round(one, 3), "second_pass_ms": round(two, 3)}
        except RuntimeError as exc:  # a backend that refuses this mask or shape
            out[name] = {"error": str(exc).splitlines()[0][:160]}
    return out


if __name__ == "__main__":
    json.dump(probe(), sys.stdout, indent=2)
    sys.stdout.write("\n")
