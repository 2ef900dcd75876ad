"""The chat route's validation as the decode process runs it: the body, then its prompt's fit.

`parse_chat_request` alone refuses a malformed body there; this also refuses, there,
a body whose prompt cannot fit the context (`realtime.chat.prompt_fit`), so neither
comes back to the server whole. The server parses what passes again, itself.
"""

from __future__ import annotations

from typing import Any

from realtime.chat.prompt_fit import PromptFit
from realtime.dialects.chat.build import chat_generation
from realtime.dialects.chat.request import ChatCompletionRequest, parse_chat_request
from realtime.protocol.input_limits import InputLimits


def refuse_unfit_chat(data: Any, *, limits: InputLimits, fit: PromptFit) -> ChatCompletionRequest:
    """`parse_chat_request(data)`; raises InvalidRequestError as it does, and
    PromptTooLongError for a prompt that cannot fit, as preparing it would."""
    request = parse_chat_request(data, limits)
    fit.refuse(chat_generation(request))
    return request
