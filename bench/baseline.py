"""The raw baseline, fed with the frames our own server sends.

Why capture instead of constructing: the baseline must send the same bytes the
full pipeline sends (same sizes, same fields), or the ratio would compare
different work. So the harness asks our server for each request once, keeps the
frames exactly as they came off the socket, and the raw server replays them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from bench.payloads import WS_PATH
from bench.procs import ServerProcess, start_raw
from bench.wire import DONE_PREFIX, WsClient


async def capture_frames(port: int, requests: Sequence[str]) -> dict[str, list[str]]:
    """Our server's frames for each request text, up to and including `response.done`."""
    client = await WsClient.connect("127.0.0.1", port, WS_PATH)
    try:
        captured: dict[str, list[str]] = {}
        for text in requests:
            client.send_text(text)
            frames = await client.recv_until_terminal()
            if not frames[-1].startswith(DONE_PREFIX):
                raise RuntimeError(f"capture failed: {frames[-1][:200]!r}")
            captured[text] = [frame.decode() for frame in frames]
        return captured
    finally:
        await client.close()


def start_raw_with(
    scratch: Path,
    frames: dict[str, list[str]],
    *,
    delay: float = 0.0,
    yield_each_frame: bool = False,
) -> ServerProcess:
    path = scratch / "raw-frames.json"
    path.write_text(json.dumps(frames))
    return start_raw(scratch, path, delay=delay, yield_each_frame=yield_each_frame)
