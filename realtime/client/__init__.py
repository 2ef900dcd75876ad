"""Clients for /v1/realtime: an asyncio library, a blocking wrapper, and a terminal REPL.

    from realtime.client import RealtimeClient

    async with RealtimeClient("ws://127.0.0.1:8000/v1/realtime", api_key=key) as client:
        async for chunk in client.chat([{"role": "user", "content": "Hi"}], temperature=0.2):
            print(chunk.choices[0].delta.content or "", end="")

`RealtimeClientSync` does the same without an event loop. The REPL is
`python -m realtime.client [URL]` (see `realtime.client.repl`). The how-to is
docs/howto/python-client.md.
"""

from realtime.client.client import DEFAULT_URL, ChatStream, RealtimeClient
from realtime.client.errors import (
    APIError,
    AuthenticationError,
    ConnectError,
    ConnectionClosedError,
    EngineError,
    InternalServerError,
    InvalidRequestError,
    PermissionDeniedError,
    ProtocolError,
    RateLimitError,
    RealtimeClientError,
    RequestInterruptedError,
    ServiceUnavailableError,
)
from realtime.client.sync import RealtimeClientSync, SyncChatStream
from realtime.client.types import (
    ChatResult,
    ClientEvent,
    ReconnectPolicy,
    ResponseDone,
    ToolCall,
)
from realtime.dialects.chat.response import ChatCompletionChunk

__all__ = [
    "DEFAULT_URL",
    "APIError",
    "AuthenticationError",
    "ChatCompletionChunk",
    "ChatResult",
    "ChatStream",
    "ClientEvent",
    "ConnectError",
    "ConnectionClosedError",
    "EngineError",
    "InternalServerError",
    "InvalidRequestError",
    "PermissionDeniedError",
    "ProtocolError",
    "RateLimitError",
    "RealtimeClient",
    "RealtimeClientError",
    "RealtimeClientSync",
    "ReconnectPolicy",
    "RequestInterruptedError",
    "ResponseDone",
    "ServiceUnavailableError",
    "SyncChatStream",
    "ToolCall",
]
