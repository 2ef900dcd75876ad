"""Structured logs: one JSON object per line with connection and request ids."""

from __future__ import annotations

import json
import logging

import httpx
from websockets.sync.client import connect

from realtime.observability.logs import JsonFormatter, TextFormatter, event

KEY = "sk-log-test-key"


def test_json_formatter_puts_event_fields_on_one_line():
    logger = logging.getLogger("realtime.test")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        event(logger, "request.end", conn_id="ws-1", request_id="r\n1", status="completed")
    finally:
        logger.removeHandler(handler)
    line = JsonFormatter().format(records[0])
    assert "\n" not in line
    data = json.loads(line)
    assert data["event"] == "request.end" and data["level"] == "info"
    assert data["conn_id"] == "ws-1" and data["request_id"] == "r\n1"
    assert data["ts"].endswith("Z")
    text = TextFormatter().format(records[0])
    assert text.startswith("INFO realtime.test: request.end") and "conn_id=ws-1" in text


def test_serve_with_json_logs_writes_one_event_per_line_with_ids(serve_process):
    server = serve_process("--log-format", "json", "--api-key", KEY)
    auth = {"Authorization": f"Bearer {KEY}"}
    with connect(server.ws_url, additional_headers=auth) as ws:
        ws.send(json.dumps({"model": "echo", "request_id": "q1",
                            "messages": [{"role": "user", "content": "log me"}]}))  # fmt: skip
        while json.loads(ws.recv(timeout=10)).get("type") != "response.done":
            pass
    body = {"model": "echo", "messages": [{"role": "user", "content": "over http"}]}
    response = httpx.post(server.http_url + "/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200
    refused = httpx.get(f"{server.http_url}/v1/models?api_key={KEY}")
    assert refused.status_code == 400
    assert server.stop() == 0

    lines = [line for line in server.stderr().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "event", "message"} <= set(r) for r in records)
    by_event: dict[str, list[dict]] = {}
    for record in records:
        by_event.setdefault(record["event"], []).append(record)
    opened, closed = by_event["ws.open"][0], by_event["ws.close"][0]
    assert opened["conn_id"] == closed["conn_id"] and closed["code"] in (1000, 1005)
    ends = {r["transport"]: r for r in by_event["request.end"]}
    assert ends["ws"]["conn_id"] == opened["conn_id"] and ends["ws"]["request_id"] == "q1"
    assert ends["ws"]["status"] == "completed" and ends["ws"]["id"].startswith("chatcmpl-")
    assert ends["http"]["request_id"] == response.headers["x-request-id"]
    assert isinstance(ends["ws"]["ttft_ms"], float)
    assert "server.drain" in by_event
    assert by_event["access.refused"][0]["code"] == "credentials_in_query"
    assert KEY not in server.stderr()
