"""Agent session headers -> the cache scope of an HTTP request, for every HTTP API.

A socket is a session of its own; an HTTP request has none, so an agent that
talks over HTTP names its session in a header, and that name becomes the request's
session (the engine's cache key and eviction hint, as a socket's session is):

    x-claude-code-session-id   Claude Code
    x-session-id, session-id   opencode, Codex and others
    x-session-affinity         routers' affinity header
    x-dynamo-session-id        NVIDIA Dynamo

The first of these a request carries wins. The session is scoped per API key: the
engine's session id is a keyed digest of the caller's key and the header's value,
so one key can never name (and reuse, or time) another key's cached prefixes,
whatever header value it sends. Under keys the request's cache salt is the
caller's too, so even the engine's shared scope (`--engine-option
cache_scope=salt`, which shares across sessions) shares only within one key. The
header's value shows in the request's access-log line (`cache_scope`); it is never
a metric label (one series per session would grow without bound).

A value longer than `MAX_SESSION_CHARS` or with characters outside printable ASCII
is refused (400 naming the header): it would otherwise reach the log as it is.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from realtime.asgi.auth import header, presented_key
from realtime.protocol.errors import InvalidRequestError

SESSION_HEADERS = (
    b"x-claude-code-session-id",
    b"x-session-id",
    b"session-id",
    b"x-session-affinity",
    b"x-dynamo-session-id",
)
MAX_SESSION_CHARS = 256

#: Keys the digests, so a session id reveals nothing about the key behind it. Per
#: process: a restart empties the engine's cache anyway.
_SECRET = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class CacheScope:
    """What the pipeline gets (`session_id`, `cache_salt`) and what the log shows (`label`)."""

    session_id: str | None = None
    cache_salt: str | None = None
    label: str | None = None


NO_SCOPE = CacheScope()


def cache_scope(headers: Sequence[tuple[bytes, bytes]], *, keys_enabled: bool) -> CacheScope:
    """The request's cache scope (see the module docstring). Raises InvalidRequestError."""
    owner = _owner(headers, keys_enabled)
    for name in SESSION_HEADERS:
        raw = header(headers, name)
        if raw is None:
            continue
        return _named(raw.strip(), owner, name.decode())
    return CacheScope(cache_salt=owner) if owner is not None else NO_SCOPE


def field_scope(
    value: str, headers: Sequence[tuple[bytes, bytes]], *, keys_enabled: bool, param: str
) -> CacheScope:
    """The cache scope a request body names (the Responses API's `prompt_cache_key`),
    keyed to the caller as a session header is. Raises InvalidRequestError naming `param`."""
    raw = value.encode("utf-8", "surrogatepass")
    return _named(raw, _owner(headers, keys_enabled), param)


def _owner(headers: Sequence[tuple[bytes, bytes]], keys_enabled: bool) -> str | None:
    return _digest(b"owner", presented_key(headers) or b"") if keys_enabled else None


def _named(value: bytes, owner: str | None, param: str) -> CacheScope:
    if not value or len(value) > MAX_SESSION_CHARS or not _printable(value):
        raise InvalidRequestError(
            f"{param}: a session id is 1 to {MAX_SESSION_CHARS} printable ASCII characters",
            param=param,
        )
    session = _digest(b"session", (owner or "").encode() + b"\0" + value)
    return CacheScope("http-" + session, owner, value.decode("ascii"))


def _printable(value: bytes) -> bool:
    return all(0x20 < byte < 0x7F for byte in value)


def _digest(kind: bytes, value: bytes) -> str:
    return hmac.new(_SECRET, kind + b":" + value, hashlib.sha256).hexdigest()[:32]
