"""The exllamav2 engine: exllamav2's dynamic generator on CUDA, on one model thread.

`engine.py` is the engine the registry builds (importing it needs neither CUDA nor
exllamav2: `start()` checks both); `backend.py` its model half; `salt.py` isolates
cached pages per `cache_salt`.
"""

from realtime.engine.exllamav2.engine import ExLlamaV2Engine

__all__ = ["ExLlamaV2Engine"]
