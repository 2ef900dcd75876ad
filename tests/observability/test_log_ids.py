"""A request's `request.end` log line names the id its client was given, in every dialect.

An operator greps the logs for the id a user reports: `chatcmpl-...` from the chat
API and the chat frames, `resp_...` from the Responses API (HTTP and WebSocket mode)
and from the Realtime events.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect


def _until(ws: ClientConnection, event_type: str) -> dict[str, Any]:
    while True:
        frame = json.loads(ws.recv(timeout=10))
        assert frame.get("type") != "error", frame
        if frame.get("type") == event_type:
            return frame


def _ends(stderr: str) -> dict[str, list[dict[str, Any]]]:
    """The `request.end` records, by conn_id (or "http")."""
    by_conn: dict[str, list[dict[str, Any]]] = {}
    for line in stderr.splitlines():
        record = json.loads(line)
        if record["event"] == "request.end":
            by_conn.setdefault(record.get("conn_id") or "http", []).append(record)
    return by_conn


def test_every_dialect_logs_the_id_its_client_was_given(serve_process):
    server = serve_process("--log-format", "json")
    seen: dict[str, str] = {}

    with connect(server.ws_url) as ws:  # chat frames
        ws.send(json.dumps({"model": "echo", "messages": [{"role": "user", "content": "a"}]}))
        first = json.loads(ws.recv(timeout=10))
        _until(ws, "response.done")
    seen["chat frames"] = first["id"]

    with connect(f"ws://127.0.0.1:{server.port}/v1/responses") as ws:  # WebSocket mode
        ws.send(json.dumps({"type": "response.create", "model": "echo", "input": "b"}))
        seen["responses socket"] = _until(ws, "response.completed")["response"]["id"]

    with connect(server.ws_url + "?model=echo") as ws:  # the Realtime events
        _until(ws, "session.created")
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "c"}]}
        ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        ws.send(json.dumps({"type": "response.create"}))
        seen["realtime events"] = _until(ws, "response.done")["response"]["id"]

    body = {"model": "echo", "input": "d"}
    seen["responses http"] = httpx.post(server.http_url + "/v1/responses", json=body).json()["id"]
    chat = {"model": "echo", "messages": [{"role": "user", "content": "e"}]}
    seen["chat http"] = httpx.post(server.http_url + "/v1/chat/completions", json=chat).json()["id"]
    assert server.stop() == 0

    ends = _ends(server.stderr())
    logged = sorted(record["id"] for records in ends.values() for record in records)
    assert logged == sorted(seen.values())
    assert seen["chat frames"].startswith("chatcmpl-")
    assert seen["chat http"].startswith("chatcmpl-")
    for dialect in ("responses socket", "realtime events", "responses http"):
        assert seen[dialect].startswith("resp_"), (dialect, seen[dialect])
