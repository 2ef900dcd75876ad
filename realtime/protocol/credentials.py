"""Which query parameters are credentials: refused in every URL, never read, redacted in logs.

API keys travel in a header (or a browser's WebSocket subprotocol), never in a
query string: URLs end up in proxy logs and browser histories. A request that
names a credential in its query is refused (`credentials_in_query`), and log
lines that quote such a URL are redacted; both decide with `is_credential_param`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

#: WebSocket subprotocols that carry an API key, as `<prefix><key>`: ours (`realtime-key.`),
#: and OpenAI's browser class's (`openai-insecure-api-key.`). Read by the access guard,
#: redacted in logs.
KEY_SUBPROTOCOL_PREFIXES = ("realtime-key.", "openai-insecure-api-key.")

#: Query parameters that look like credentials; refused, never read.
CREDENTIAL_PARAMS = frozenset(
    {"api_key", "api-key", "apikey", "key", "token", "access_token", "auth", "authorization"}
)

#: `CREDENTIAL_PARAMS` spelled without separators: `api_key`, `API-Key` and `apikey` are one name.
_CREDENTIAL_NAMES = frozenset(re.sub(r"[^a-z0-9]", "", p) for p in CREDENTIAL_PARAMS)

#: Percent-decoding rounds: `%2561` is `%61` is `a`; a name still encoded after this is refused.
_DECODE_ROUNDS = 3


def is_credential_param(raw: bytes | str) -> bool:
    """Whether a query parameter's name is a credential (or too encoded to tell)."""
    return _credential_name(raw) is not False


def _credential_name(raw: bytes | str) -> bool | None:
    """Whether a query parameter's name is a credential; None if it cannot be decoded."""
    name = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote_plus(name, encoding="latin-1")
        if decoded == name:
            break
        name = decoded
    else:
        return None
    # Case, separators, brackets (`api_key[]`) and stray characters do not make a new name.
    return re.sub(r"[^a-z0-9]", "", name.lower()) in _CREDENTIAL_NAMES


def has_query_credentials(query_string: bytes) -> bool:
    """Whether the query string names a credential, in any casing or percent-encoding.

    Servers and frameworks decode names before they read them (`%61pi_key` is
    `api_key` to them), so the check decodes too; a name that stays encoded after
    several rounds is refused as well, since no honest client sends one.
    """
    if not query_string:
        return False
    pairs = re.split(rb"[&;]", query_string)
    return any(is_credential_param(pair.split(b"=", 1)[0]) for pair in pairs)
