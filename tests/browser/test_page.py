"""The browser page (clients/browser) in headless Chromium against real servers.

What the page shows is checked through the DOM; what happened on the server
through the echo engine's counters and the recorded requests: Stop is proven by
`requests_cancelled` and `active == 0`, "nothing resent" by the restarted
server's request count.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from realtime.http.ui import ui_routes
from tests.client.servers import (
    ScriptedServer,
    record_requests,
    serve_realtime,
    server_has_api_keys,
)
from tests.conftest import wait_until

expect: Any = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=10_000)

REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO_ROOT / "docs" / "screenshot.png"
LONG = " ".join(f"w{i}" for i in range(200))
STOP_ME = (
    "A long answer, long on purpose: Stop sends response.cancel for this request only, "
    "the engine stops generating, and what arrived so far stays on the page and in the "
    "conversation, so that the next question can refer to it."
)
STATS = re.compile(r"^ttft \d+ ms · [\d.]+ tok/s · \d+ tokens$")


def send(page: Any, text: str) -> Any:
    """Type a message and press Enter; the assistant's message element.

    Waits for the Send button first: the page ignores Enter until it is enabled
    (socket open, a model listed), and the model list may still be loading."""
    expect(page.locator("#send")).to_be_enabled()
    page.locator("#prompt").fill(text)
    page.locator("#prompt").press("Enter")
    return page.locator(".message.assistant").last


def test_page_streams_an_answer_and_stop_cancels_only_that_answer(page, tmp_path):
    server = serve_realtime(config=ServerConfig(echo_delay=0.06, log_level="warning"))
    stats = server.engine.stats
    requests = record_requests(server.app)
    try:
        page.goto(server.http_url + "/")
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        expect(page.locator("#model")).to_have_value("echo")  # from GET /v1/models
        page.locator("#temperature").fill("0.2")
        page.locator("#max-tokens").fill("400")
        page.locator("#system").fill("Be brief.")

        text = (
            "Hello! The echo model answers with my own words, so the tokens that stream "
            "into this page, piece by piece, are easy to check."
        )
        answer = send(page, text)
        expect(answer.locator(".content")).to_contain_text("Hello!")
        busy, partial = answer.evaluate(
            "n => [n.getAttribute('aria-busy'), n.querySelector('.content').textContent]"
        )
        assert busy == "true" and 0 < len(partial) < len(text)  # seen mid-stream
        expect(answer).to_have_attribute("aria-busy", "false")
        expect(answer.locator(".content")).to_have_text(text)
        expect(answer.locator(".stats")).to_have_text(STATS)
        first = requests[-1]
        assert first["temperature"] == 0.2 and first["max_tokens"] == 400
        assert [(m["role"], m["content"]) for m in first["messages"]] == [
            ("system", "Be brief."),
            ("user", text),
        ]

        stopped = send(page, STOP_ME)
        expect(stopped.locator(".content")).to_contain_text("A long answer")
        expect(page.locator("#send")).to_be_disabled()  # one answer at a time
        page.get_by_role("button", name="Stop").click()
        expect(stopped.locator(".badge")).to_have_text("stopped")
        wait_until(lambda: stats.requests_cancelled == 1 and stats.active == 0)
        generated = min(stats.tokens_by_request.values())
        assert 0 < generated < len(EchoTokenizer().encode(STOP_ME))
        expect(page.locator("#stop")).to_be_disabled()
        partial_answer = stopped.locator(".content").text_content()
        assert partial_answer and STOP_ME.startswith(partial_answer)

        # Same socket, and the stopped answer is part of the conversation.
        note = "Stopped mid-answer; the socket stays open."
        follow_up = send(page, note)
        expect(follow_up.locator(".content")).to_have_text(note)
        assert len(server.app.state.hub._sessions) == 1
        assert [m["role"] for m in requests[-1]["messages"]] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        assert requests[-1]["messages"][4]["content"] == partial_answer
        assert stats.requests_started == 3

        shot = tmp_path / "screenshot.png"
        page.locator("#prompt").fill("")
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # Refreshed on request only, so a test run does not rewrite a tracked file.
        if not SCREENSHOT.exists() or os.environ.get("REALTIME_UPDATE_SCREENSHOT") == "1":
            SCREENSHOT.write_bytes(shot.read_bytes())
    finally:
        server.stop()


def test_page_reconnects_after_a_kill_and_resends_nothing(page):
    config = ServerConfig(echo_delay=0.04, log_level="warning")
    first = serve_realtime(config=config)
    second = None
    try:
        page.goto(first.http_url + "/")
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        cut = send(page, LONG)
        expect(cut.locator(".content")).to_contain_text("w3")

        first.kill()  # no close frame: the network just ends
        banner = page.get_by_role("alert")
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("Connection lost")
        expect(banner).to_contain_text(re.compile(r"Reconnecting .*\(attempt \d+\)"))
        expect(cut.locator(".badge")).to_have_text("interrupted")
        expect(cut.locator(".note")).to_contain_text("not resent")
        expect(page.locator("#send")).to_be_disabled()

        second = serve_realtime(first.port, config=config)
        expect(banner).to_be_hidden()
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        assert second.engine.stats.requests_started == 0  # the cut answer was not resent
        after = send(page, "after the restart")
        expect(after.locator(".content")).to_have_text("after the restart")
        assert second.engine.stats.requests_started == 1
    finally:
        for running in (first, second):
            if running is not None and running.thread.is_alive():
                running.stop()


def test_page_folds_reasoning_shows_tool_calls_and_sends_the_key_once(page):
    scripted = ScriptedServer(require_key="sk-browser").start(extra_routes=ui_routes())
    try:
        page.goto(scripted.http_url + "/")
        banner = page.get_by_role("alert")
        expect(banner).to_contain_text("Cannot reach the server")  # refused: no key yet
        page.locator("#api-key").fill("sk-browser")
        page.get_by_role("button", name="Use key").click()
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        expect(banner).to_be_hidden()
        assert scripted.subprotocols[-1] == ["realtime", "realtime-key.sk-browser"]
        assert scripted.authorization[-1] is None
        expect(page.locator("#key-state")).to_have_text("A key is set for this tab.")

        thought = send(page, "think about it")
        expect(thought.locator(".content")).to_have_text("The answer is 42.")
        reasoning = thought.locator("details.reasoning")
        expect(reasoning).to_be_visible()
        expect(reasoning).not_to_have_attribute("open", "")  # folded
        expect(thought.locator(".reasoning-text")).to_be_hidden()
        thought.get_by_text("Reasoning").click()
        expect(thought.locator(".reasoning-text")).to_have_text("The user wants a number.")

        called = send(page, "weather in Paris")
        tool = called.locator(".tool-calls li")
        expect(tool).to_have_count(1)
        expect(tool.locator(".tool-name")).to_have_text("get_weather")
        expect(tool.locator(".tool-args")).to_have_text('{"city": "Paris"}')
        expect(called.locator(".content")).to_have_text("Let me check.")

        # Entered once: a reload reconnects with the key from sessionStorage.
        page.reload()
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        assert scripted.subprotocols[-1] == ["realtime", "realtime-key.sk-browser"]
        page.get_by_role("button", name="Forget key").click()
        expect(page.get_by_role("alert")).to_contain_text("Cannot reach the server")
    finally:
        scripted.stop()


@pytest.mark.skipif(not server_has_api_keys(), reason="this server has no API keys yet")
def test_the_key_opens_a_real_server_that_requires_one(page):
    config = ServerConfig(api_keys=("sk-real-1",), log_level="warning")
    server = serve_realtime(config=config)
    try:
        page.goto(server.http_url + "/")  # the page itself needs no key
        expect(page.get_by_role("alert")).to_contain_text("Cannot reach the server")
        page.locator("#api-key").fill("sk-real-1")
        page.get_by_role("button", name="Use key").click()
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        expect(page.locator("#model")).to_have_value("echo")  # /v1/models with the key
        answer = send(page, "through the guard")
        expect(answer.locator(".content")).to_have_text("through the guard")
    finally:
        server.stop()


def test_realtime_js_works_on_its_own(page, server_factory):
    """The module without the page: concurrent chats, callbacks, cancel by id, events."""
    server = server_factory(ServerConfig(echo_delay=0.03, log_level="warning"))
    server.app.router.routes.extend(ui_routes())
    page.goto(server.http_url + "/")  # any page of the origin, for the module's URL
    result = page.evaluate(
        """async (url) => {
          const { RealtimeClient, RealtimeError, backoffDelay } = await import("/realtime.js");
          const states = [];
          const client = new RealtimeClient(url, { model: "echo" });
          client.addEventListener("statechange", (e) => states.push(e.detail.state));
          await client.connect();
          const read = async (stream) => {
            let text = "";
            for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
            return text;
          };
          const a = client.chat([{ role: "user", content: "alpha beta gamma" }]);
          const b = client.chat([{ role: "user", content: "delta epsilon" }]);
          const pieces = [];
          // Long enough (~3 s) that the cancel after two pieces always lands first.
          const long = Array.from({ length: 100 }, (_, i) => `w${i}`).join(" ");
          const c = client.chat([{ role: "user", content: long }],
            { request_id: "mine" }, { onChunk: (chunk) => {
              pieces.push(chunk.choices[0]?.delta.content);
              if (pieces.length === 2) client.cancel("mine");
            } });
          const [textA, textB, doneC] = await Promise.all([read(a), read(b), c.done]);
          let error = null;
          try {
            await client.chat([{ role: "user", content: "x" }], { model: "nope" }).done;
          } catch (e) { error = [e instanceof RealtimeError, e.code, e.body.error.param]; }
          const doneA = await a.done;
          await client.close();
          return { textA, textB, statusC: doneC.status, ids: [a.requestId, b.requestId],
                   usageA: doneA.usage.completion_tokens, error, states,
                   delays: [0, 1, 2, 10].map((n) => backoffDelay(n, undefined, () => 0)) };
        }""",
        server.ws_url,
    )
    assert result["textA"] == "alpha beta gamma" and result["textB"] == "delta epsilon"
    assert result["statusC"] == "cancelled" and result["usageA"] == 3
    assert result["ids"][0] != result["ids"][1]
    assert result["error"] == [True, "model_not_found", "model"]
    assert result["states"] == ["connecting", "open", "closed"]
    assert result["delays"] == [300, 600, 1200, 8000]
    assert len(server.sessions()) <= 1
    assert server.engine.stats.requests_cancelled == 1
