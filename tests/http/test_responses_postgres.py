"""The Responses API on the PostgreSQL store when the database goes away and comes back,
through a real server: a retryable 503 in OpenAI's error body within the store's
timeout (never a hang, never a 500), nothing acknowledged that was not stored, and the
same server carrying on once the database is back. The URL's password reaches no log
and no response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from realtime.config import ServerConfig
from realtime.testing.postgres import ThrowawayPostgres

PASSWORD = "pw-not-for-logs"


@pytest.fixture
def cluster(postgres_cluster: ThrowawayPostgres) -> Iterator[ThrowawayPostgres]:
    """A cluster of this test's own (it is killed), once the session's shows PostgreSQL
    is here (or the test is skipped)."""
    with ThrowawayPostgres() as own:
        yield own


def test_a_lost_database_is_a_retryable_503_and_the_server_reconnects(
    server_factory: Any, cluster: ThrowawayPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    url = cluster.dsn.replace("realtime@", f"realtime:{PASSWORD}@")
    server = server_factory(ServerConfig(log_level="info", response_store_dir=url))
    sdk = openai.OpenAI(base_url=server.http_url + "/v1", api_key="none", max_retries=0)
    first = sdk.responses.create(model="echo", input="one", max_output_tokens=2, store=True)
    assert first.status == "completed"

    cluster.kill()
    with httpx.Client(base_url=server.http_url, timeout=60) as http:
        for request in (
            lambda: http.post(
                "/v1/responses",
                json={"model": "echo", "input": "two", "max_output_tokens": 2, "store": True,
                      "previous_response_id": first.id},
            ),
            lambda: http.post(
                "/v1/responses",
                json={"model": "echo", "input": "two", "max_output_tokens": 2, "store": True},
            ),
            lambda: http.get(f"/v1/responses/{first.id}"),
        ):  # fmt: skip
            started = time.monotonic()
            answer = request()
            assert time.monotonic() - started < 30  # the store's 5 s timeout, and a retry
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["type"] == "service_unavailable"
            assert error["code"] == "store_unavailable"
            assert PASSWORD not in answer.text

    # streamed: the answer ends response.failed (never response.completed) with the same error
    with sdk.responses.stream(
        model="echo", input="three", max_output_tokens=2, store=True
    ) as stream:
        events = [event.type for event in stream]
    assert events[-1] == "response.failed" and "response.completed" not in events

    cluster.restart()
    again = sdk.responses.create(
        model="echo",
        input="four",
        max_output_tokens=2,
        store=True,
        previous_response_id=first.id,
    )
    assert again.status == "completed"
    assert sdk.responses.retrieve(again.id).previous_response_id == first.id
    logged = caplog.text
    assert PASSWORD not in logged
    assert "response store postgresql://realtime:***@" in logged
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]
