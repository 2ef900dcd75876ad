"""PostgreSQL connection URLs: which `--response-store` values are one, and how to show one.

A URL may carry a password (`postgresql://user:secret@host/db`, or
`?password=secret`). Nothing logs or returns the URL as given: logs, errors and
the startup line show `redact(url)`, with the password replaced by `***`.
"""

from __future__ import annotations

import urllib.parse

SCHEMES = ("postgresql", "postgres")


def is_postgres_url(text: str) -> bool:
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def redact(url: str) -> str:
    """`url` without its password (in the authority or the query); never raises."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            credentials, _, hosts = netloc.rpartition("@")
            user, has_password, _ = credentials.partition(":")
            netloc = f"{user}{':***' if has_password else ''}@{hosts}"
        query = urllib.parse.urlencode(
            [
                (key, "***" if key.lower() in ("password", "sslpassword") else value)
                for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            ],
            safe="*",
        )
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        scheme = url.partition("://")[0]
        return f"{scheme}://***"


def passwords(url: str) -> list[str]:
    """The secrets `url` carries (its password, in the authority or the query), so a
    message that quotes one can have it replaced."""
    try:
        parts = urllib.parse.urlsplit(url)
        found = [parts.password] if parts.password else []
        found += [
            value
            for key, value in urllib.parse.parse_qsl(parts.query)
            if key.lower() in ("password", "sslpassword") and value
        ]
    except ValueError:
        return []
    return [secret for secret in found if len(secret) >= 2]
