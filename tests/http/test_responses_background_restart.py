"""Background responses across a server's end: `realtime serve` in a process of its own, the
SQLite store, the unmodified openai SDK.

A background response does not survive its server: killed (-9) while it runs, it is
found `failed` (`server_restarted`) once the same runner starts again, and only by
that runner (another runner id leaves it alone: replicas sharing a store fail only
their own); stopped (SIGTERM) past the shutdown grace, it is failed and stored as it
stops (`shutting_down`), never left `in_progress`.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import ServerProcess, spawn_server

LONG = " ".join(f"word{i}" for i in range(2000))


def serve(store: Path, runner: str, *args: str) -> ServerProcess:
    return spawn_server(
        "--echo-delay",
        "0.05",
        "--response-store",
        str(store),
        "--runner-id",
        runner,
        *args,
        tmp_path=store.parent,
    )


def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


def start_running(server: ServerProcess) -> str:
    """A background response, once it is `in_progress` with some output made."""
    with sdk(server) as client:
        created = client.responses.create(model="echo", input=LONG, background=True)
        assert created.status == "queued"
        stream = client.responses.retrieve(created.id, stream=True)
        for event in stream:
            if event.type == "response.output_text.delta":
                break
        stream.close()
        assert client.responses.retrieve(created.id).status == "in_progress"
    return created.id


def clean(server: ServerProcess) -> bool:
    """No ERROR line and no traceback in the server's log."""
    text = server.stderr()
    errors = [line for line in text.splitlines() if line.startswith(("ERROR", "CRITICAL"))]
    assert not errors and "Traceback" not in text, errors or text[-2000:]
    return True


def status(server: ServerProcess, response_id: str) -> Any:
    with sdk(server) as client:
        return client.responses.retrieve(response_id)


def test_killed_while_it_runs_it_is_failed_by_its_own_runner_when_it_starts_again(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    first = serve(store, "replica-a")
    try:
        response_id = start_running(first)
    finally:
        first.proc.kill()  # kill -9: nothing runs on
        first.proc.wait(15)
    other = serve(store, "replica-b")
    try:  # another runner's unfinished response is not this one's to fail
        assert status(other, response_id).status == "in_progress"
    finally:
        assert other.stop() == 0
    again = serve(store, "replica-a")
    try:
        found = status(again, response_id)
        assert found.status == "failed" and found.background is True
        assert found.error is not None and found.error.code == "server_restarted"
        assert "restarted" in found.error.message
        # its events died with the process: a resume says so
        with sdk(again) as client, pytest.raises(openai.BadRequestError) as gone:
            client.responses.retrieve(response_id, stream=True)
        assert gone.value.body["code"] == "events_not_kept"  # type: ignore[index]
    finally:
        assert again.stop() == 0
    assert "background_recovered" in again.stderr()
    assert clean(other) and clean(again)


def test_stopped_past_its_grace_it_is_failed_and_stored_as_the_server_stops(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    server = serve(store, "replica-a", "--shutdown-grace", "0.5")
    response_id = start_running(server)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0
    again = serve(store, "replica-a")
    try:
        found = status(again, response_id)
        assert found.status == "failed"
        assert found.error is not None and found.error.code == "shutting_down"
        assert "shut down" in found.error.message
    finally:
        assert again.stop() == 0
    assert clean(server) and clean(again)
