"""API keys and the browser-origin policy: who may use the server.

Keys are compared in constant time (`hmac.compare_digest`, against every key, so
the time taken does not say which key nearly matched) and are never logged or
echoed. A key may arrive as `Authorization: Bearer <key>` (HTTP, and WebSocket
clients that can set headers), as `x-api-key: <key>` (the Anthropic SDKs and
Claude Code) or, for browsers, which cannot set headers on a
WebSocket, as a subprotocol `realtime-key.<key>` offered next to `realtime`, or
`openai-insecure-api-key.<key>`, as OpenAI's browser class (`OpenAIRealtimeWebSocket`)
sends it: the server selects `realtime` and never echoes the key. Query strings are never
read: URLs end up in proxy logs and browser histories (which query parameters
count as credentials is `realtime.protocol.credentials`).

The origin policy is the defence against cross-site WebSocket hijacking: a page
on another site can open a socket to this server from a victim's browser, and
browsers send its `Origin`. With no `--allowed-origin`, requests without an
Origin (non-browser clients) and same-origin requests (Origin host:port equal to
the Host header) pass; `*` allows every origin.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from realtime.protocol.credentials import KEY_SUBPROTOCOL_PREFIXES

SUBPROTOCOL = "realtime"

#: RFC 7230 token characters: what a subprotocol name may contain, so every key
#: works in the browser subprotocol as well as in a header.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def validate_key(key: str) -> str:
    key = key.strip()
    if not key:
        raise ValueError("an API key may not be empty")
    if not _TOKEN.match(key):
        raise ValueError(
            "an API key may only contain letters, digits and !#$%&'*+-.^_`|~ "
            "(it must also work as a WebSocket subprotocol token)"
        )
    return key


def load_key_file(path: str | Path) -> list[str]:
    """One key per line; blank lines and lines starting with # are skipped."""
    keys = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(validate_key(line))
    if not keys:
        raise ValueError(f"{path}: no API keys in the file")
    return keys


class ApiKeys:
    """The configured keys; empty means the server is open."""

    def __init__(self, keys: Iterable[str] = ()):
        self._keys = [validate_key(k).encode("ascii") for k in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def matches(self, presented: bytes | None) -> bool:
        if presented is None:
            return False
        found = False
        for key in self._keys:  # every key, every time: no early exit
            found |= hmac.compare_digest(presented, key)
        return found


def header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def bearer_token(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    value = header(headers, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    token = token.strip()
    return token or None


def presented_key(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """The key a request presents: `Authorization: Bearer <key>`, else `x-api-key: <key>`
    (how the Anthropic SDKs and Claude Code send it)."""
    token = bearer_token(headers)
    if token is not None:
        return token
    value = header(headers, b"x-api-key")
    if value is None:
        return None
    return value.strip() or None


def subprotocol_key(subprotocols: Sequence[str]) -> bytes | None:
    """The key offered as a subprotocol (`KEY_SUBPROTOCOL_PREFIXES`), the first one offered."""
    for offered in subprotocols:
        for prefix in KEY_SUBPROTOCOL_PREFIXES:
            if offered.startswith(prefix):
                return offered[len(prefix) :].encode("utf-8", "surrogateescape")
    return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _origin_authority(origin: str) -> tuple[str, str] | None:
    """(scheme, host:port) of an Origin header, with the scheme's default port filled in."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    default = {"http": 80, "https": 443}.get(scheme)
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return scheme, f"{host}:{port if port is not None else default}"


def _host_authority(host_header: str, scheme: str) -> str:
    host_header = host_header.strip().lower()
    if host_header.endswith("]") or ":" not in host_header.rsplit("]", 1)[-1]:
        default = {"http": 80, "https": 443}.get(scheme, 80)
        return f"{host_header}:{default}"
    return host_header


#: A WebSocket request's scheme as the scheme of the page that would share its origin.
_WEB_SCHEME = {"ws": "http", "wss": "https"}


class OriginPolicy:
    """Which browser origins may connect (see the module docstring for the default)."""

    def __init__(self, allowed: Iterable[str] = ()):
        allowed = [a.strip().rstrip("/") for a in allowed if a.strip()]
        self.allow_all = "*" in allowed
        self._allowed = {a.lower() for a in allowed if a != "*"}

    def allows(self, origin: bytes | None, host: bytes | None, scheme: str = "http") -> bool:
        """`scheme` is the request's own (the ASGI scope's, after trusted proxy headers)."""
        if origin is None:
            return True  # not a browser, or a browser not sending Origin (same-origin GET)
        text = origin.decode("latin-1").strip()
        if self.allow_all:
            return True
        if self._allowed:
            return text.lower().rstrip("/") in self._allowed
        if host is None:
            return False
        parsed = _origin_authority(text)
        if parsed is None:
            return False  # "null" (sandboxed frames, file://) and garbage
        origin_scheme, authority = parsed
        # An origin is scheme, host and port: a page served over https is not the same
        # origin as this plain-HTTP server (nor the reverse), and a browser page's
        # origin is never ws:// or wss:// (no page has one: refused).
        if origin_scheme != _WEB_SCHEME.get(scheme, scheme):
            return False
        return authority == _host_authority(host.decode("latin-1"), origin_scheme)
