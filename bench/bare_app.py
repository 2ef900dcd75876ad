"""The bare stack under `bench.hostile_floor`: uvicorn, starlette and websockets, no realtime.

`python bench/bare_app.py PORT` serves `GET /health`, a `POST /v1/chat/completions`
that reads the whole body and answers 400, and a `/v1/realtime` socket that reads each
text frame whole (`receive_text`: the payload gathered, unmasked and decoded from UTF-8)
and answers with an error frame. It is what any server on this stack does with an 8 MiB
input before it can refuse it, so the neighbour's latency next to it is the floor our
server's can be measured against.
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

#: Above the 8 MiB inputs of the hostile scenario (our server's default frame limit).
MAX_FRAME_BYTES = 16 << 20
REFUSAL = '{"type":"error","error":{"message":"refused"}}'


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def chat(request: Request) -> JSONResponse:
    async for _ in request.stream():
        pass
    return JSONResponse({"error": {"message": "refused"}}, status_code=400)


async def realtime(websocket: WebSocket) -> None:
    await websocket.accept()
    while True:
        await websocket.receive_text()
        await websocket.send_text(REFUSAL)


app = Starlette(
    routes=[
        Route("/health", health),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        WebSocketRoute("/v1/realtime", realtime),
    ]
)

if __name__ == "__main__":
    port = int(sys.argv[1])
    print(f"serving on http://127.0.0.1:{port}/", flush=True)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        loop="uvloop",
        http="httptools",
        ws="websockets",
        ws_max_size=MAX_FRAME_BYTES,
    )
