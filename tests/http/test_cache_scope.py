"""Agent session headers -> an HTTP request's cache scope, per API key (no sockets)."""

from __future__ import annotations

import pytest

from realtime.http.cache_scope import MAX_SESSION_CHARS, SESSION_HEADERS, cache_scope
from realtime.protocol.errors import InvalidRequestError


def scope(*headers: tuple[bytes, bytes], keys: bool = True) -> object:
    return cache_scope(list(headers), keys_enabled=keys)


def test_no_header_is_no_session() -> None:
    open_server = cache_scope([], keys_enabled=False)
    assert (open_server.session_id, open_server.cache_salt, open_server.label) == (None,) * 3
    keyed = cache_scope([(b"x-api-key", b"k1")], keys_enabled=True)
    assert keyed.session_id is None and keyed.cache_salt is not None


@pytest.mark.parametrize("name", SESSION_HEADERS)
def test_every_agent_header_names_the_session(name: bytes) -> None:
    found = cache_scope([(name, b"abc-123")], keys_enabled=False)
    assert found.session_id is not None and found.session_id.startswith("http-")
    assert found.label == "abc-123"
    # the same name through any of the headers is the same session
    again = cache_scope([(SESSION_HEADERS[0], b"abc-123")], keys_enabled=False)
    assert again.session_id == found.session_id


def test_the_session_is_scoped_to_the_key() -> None:
    alice = cache_scope([(b"x-api-key", b"alice"), (b"x-session-id", b"s1")], keys_enabled=True)
    alice_bearer = cache_scope(
        [(b"authorization", b"Bearer alice"), (b"session-id", b"s1")], keys_enabled=True
    )
    bob = cache_scope([(b"x-api-key", b"bob"), (b"x-session-id", b"s1")], keys_enabled=True)
    assert alice.session_id == alice_bearer.session_id
    assert alice.cache_salt == alice_bearer.cache_salt
    assert bob.session_id != alice.session_id and bob.cache_salt != alice.cache_salt
    # neither the key nor the session's name can be read back from what the engine gets
    for found in (alice, bob):
        assert found.session_id is not None and found.cache_salt is not None
        assert "alice" not in found.session_id + found.cache_salt
        assert "s1" not in found.session_id.removeprefix("http-")


@pytest.mark.parametrize(
    "value", [b"", b"   ", b"a" * (MAX_SESSION_CHARS + 1), b"tab\there", b"\xff\xfe", b"a b"]
)
def test_a_bad_session_header_is_refused_naming_it(value: bytes) -> None:
    with pytest.raises(InvalidRequestError) as info:
        cache_scope([(b"x-claude-code-session-id", value)], keys_enabled=False)
    assert info.value.param == "x-claude-code-session-id"


def test_a_body_field_names_the_session_as_a_header_does() -> None:
    from realtime.http.cache_scope import field_scope

    keyed = [(b"authorization", b"Bearer alice")]
    by_field = field_scope("thread-1", keyed, keys_enabled=True, param="prompt_cache_key")
    by_header = cache_scope([*keyed, (b"x-session-id", b"thread-1")], keys_enabled=True)
    assert by_field == by_header and by_field.label == "thread-1"
    bob = field_scope(
        "thread-1", [(b"x-api-key", b"bob")], keys_enabled=True, param="prompt_cache_key"
    )
    assert bob.session_id != by_field.session_id
    with pytest.raises(InvalidRequestError) as info:
        field_scope("a\nb", [], keys_enabled=False, param="prompt_cache_key")
    assert info.value.param == "prompt_cache_key"
