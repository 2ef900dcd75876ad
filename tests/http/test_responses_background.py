"""Background responses over HTTP (`background: true`): a real server, the unmodified openai
SDK, real TCP.

Polled to completion and resumed from `starting_after`; cancelled with the engine seen
to stop; a client that hangs up mid-stream while the response goes on; the limits'
429; the bad inputs. The restarts (a real server process, the SQLite store) are in
`test_responses_background_restart.py`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from realtime.store.sqlite import SQLiteResponseStore
from tests.conftest import RunningServer, scrape_metrics, wait_until
from tests.dialects.responses.sdk_types import check_event, check_response

TOKENIZER = EchoTokenizer()
TEXT = "Hello there, wonderful world! Ünïcödé 日本語 ok"
LONG = " ".join(f"word{i}" for i in range(300))
ERROR_KEYS = {"message", "type", "param", "code"}


def sdk(server: RunningServer, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key=key, max_retries=0)


def slow(server_factory: Any, delay: float = 0.05, **fields: Any) -> RunningServer:
    config = ServerConfig(log_level="warning", echo_delay=delay, **fields)
    return server_factory(config)  # type: ignore[no-any-return]


def poll(client: openai.OpenAI, response_id: str, until: set[str]) -> Any:
    found: list[Any] = []

    def reached() -> bool:
        found.append(client.responses.retrieve(response_id))
        return found[-1].status in until

    wait_until(reached, timeout=60, interval=0.05)
    return found[-1]


def events_of(stream: Any) -> list[dict[str, Any]]:
    events = [event.model_dump(mode="json", exclude_unset=True) for event in stream]
    for event in events:
        check_event(event)
    return events


# --- polled, resumed ---


def test_a_background_response_is_queued_polled_to_completion_and_resumed(
    server_factory: Any,
) -> None:
    server = slow(server_factory, delay=0.01)
    with sdk(server) as client:
        created = client.responses.create(model="echo", input=TEXT, background=True)
        assert created.status == "queued" and created.background is True
        assert created.output == [] and created.store is True
        done = poll(client, created.id, {"completed"})
        assert done.output_text == TEXT and done.background is True
        check_response(done.model_dump(mode="json"))
        usage = done.usage
        assert usage is not None and usage.output_tokens == len(TOKENIZER.encode(TEXT))

        everything = events_of(client.responses.retrieve(created.id, stream=True))
        numbers = [event["sequence_number"] for event in everything]
        assert numbers == list(range(len(everything)))
        kinds = [event["type"] for event in everything]
        assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
        assert everything[0]["response"]["status"] == "queued"
        assert everything[2]["response"]["status"] == "in_progress"
        assert kinds[-1] == "response.completed"
        stored = done.model_dump(mode="json", exclude_unset=True)
        assert everything[-1]["response"]["output"] == stored["output"]
        text = "".join(e["delta"] for e in everything if e["type"] == "response.output_text.delta")
        assert text == TEXT

        after = 4
        resumed = events_of(
            client.responses.retrieve(created.id, stream=True, starting_after=after)
        )
        assert resumed == everything[after + 1 :]
        last = everything[-1]["sequence_number"]
        assert (
            events_of(client.responses.retrieve(created.id, stream=True, starting_after=last)) == []
        )


def test_a_stream_resumed_while_it_runs_follows_it_live_to_the_end(server_factory: Any) -> None:
    server = slow(server_factory, delay=0.02)
    with sdk(server) as client:
        stream = client.responses.create(model="echo", input=LONG, background=True, stream=True)
        first: list[dict[str, Any]] = []
        for event in stream:
            first.append(event.model_dump(mode="json", exclude_unset=True))
            if len(first) == 8:
                break
        stream.close()
        response_id = first[0]["response"]["id"]
        assert first[0]["response"]["status"] == "queued"
        seen = first[-1]["sequence_number"]
        rest = events_of(client.responses.retrieve(response_id, stream=True, starting_after=seen))
        assert rest[0]["sequence_number"] == seen + 1
        assert rest[-1]["type"] == "response.completed"
        numbers = [e["sequence_number"] for e in first + rest]
        assert numbers == list(range(len(numbers)))
        deltas = [e["delta"] for e in first + rest if e["type"] == "response.output_text.delta"]
        assert "".join(deltas) == LONG
    assert server.engine.stats.requests_finished == 1


def test_a_client_that_hangs_up_mid_stream_leaves_it_running_to_completion(
    server_factory: Any,
) -> None:
    """The run is not the request's: the client's stream ends, the engine carries on."""
    server = slow(server_factory, delay=0.02)
    stats = server.engine.stats
    body = {"model": "echo", "input": LONG, "background": True, "stream": True}
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        with http.stream("POST", "/v1/responses", json=body) as response:
            deltas = 0
            for line in response.iter_lines():
                if '"response.created"' in line and line.startswith("data: "):
                    response_id = line.split('"id":"', 1)[1].split('"', 1)[0]
                if line.startswith("data: ") and '"response.output_text.delta"' in line:
                    deltas += 1
                    if deltas == 3:
                        break
    generated = stats.tokens_generated
    total = len(TOKENIZER.encode(LONG))
    assert generated < total
    with sdk(server) as client:
        done = poll(client, response_id, {"completed", "failed", "incomplete", "cancelled"})
    assert done.status == "completed" and done.output_text == LONG
    assert stats.requests_cancelled == 0 and stats.requests_finished == 1
    assert stats.tokens_generated == total


# --- cancelled ---


def test_cancel_stops_the_engine_and_stores_it_cancelled(server_factory: Any) -> None:
    server = slow(server_factory, delay=0.05)
    stats = server.engine.stats
    total = len(TOKENIZER.encode(LONG))
    with sdk(server) as client:
        created = client.responses.create(model="echo", input=LONG, background=True)
        wait_until(lambda: stats.tokens_generated >= 3, timeout=30)
        assert client.responses.retrieve(created.id).status == "in_progress"
        with pytest.raises(openai.BadRequestError) as unfinished:  # no answer yet to continue
            client.responses.create(model="echo", input="next", previous_response_id=created.id)
        assert unfinished.value.body["code"] == "previous_response_not_finished"  # type: ignore[index]
        cancelled = client.responses.cancel(created.id)
        assert cancelled.status == "cancelled" and cancelled.id == created.id
        check_response(cancelled.model_dump(mode="json"))
        assert stats.requests_cancelled == 1 and stats.active == 0
        generated = stats.tokens_generated
        assert generated < total // 4
        time.sleep(0.3)
        assert stats.tokens_generated == generated  # the engine stopped
        assert client.responses.retrieve(created.id).status == "cancelled"
        # the answer so far is kept, its item closed incomplete
        message = cancelled.output[0]
        assert message.type == "message" and message.status == "incomplete"
        assert LONG.startswith(cancelled.output_text) and cancelled.output_text
        # cancelling it again, or a finished one, returns it unchanged (OpenAI's)
        again = client.responses.cancel(created.id)
        assert again.model_dump() == client.responses.retrieve(created.id).model_dump()
        # its stream ends after the item closed: the SDK has no terminal event for it
        events = events_of(client.responses.retrieve(created.id, stream=True))
        assert events[-1]["type"] == "response.output_item.done"
        assert events[-1]["item"]["status"] == "incomplete"
        short = client.responses.create(model="echo", input="short one", background=True)
        finished = poll(client, short.id, {"completed"})
        assert client.responses.cancel(short.id).model_dump() == finished.model_dump()
        # a response that is not a background one: 400, as before
        plain = client.responses.create(model="echo", input="plain")
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.cancel(plain.id)
    assert refused.value.body["code"] == "response_not_cancellable"  # type: ignore[index]


def test_a_cancel_ends_a_live_stream_of_it(server_factory: Any) -> None:
    server = slow(server_factory, delay=0.05)
    with sdk(server) as client:
        stream = client.responses.create(model="echo", input=LONG, background=True, stream=True)
        events: list[dict[str, Any]] = []
        for event in stream:
            events.append(event.model_dump(mode="json", exclude_unset=True))
            if event.type == "response.output_text.delta" and len(events) == 8:
                client.responses.cancel(events[0]["response"]["id"])
        assert events[-1]["type"] == "response.output_item.done"
    assert server.engine.stats.requests_cancelled == 1


# --- limits ---


def test_the_limits_refuse_one_more_with_a_429(server_factory: Any) -> None:
    server = slow(
        server_factory,
        delay=0.05,
        max_background=2,
        max_background_per_key=1,
        api_keys=("key-1", "key-2", "key-3"),
    )
    with sdk(server, "key-1") as one, sdk(server, "key-2") as two, sdk(server, "key-3") as three:
        first = one.responses.create(model="echo", input=LONG, background=True)
        with pytest.raises(openai.RateLimitError) as per_key:
            one.responses.create(model="echo", input=LONG, background=True)
        body = per_key.value.body
        assert body["code"] == "too_many_background_responses"  # type: ignore[index]
        assert "this API key" in body["message"]  # type: ignore[index]
        assert set(per_key.value.response.json()["error"]) == ERROR_KEYS
        two.responses.create(model="echo", input=LONG, background=True)
        running = scrape_metrics(server.http_url, {"authorization": "Bearer key-1"})
        assert running["realtime_background_responses"] == 2
        with pytest.raises(openai.RateLimitError) as total:
            three.responses.create(model="echo", input=LONG, background=True)
        assert "this server" in total.value.body["message"]  # type: ignore[index]
        # foreground responses are not counted
        assert three.responses.create(model="echo", input="fine").status == "completed"
        # one ends: there is room again
        one.responses.cancel(first.id)
        third = three.responses.create(model="echo", input="now", background=True)
        assert poll(three, third.id, {"completed"}).output_text == "now"
        # another key sees nothing of it
        with pytest.raises(openai.NotFoundError):
            one.responses.retrieve(third.id, stream=True)
        with pytest.raises(openai.NotFoundError):
            one.responses.cancel(third.id)


# --- bad inputs ---


def test_bad_background_requests_get_a_clear_400_or_404(server_factory: Any) -> None:
    server = slow(server_factory, delay=0.0, background_max_events=5)
    with sdk(server) as client, httpx.Client(base_url=server.http_url, timeout=30) as http:
        done = client.responses.create(model="echo", input=LONG[:200], background=True)
        done = poll(client, done.id, {"completed"})
        plain = client.responses.create(model="echo", input="plain")
        cases = [
            ("get", "/v1/responses/resp_unknown?stream=true", 404, "response_id"),
            ("get", f"/v1/responses/{plain.id}?stream=true", 400, "stream"),
            ("get", f"/v1/responses/{done.id}?stream=yes", 400, "stream"),
            (
                "get",
                f"/v1/responses/{done.id}?stream=true&starting_after=-1",
                400,
                "starting_after",
            ),
            ("get", f"/v1/responses/{done.id}?stream=true&starting_after=x", 400, "starting_after"),
            (
                "get",
                f"/v1/responses/{done.id}?stream=true&starting_after=1.5",
                400,
                "starting_after",
            ),
            ("get", f"/v1/responses/{done.id}?starting_after=1", 400, "starting_after"),
            (
                "get",
                f"/v1/responses/{done.id}?stream=true&starting_after=99999",
                400,
                "starting_after",
            ),
            # only the last 5 events are kept
            ("get", f"/v1/responses/{done.id}?stream=true&starting_after=0", 400, "starting_after"),
            ("get", f"/v1/responses/{done.id}?stream=true", 400, "starting_after"),
            ("post", "/v1/responses/resp_unknown/cancel", 404, "response_id"),
        ]
        for method, path, status, param in cases:
            answer = http.request(method, path)
            assert answer.status_code == status, (path, answer.text)
            error = answer.json()["error"]
            assert set(error) == ERROR_KEYS and error["param"] == param, (path, error)
        trimmed = http.get(f"/v1/responses/{done.id}?stream=true&starting_after=0").json()
        assert trimmed["error"]["code"] == "events_not_kept"
        no_store = http.post(
            "/v1/responses",
            json={"model": "echo", "input": "x", "background": True, "store": False},
        )
        assert no_store.status_code == 400 and no_store.json()["error"]["param"] == "background"
        # the last events are still there
        last = client.responses.retrieve(
            done.id, stream=True, starting_after=_last(done.id, http) - 2
        )
        assert [e["type"] for e in events_of(last)][-1] == "response.completed"


def _last(response_id: str, http: httpx.Client) -> int:
    """The last sequence number of a finished response, read from its refused resume."""
    answer = http.get(f"/v1/responses/{response_id}?stream=true&starting_after=99999")
    message: str = answer.json()["error"]["message"]
    return int(message.rsplit("(", 1)[1].rstrip(")"))


def test_deleting_a_running_one_stops_it_and_it_stays_deleted(server_factory: Any) -> None:
    server = slow(server_factory, delay=0.05)
    stats = server.engine.stats
    with sdk(server) as client:
        created = client.responses.create(model="echo", input=LONG, background=True)
        wait_until(lambda: stats.tokens_generated >= 2, timeout=30)
        client.responses.delete(created.id)
        assert stats.requests_cancelled == 1 and stats.active == 0
        time.sleep(0.3)  # nothing stores it again
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id, stream=True)
    assert server.app.state.background.running == 0


# --- the server's end, replicas ---


def test_a_draining_server_lets_a_background_response_finish_within_its_grace(
    server_factory: Any, tmp_path: Any
) -> None:
    """SIGTERM's drain waits for background responses as for requests: one that ends
    within the grace is stored completed, not failed."""
    store = tmp_path / "store"
    server = slow(
        server_factory, delay=0.02, shutdown_grace_seconds=30.0, response_store_dir=str(store)
    )
    with sdk(server) as client:
        created = client.responses.create(model="echo", input=LONG[:400], background=True)
        wait_until(lambda: server.engine.stats.tokens_generated >= 1, timeout=30)
    server.stop(timeout=60)
    assert server.engine.stats.requests_finished == 1

    async def read() -> Any:
        kept = SQLiteResponseStore(store)
        try:
            return await kept.get(created.id, None)
        finally:
            await kept.close()

    record = asyncio.run(read())
    assert record is not None and record.response["status"] == "completed"
    assert record.response["output"][0]["content"][0]["text"] == LONG[:400]


def test_replicas_sharing_postgresql_each_run_and_cancel_their_own(
    server_factory: Any, postgres_url: str
) -> None:
    """Two servers, one PostgreSQL store, runner ids a and b: b sees a's background
    response (the record is shared) but neither fails it at its start, nor serves its
    events (400 events_not_kept), nor cancels it (409); a does."""
    a = slow(server_factory, response_store_dir=postgres_url, runner_id="replica-a")
    with sdk(a) as on_a:
        created = on_a.responses.create(model="echo", input=LONG, background=True)
        wait_until(lambda: a.engine.stats.tokens_generated >= 2, timeout=30)
        b = slow(server_factory, response_store_dir=postgres_url, runner_id="replica-b")
        with sdk(b) as on_b:
            assert on_b.responses.retrieve(created.id).status == "in_progress"
            with pytest.raises(openai.BadRequestError) as events:
                on_b.responses.retrieve(created.id, stream=True)
            assert events.value.body["code"] == "events_not_kept"  # type: ignore[index]
            with pytest.raises(openai.ConflictError) as elsewhere:
                on_b.responses.cancel(created.id)
            assert elsewhere.value.body["code"] == "response_running_elsewhere"  # type: ignore[index]
            assert on_a.responses.cancel(created.id).status == "cancelled"
            assert on_b.responses.retrieve(created.id).status == "cancelled"
    assert a.engine.stats.requests_cancelled == 1
