"""Handshake refusals name the bad header and never quote its value."""

from __future__ import annotations

from websockets.exceptions import InvalidHeader, InvalidHeaderFormat, InvalidMethod, InvalidUpgrade

from realtime.ws.handshake import handshake_error


def test_a_malformed_header_is_named_not_quoted():
    exc = InvalidHeaderFormat(
        "Sec-WebSocket-Protocol", "expected token", "realtime, realtime-key.sk-secret,,", 33
    )
    error = handshake_error(400, exc)
    body = error.to_body()["error"]
    assert body["message"] == "invalid WebSocket handshake: invalid Sec-WebSocket-Protocol header"
    assert body["code"] == "invalid_handshake" and "sk-secret" not in str(body)


def test_missing_empty_and_other_faults():
    assert (
        "missing Sec-WebSocket-Key header"
        in handshake_error(400, InvalidHeader("Sec-WebSocket-Key")).message
    )
    assert "empty Upgrade header" in handshake_error(400, InvalidUpgrade("Upgrade", "")).message
    assert "must be GET" in handshake_error(405, InvalidMethod("POST")).message
    assert handshake_error(400, None).message == "invalid WebSocket handshake: malformed request"
    assert handshake_error(500, ValueError("sk-secret")).code == "internal_error"
