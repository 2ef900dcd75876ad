"""Reasoning a client carries for the server: `include: ["reasoning.encrypted_content"]`.

A client that keeps no state on the server (`store: false`, as Codex runs) resends
the whole conversation each turn, and with it each reasoning item's
`encrypted_content`: the model's reasoning text, which only the server can read.
Fernet (`cryptography`: AES-128-CBC with an HMAC-SHA256 over the whole token) seals
it, so a client can neither read nor alter it; a token that fails its check
(tampered, another server's, another key's) is a 400 naming the field.

The key is random per process unless `--reasoning-key` sets it; replicas behind one
load balancer share one so that any of them can open what another sealed. The
flag's text may be any secret (a long random string): the Fernet key is derived
from it with HKDF-SHA256, so it never needs Fernet's own encoding.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from realtime.protocol.errors import InvalidRequestError

_INFO = b"realtime responses reasoning.encrypted_content v1"


def _fernet_key(secret: str) -> bytes:
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        secret.encode("utf-8")
    )
    return base64.urlsafe_b64encode(raw)


class ReasoningSeal:
    """Seals reasoning text into `encrypted_content` and opens it again."""

    def __init__(self, secret: str | None = None) -> None:
        key = Fernet.generate_key() if secret is None else _fernet_key(secret)
        self._fernet = Fernet(key)

    def __repr__(self) -> str:
        return "ReasoningSeal(<key hidden>)"

    def seal(self, text: str) -> str:
        return self._fernet.encrypt(text.encode("utf-8")).decode("ascii")

    def open(self, token: str, param: str) -> str:
        """The reasoning text in `token`; a 400 naming `param` when it is not ours."""
        try:
            return self._fernet.decrypt(token.encode("utf-8", "surrogatepass")).decode("utf-8")
        except (InvalidToken, UnicodeError, ValueError):
            raise InvalidRequestError(
                f"{param}: not reasoning this server encrypted (altered, or sealed by a"
                " server with another --reasoning-key)",
                param=param,
                code="invalid_value",
            ) from None
