"""Three replicas behind the shipped nginx configuration (deploy/nginx), one PostgreSQL store.

All on loopback: a throwaway PostgreSQL cluster, three `realtime serve --engine cpu`
processes with the tiny random-weight model and `--response-store postgresql://...`,
and Debian's nginx running `deploy/nginx/realtime.conf` (its listen line and replica
list filled in, as a deployment does). Checked through nginx, with the real `openai`
SDK and the project's own client library:

* a conversation's turns (Responses, `previous_response_id`, one session header) all
  land on one replica, and report `cached_tokens` from turn 2 on;
* different sessions spread over the three replicas; the key is the first agent
  session header, then `x-session-affinity`;
* kill -9 of a replica while it streams: the interrupted turn is sent again with the
  same `previous_response_id` and nginx answers it from another replica, which reads
  the conversation from PostgreSQL; the client library's socket reconnects through
  nginx to another replica and its next request is answered, and so does the REPL's
  (`python -m realtime.client --session KEY`, whose key put it on the same replica);
  every response acknowledged before the kill is still there.

The tests share one fleet (starting three cpu-engine servers costs most of the time),
and run in file order: the kill comes last.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pexpect
import pytest

from realtime.client import RealtimeClient, RequestInterruptedError
from realtime.client.types import ReconnectPolicy
from realtime.testing.nginx import NginxUnavailable, ThrowawayNginx
from realtime.testing.postgres import ThrowawayPostgres
from tests.conftest import ServerProcess, spawn_server
from tests.postgres_fixtures import create_database

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "nginx"
MODEL = "tiny"
#: A stored answer's statuses: done, or cut at max_output_tokens (a random model rarely stops).
FINISHED = ("completed", "incomplete")
#: A grammar that keeps a random model writing (no end before 4,000 characters), so a
#: stream is still running when its replica is killed.
LONG_ANSWER: Any = {
    "format": {
        "type": "json_schema",
        "name": "story",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"story": {"type": "string", "minLength": 4000}},
            "required": ["story"],
            "additionalProperties": False,
        },
    }
}
pytestmark = pytest.mark.timeout(600)


def _nginx_or_skip() -> None:
    from realtime.testing.nginx import find_nginx

    if find_nginx() is None:
        if os.environ.get("REALTIME_REQUIRE_NGINX") == "1":
            pytest.fail("nginx tests required but no nginx binary found")
        pytest.skip("no nginx binary found")


@dataclass
class Fleet:
    replicas: list[ServerProcess]
    proxy: ThrowawayNginx
    #: Every response id a client was given a finished response for (its terminal event:
    #: completed, or incomplete at max_output_tokens; both are stored first).
    acknowledged: list[str] = field(default_factory=list)

    def replica_at(self, address: str) -> ServerProcess:
        (replica,) = [r for r in self.replicas if address == f"127.0.0.1:{r.port}"]
        return replica

    def sdk(self, session: str, header: str = "x-session-id") -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.proxy.url + "/v1",
            api_key="none",
            max_retries=0,
            timeout=120,
            default_headers={header: session},
        )

    def served(self, key: str) -> list[str]:
        return [upstream for k, upstream in self.proxy.served() if k == key]


@pytest.fixture(scope="module")
def fleet(postgres_cluster: ThrowawayPostgres, tiny_model_dir: Path) -> Iterator[Fleet]:
    _nginx_or_skip()
    url = create_database(postgres_cluster, f"replicas_{os.getpid()}")
    argv = (
        "--engine", "cpu", "--model", str(tiny_model_dir), "--model-name", MODEL,
        "--threads", "1", "--response-store", url, "--log-level", "warning", "--no-ui",
    )  # fmt: skip
    replicas: list[ServerProcess] = []
    try:
        with ThreadPoolExecutor(3) as pool:  # each loads the model in its engine process
            starting = [pool.submit(spawn_server, *argv, timeout=240) for _ in range(3)]
        replicas = [f.result() for f in starting if f.exception() is None]
        failed = [f.exception() for f in starting if f.exception() is not None]
        if failed:
            raise RuntimeError(f"a replica did not start: {failed[0]}")
        try:
            proxy = ThrowawayNginx(DEPLOY, [r.port for r in replicas])
        except NginxUnavailable as exc:
            pytest.fail(str(exc))
        with proxy:
            yield Fleet(replicas, proxy)
    finally:
        for replica in replicas:
            _kill(replica)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _kill(replica: ServerProcess) -> None:
    """kill -9 the replica: its server process and its engine process."""
    if replica.proc.poll() is None:
        engines = _children(replica.proc.pid)
        replica.proc.kill()
        for pid in engines:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        replica.proc.wait()


#: The REPL's stats line, printed when an answer is complete.
STATS = re.compile(r"\[ttft \d+ ms, (?:[\d.]+|-) tok/s, \d+ tokens?\]")


def _spawn_repl(url: str, session: str, home: Path) -> pexpect.spawn:
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
    env["HOME"] = str(home)
    return pexpect.spawn(
        sys.executable,
        ["-m", "realtime.client", url, "--session", session, "--no-history"],
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 5000),
    )


def _ask(repl: pexpect.spawn, text: str) -> str:
    """Type a message at the REPL's prompt; what it printed up to the stats line."""
    repl.expect_exact("> ")
    repl.sendline(text)
    repl.expect_exact(text + "\r\n")  # the terminal's echo
    repl.expect(STATS)
    return str(repl.before)


def _turn(
    sdk: openai.OpenAI, text: str, previous: str | None, tokens: int = 8
) -> openai.types.responses.Response:
    return sdk.responses.create(
        model=MODEL,
        input=text,
        previous_response_id=previous,
        max_output_tokens=tokens,
        store=True,
        temperature=0,
    )


def test_a_conversation_stays_on_one_replica_and_is_cached_from_turn_2(fleet: Fleet) -> None:
    sdk = fleet.sdk("conversation-a")
    previous = None
    cached = []
    for turn in range(4):
        response = _turn(sdk, f"turn {turn}: tell me about the weather and the sea", previous)
        assert response.status in FINISHED
        fleet.acknowledged.append(response.id)
        assert response.usage is not None
        cached.append(response.usage.input_tokens_details.cached_tokens)
        previous = response.id
    served = fleet.served("conversation-a")
    assert len(served) == 4 and len(set(served)) == 1, served
    assert all(c > 0 for c in cached[1:]), cached


def test_sessions_spread_over_the_replicas_by_the_first_session_header(fleet: Fleet) -> None:
    with httpx.Client(base_url=fleet.proxy.url, timeout=60) as http:
        for n in range(30):
            answer = http.post(
                "/v1/responses",
                json={"model": MODEL, "input": "hi", "max_output_tokens": 1},
                headers={"session-id": f"spread-{n}"},
            )
            assert answer.status_code == 200, answer.text
        # an agent header wins over x-session-affinity; x-session-affinity alone is a key
        both = {"x-claude-code-session-id": "agent-key", "x-session-affinity": "ours"}
        ours = {"x-session-affinity": "ours-alone"}
        for headers in (both, ours):
            answer = http.post(
                "/v1/responses",
                json={"model": MODEL, "input": "hi", "max_output_tokens": 1},
                headers=headers,
            )
            assert answer.status_code == 200, answer.text
    keys = Counter(upstream for key, upstream in fleet.proxy.served() if key.startswith("spread-"))
    assert sum(keys.values()) == 30
    every = {f"127.0.0.1:{r.port}" for r in fleet.replicas}
    assert set(keys) <= every, keys
    # Thirty keys on a consistent-hash ring reach all three replicas, unless nginx took
    # one out (passive health: a refused connection or a 502/503, as on a machine loaded
    # past its limits), which its access log shows as a request tried on two replicas;
    # then that replica's keys went to the next one on the ring, as they should.
    spread = [line for line in fleet.proxy.access_log.read_text().splitlines() if "spread-" in line]
    retried = [line for line in spread if re.search(r"upstream=\S+, ", line)]
    assert set(keys) == every or (retried and len(keys) >= 2), (keys, spread)
    assert fleet.served("agent-key") and not fleet.served("ours")
    assert fleet.served("ours-alone")


def test_kill_9_mid_stream_the_conversation_and_the_socket_go_on_elsewhere(
    fleet: Fleet, tmp_path: Path
) -> None:
    session = "conversation-b"
    sdk = fleet.sdk(session)
    first = _turn(sdk, "the first turn of the conversation that survives", None)
    second = _turn(sdk, "the second turn", first.id)
    fleet.acknowledged += [first.id, second.id]
    (home,) = set(fleet.served(session))
    doomed = fleet.replica_at(home)

    # The REPL, keyed to the conversation's session: its socket opens on the same replica.
    repl = _spawn_repl(fleet.proxy.ws_url + "/v1/realtime", session, tmp_path)
    assert _ask(repl, "a question before the kill")

    async def socket_and_stream() -> None:
        events: list[str] = []
        client = RealtimeClient(
            fleet.proxy.ws_url + "/v1/realtime",
            model=MODEL,
            headers={"x-session-affinity": session},  # the same replica as the conversation
            reconnect=ReconnectPolicy(initial_delay=0.2, max_attempts=20),
            on_event=lambda event: events.append(event.kind),
        )
        async with client:
            warm = await client.chat([{"role": "user", "content": "hello"}], max_tokens=2).text()
            assert isinstance(warm, str)
            # Two long answers in flight on the doomed replica: the socket's, and a
            # streamed Responses turn (the third) over HTTP. The socket's is sent when its
            # iteration starts, so it goes first: the kill follows the HTTP stream's first
            # delta at once, long before either could run out (the socket asks 20,000 tokens:
            # with 3,000 it once ran out before the kill on a loaded CI machine).
            socket_stream = client.chat(
                [{"role": "user", "content": "a long answer"}], max_tokens=20000, ignore_eos=True
            )
            chunks = socket_stream.__aiter__()
            await chunks.__anext__()
            http_stream = sdk.responses.create(
                model=MODEL, input="the third turn", previous_response_id=second.id,
                max_output_tokens=3000, store=True, stream=True, text=LONG_ANSWER,
            )  # fmt: skip
            http_events = iter(http_stream)
            for event in http_events:
                if event.type == "response.output_text.delta":
                    break
            _kill(doomed)  # kill -9, mid-stream on both
            with pytest.raises(RequestInterruptedError):
                async for _ in chunks:
                    pass
            with pytest.raises((openai.APIError, httpx.HTTPError)):
                for event in http_events:
                    assert event.type != "response.completed"
            # the socket reconnects through nginx, to a live replica
            again = client.chat([{"role": "user", "content": "still there?"}], max_tokens=3)
            assert isinstance(await again.text(), str)
            assert "reconnecting" in events and events.count("open") >= 2, events

    asyncio.run(socket_and_stream())
    # the REPL's socket died with the replica: it reconnects through nginx, and answers
    after = _ask(repl, "a question after the kill")
    assert "[connection lost:" in after and "reconnecting]" in after, after
    repl.expect_exact("> ")
    repl.sendline("/exit")
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0 and "Traceback" not in str(repl.before)

    # the third turn again, from the last acknowledged response: another replica answers it
    third = _turn(sdk, "the third turn", second.id)
    assert third.status in FINISHED and third.previous_response_id == second.id
    fleet.acknowledged.append(third.id)
    assert fleet.served(session)[-1] != home
    assert third.usage is not None and third.usage.input_tokens > second.usage.input_tokens  # type: ignore[union-attr]
    fourth = _turn(sdk, "and a fourth", third.id)
    assert fourth.status in FINISHED
    fleet.acknowledged.append(fourth.id)
    # nothing acknowledged is lost: every id is found through nginx, on a live replica
    plain = fleet.sdk("no-affinity-needed")
    for response_id in fleet.acknowledged:
        assert plain.responses.retrieve(response_id).status in FINISHED
    items = plain.responses.input_items.list(fourth.id)
    assert items.data


def test_sigterm_drains_a_replica_closing_its_sockets_1001_through_nginx(fleet: Fleet) -> None:
    """A replica told to stop closes its sockets with 1001 (through nginx, unchanged), and
    nginx sends what comes next to a replica still serving."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from tests.conftest import scrape_metrics

    live = [r for r in fleet.replicas if r.proc.poll() is None]
    with connect(fleet.proxy.ws_url + "/v1/realtime", open_timeout=30) as ws:
        (home,) = [
            r
            for r in live
            if scrape_metrics(r.http_url).get("realtime_ws_connections_open", 0) >= 1
        ]
        home.proc.send_signal(signal.SIGTERM)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=60)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    home.proc.wait(60)
    answer = httpx.post(
        fleet.proxy.url + "/v1/responses",
        json={"model": MODEL, "input": "after the drain", "max_output_tokens": 1},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
