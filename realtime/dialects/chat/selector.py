"""/v1/realtime's chat frames: the handshake every other dialect of the route left.

It accepts the `realtime` subprotocol when the client offered it (browsers sending
their key as `realtime-key.<key>` must offer it: the key itself is never echoed).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from realtime.asgi.auth import SUBPROTOCOL
from realtime.dialects.chat.dialect import ChatFrameDialect
from realtime.session.dialect import DialectChoice


def chat_frames(scope: MutableMapping[str, Any]) -> DialectChoice:
    """Chat frames, the default of /v1/realtime: claims every handshake."""
    offered = scope.get("subprotocols") or ()
    return DialectChoice(
        ChatFrameDialect.from_context, SUBPROTOCOL if SUBPROTOCOL in offered else None
    )
