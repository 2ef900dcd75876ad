"""A failed startup (an engine whose `start()` raises) as one log line, not a traceback.

Starlette answers a lifespan failure with the whole traceback as the message, and
uvicorn logs that message as an ERROR line. An engine that cannot load its weights
is an operator's problem, not a bug: the ERROR line keeps the exception's own line
(`cannot start the engine: RuntimeError: no weights here`), and the traceback goes
to the DEBUG log for whoever needs it.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("realtime")

_WHAT = {
    "lifespan.startup.failed": "cannot start the engine",
    "lifespan.shutdown.failed": "the engine failed to close",
}


def last_line(text: str) -> str:
    """The exception's own line at the end of a formatted traceback."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no reason given"


class OneLineLifespanErrors:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            what = _WHAT.get(message["type"])
            if what is not None:
                text = str(message.get("message", ""))
                log.debug("%s:\n%s", what, text)
                message = {**message, "message": f"{what}: {last_line(text)}"}
            await send(message)

        await self.app(scope, receive, sending)
