"""/v1/realtime's chat frames: the handshake every other dialect of the route left.

It accepts the `realtime` subprotocol when the client offered it (browsers sending
their key as `realtime-key.<key>` must offer it: the key itself is never echoed).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from realtime.asgi.auth import SUBPROTOCOL
from realtime.dialects.chat.dialect import ChatFrameDialect
from realtime.pipeline import ChatPipeline
from realtime.session.dialect import DialectChoice, DialectSelector


def chat_frames(pipeline: ChatPipeline) -> DialectSelector:
    """Chat frames on `pipeline`, the default of /v1/realtime: claims every handshake."""
    dialect = ChatFrameDialect.factory(pipeline)

    def select(scope: MutableMapping[str, Any]) -> DialectChoice:
        offered = scope.get("subprotocols") or ()
        return DialectChoice(dialect, SUBPROTOCOL if SUBPROTOCOL in offered else None)

    return select
