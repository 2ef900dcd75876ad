"""The raw baseline: a bare starlette + uvicorn WebSocket handler replaying canned frames.

`python -m bench.raw_server --frames FILE [--delay S]` serves ws://127.0.0.1:PORT/raw.

Why it exists: "close to the limit" needs a limit. This handler does the least a
Python server on the same stack can do per token - send an already serialized
frame - so the ratio of our full pipeline to it is the cost of everything we add
(engine steps, detokenizing, chunk building, JSON, queues, tasks). To compare
like with like it sends the very frames our server sent for the same request
(captured from it by the harness; FILE maps request text to frame texts), and it
runs under the uvicorn settings `realtime.server.uvicorn_config` builds
(websockets-sansio, no per-message compression, the same size limit and
keepalive), from that function itself so the two cannot drift apart.

With `--delay` it sleeps that long before every frame, the pacing of the echo
engine's `--echo-delay`, for the many-sockets baseline. With `--yield-each-frame`
(and no delay) it passes through the event loop once before every frame, as the
zero-delay echo engine does once per token: the ceiling for any server whose
engine hands over one token per loop pass. Sockets that send nothing are simply
held, for the idle-sockets baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from collections.abc import Sequence
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from realtime.config import ServerConfig
from realtime.server import uvicorn_config

UNKNOWN_REQUEST = '{"type":"error","request_id":null,"error":{"message":"raw: unknown request"}}'


def build_raw_app(
    frames: dict[str, list[str]], delay: float, *, yield_each_frame: bool = False
) -> Starlette:
    """A one-route app: each request text is answered with its canned frames."""

    async def replay(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                text = await websocket.receive_text()
                answer = frames.get(text)
                if answer is None:
                    await websocket.send_text(UNKNOWN_REQUEST)
                elif delay:
                    for frame in answer:
                        await asyncio.sleep(delay)
                        await websocket.send_text(frame)
                elif yield_each_frame:
                    for frame in answer:
                        await asyncio.sleep(0)
                        await websocket.send_text(frame)
                else:
                    for frame in answer:
                        await websocket.send_text(frame)
        except WebSocketDisconnect:
            return

    return Starlette(routes=[WebSocketRoute("/raw", replay)])


class _AnnouncingServer(uvicorn.Server):
    """Prints the bound port once listening, like `realtime serve` does."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"raw baseline listening on ws://127.0.0.1:{port}/raw", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.raw_server", description=__doc__)
    parser.add_argument("--frames", type=Path, required=True, help="JSON: request text -> frames")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each frame")
    parser.add_argument(
        "--yield-each-frame",
        action="store_true",
        help="pass through the event loop before every frame (one loop pass per token)",
    )
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    frames: dict[str, list[str]] = json.loads(args.frames.read_text())
    # The same settings as `realtime serve` with its defaults, warnings-only logs.
    settings = ServerConfig(host="127.0.0.1", port=args.port, log_level="warning")
    app = build_raw_app(frames, args.delay, yield_each_frame=args.yield_each_frame)
    server = _AnnouncingServer(uvicorn_config(settings, app))
    server.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
