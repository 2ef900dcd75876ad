"""WebSocket edges through a real server: invalid UTF-8, dropped connections, oversize messages.

Each bad input gets its documented close code, the client can read it, the log
has no traceback or ERROR line, and other sockets carry on.
"""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode

from realtime.config import ServerConfig
from realtime.observability.metrics import close_code_label
from tests.conftest import async_wait_until, scrape_metrics
from tests.ws.wsclient import chat, collect_until_terminal, text_of

pytestmark = pytest.mark.anyio

MIB = 1 << 20


def _closes(base_url: str) -> dict[str, float]:
    return {
        key: value
        for key, value in scrape_metrics(base_url).items()
        if key.startswith("realtime_ws_closes_total")
    }


def _assert_clean(log: str) -> None:
    assert "Traceback" not in log, log
    assert "ERROR" not in log, log


async def test_invalid_utf8_closes_1007_with_a_reason_and_no_traceback(serve_process):
    server = serve_process("--log-level", "info")
    async with connect(server.ws_url) as neighbour, connect(server.ws_url) as ws:
        await ws.send(b'{"model": "echo", "messages": "\xff\xfe"}', text=True)
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        await neighbour.send(chat("still here"))
        assert text_of(await collect_until_terminal(neighbour)) == "still here"
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1007
    assert closed.value.rcvd.reason == "invalid UTF-8 in a text frame"
    await async_wait_until(lambda: "code=1007" in server.stderr())
    assert _closes(server.http_url)['realtime_ws_closes_total{code="1007"}'] == 1
    server.stop()
    _assert_clean(server.stderr())


async def test_a_connection_dropped_without_a_close_frame_is_1006_in_metric_and_log(
    serve_process,
):
    server = serve_process("--log-level", "info", "--echo-delay", "0.01")
    ws = await connect(server.ws_url)
    await ws.send(chat("one two three four five six seven eight nine ten", request_id="r"))
    await ws.recv()
    ws.transport.abort()  # TCP reset, no Close frame
    await async_wait_until(lambda: "ws.close" in server.stderr())
    closes = _closes(server.http_url)
    assert closes == {'realtime_ws_closes_total{code="1006"}': 1.0}, closes
    line = next(li for li in server.stderr().splitlines() if "ws.close" in li)
    assert "code=1006" in line, line
    server.stop()
    _assert_clean(server.stderr())


async def test_a_client_close_frame_without_a_code_stays_1005(server):
    """1005 is what RFC 6455 reports for a Close frame that carries no status code."""
    raw = await connect(server.ws_url)
    raw.protocol.send_frame(Frame(Opcode.CLOSE, b""))
    raw.send_data()
    with pytest.raises(ConnectionClosed):
        await raw.recv()
    no_code = 'realtime_ws_closes_total{code="1005"}'
    await async_wait_until(lambda: no_code in _closes(server.http_url))


@pytest.mark.parametrize("size_mib", [16, 64])
async def test_a_standard_client_sending_an_oversize_message_reads_close_1009(
    server_factory, size_mib
):
    server = server_factory(ServerConfig(log_level="warning"))
    # What a user writes: the context manager's exit must not raise either.
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send("x" * (size_mib * MIB))
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
    assert closed.value.rcvd.reason.startswith(f"frame with {size_mib * MIB} bytes exceeds limit")
    # The server finished the handshake: the socket is gone, the server still serves.
    await async_wait_until(lambda: not server.sessions())
    async with connect(server.ws_url) as ws:
        await ws.send(chat("after"))
        assert text_of(await collect_until_terminal(ws)) == "after"


async def test_an_oversize_message_while_other_requests_stream_on_other_sockets(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.005, log_level="warning"))
    text = " ".join(f"w{i}" for i in range(100))
    async with connect(server.ws_url) as good, connect(server.ws_url, max_size=None) as bad:
        await good.send(chat(text))
        sender = asyncio.create_task(bad.send("y" * (16 * MIB)))
        answer = await collect_until_terminal(good)
        with pytest.raises(ConnectionClosed) as closed:
            await bad.recv()
        await asyncio.gather(sender, return_exceptions=True)
    assert text_of(answer) == text
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_close_code_labels_are_a_fixed_set():
    assert [close_code_label(c) for c in (1000, 1006, 1015)] == ["1000", "1006", "1015"]
    assert [close_code_label(c) for c in (3000, 3999, 4000, 4999)] == [
        "3xxx",
        "3xxx",
        "4xxx",
        "4xxx",
    ]
    assert [close_code_label(c) for c in (0, 1016, 2999, 5000, 65535)] == ["other"] * 5


async def test_clients_closing_with_many_private_codes_add_one_label_not_one_each(server):
    for code in range(4000, 4040):
        async with connect(server.ws_url) as ws:
            await ws.close(code)
    await async_wait_until(
        lambda: _closes(server.http_url).get('realtime_ws_closes_total{code="4xxx"}') == 40
    )
    assert list(_closes(server.http_url)) == ['realtime_ws_closes_total{code="4xxx"}']


async def test_invalid_utf8_then_an_oversize_frame_in_one_read_closes_1009_cleanly(
    server_factory,
):
    """Both faults arrive together. Read at once, the layer's 1009 comes first and the bad
    text is dropped (it used to raise inside the transport: a reset, no Close frame);
    read apart, the 1007 comes first. Either way the client reads a Close frame."""
    server = server_factory(ServerConfig(max_frame_bytes=1024, log_level="warning"))
    for _ in range(5):
        async with connect(server.ws_url, max_size=None) as ws:
            ws.protocol.send_frame(Frame(Opcode.TEXT, b"\xff\xfe not utf-8"))
            ws.protocol.send_frame(Frame(Opcode.TEXT, b"x" * 1100))
            ws.send_data()  # one write: the server usually reads both frames at once
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None, "reset without a Close frame"
        assert closed.value.rcvd.code in (1007, 1009)
    async with connect(server.ws_url) as ws:
        await ws.send(chat("still serving"))
        assert text_of(await collect_until_terminal(ws)) == "still serving"
