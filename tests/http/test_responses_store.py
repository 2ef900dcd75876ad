"""Stored responses through a real server: retention that keeps what is within its limits,
item ids unique within a response, paging that ends, and a store that fails.

Each runs against the memory store, the SQLite store (`--response-store DIR`) and the
PostgreSQL store (`--response-store postgresql://...`, a database of the test's own):
they behave the same (`realtime.store.base`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from realtime.config import ServerConfig
from realtime.dialects.responses.service import input_items_page
from realtime.store import StoredResponse
from tests.conftest import RunningServer


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The store's name, or for PostgreSQL the URL of a database of the test's own."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(request.param)


def config(kind: str, tmp_path: Path, **fields: Any) -> ServerConfig:
    place = {"memory": None, "sqlite": str(tmp_path / "store")}.get(kind, kind)
    return ServerConfig(log_level="warning", response_store_dir=place, **fields)


def create(client: httpx.Client, **body: Any) -> httpx.Response:
    return client.post("/v1/responses", json={"model": "echo", "max_output_tokens": 1, **body})


# --- retention ------------------------------------------------------------------------


def test_the_byte_limit_never_deletes_the_newest_responses(
    server_factory: Any, store_kind: str, tmp_path: Path
) -> None:
    """`--response-store-max-bytes 20000` and responses of about 5 kB: right after each
    create, it and the two before it (about 15 kB together) are all found. (Pruning by
    whole seconds deleted responses made in the same second as the newest.)"""
    server = server_factory(config(store_kind, tmp_path, response_store_max_bytes=20_000))
    ids: list[str] = []
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        for i in range(20):
            created = create(client, input=f"{i:04d} " + "y" * 4000)
            assert created.status_code == 200, created.text
            ids.append(created.json()["id"])
            for response_id in ids[-3:]:
                found = client.get(f"/v1/responses/{response_id}")
                assert found.status_code == 200, (i, response_id, found.text)
        # and the limit does hold: the oldest are gone
        assert client.get(f"/v1/responses/{ids[0]}").status_code == 404


def test_the_age_limit_counts_from_the_response_itself(
    server_factory: Any, store_kind: str, tmp_path: Path
) -> None:
    """With `--response-store-max-age 0.5`, a response made in the second half of a second
    is found right after (a store that kept whole seconds counted it from the start of
    its second, so it had expired before it was made)."""
    server = server_factory(config(store_kind, tmp_path, response_store_max_age_seconds=0.5))
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        for _ in range(3):
            time.sleep(0.55 - time.time() % 1 if time.time() % 1 < 0.55 else 0)
            created = create(client, input="hello")
            assert created.status_code == 200
            found = client.get(f"/v1/responses/{created.json()['id']}")
            assert found.status_code == 200, found.text


# --- ids and paging -------------------------------------------------------------------


def message(item_id: str, text: str = "hi") -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text, "id": item_id}


def test_an_item_id_given_twice_is_refused_naming_the_second(
    server_factory: Any, store_kind: str, tmp_path: Path
) -> None:
    server = server_factory(config(store_kind, tmp_path))
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        refused = create(client, input=[message("dup"), message("other"), message("dup")])
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "duplicate_item_id" and error["param"] == "input.2.id"
        # distinct ids are kept as given
        created = create(client, input=[message("dup"), message("other")])
        assert created.status_code == 200


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ids=st.lists(
        st.one_of(st.none(), st.text("abc_", min_size=1, max_size=3)), min_size=1, max_size=12
    ),
    limit=st.integers(1, 5),
    order=st.sampled_from(["asc", "desc"]),
)
def test_sdk_auto_pagination_ends_and_returns_every_item_once(
    echo: RunningServer, ids: list[str | None], limit: int, order: Literal["asc", "desc"]
) -> None:
    """The openai SDK pages `input_items` by following `last_id`: whatever ids the client
    chose, it is refused (a repeated id) or pages through every item exactly once."""
    items = [
        {"type": "message", "role": "user", "content": f"m{n}"}
        | ({"id": item_id} if item_id is not None else {})
        for n, item_id in enumerate(ids)
    ]
    client = openai.OpenAI(base_url=echo.http_url + "/v1", api_key="x", max_retries=0)
    chosen = [item_id for item_id in ids if item_id is not None]
    if len(set(chosen)) != len(chosen):
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="echo", input=items, max_output_tokens=1)  # type: ignore[arg-type]
        return
    response = client.responses.create(model="echo", input=items, max_output_tokens=1)  # type: ignore[arg-type]
    seen = []
    for item in client.responses.input_items.list(response.id, limit=limit, order=order):
        seen.append(item.content[0].text)  # type: ignore[union-attr,index]
        assert len(seen) <= len(items), "paging did not end"
    expected = [f"m{n}" for n in range(len(items))]
    assert seen == (expected if order == "asc" else expected[::-1])


@pytest.fixture
def echo(server_factory: Any) -> RunningServer:
    return server_factory(ServerConfig(log_level="warning"))  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=30),
    limit=st.integers(1, 4),
    order=st.sampled_from(["asc", "desc"]),
)
def test_following_last_id_always_ends_even_over_repeated_ids(
    ids: list[str], limit: int, order: str
) -> None:
    """A record stored before ids had to be unique may repeat one: following `last_id`
    still moves forward at every page and ends."""
    record = StoredResponse(
        id="resp_x",
        owner=None,
        created_at=0.0,
        previous_response_id=None,
        response={},
        input_items=[{"id": item_id, "n": n} for n, item_id in enumerate(ids)],
    )
    after = None
    pages = 0
    while True:
        page = input_items_page(record, after=after, limit=limit, order=order)
        pages += 1
        assert pages <= len(ids) + 1
        if not page["has_more"]:
            break
        after = page["last_id"]
