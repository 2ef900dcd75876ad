"""The Messages route's validation as the decode process runs it: the body, then its
prompt's fit (`realtime.chat.prompt_fit`), as the chat route's (`dialects/chat/early_refusal.py`).
"""

from __future__ import annotations

from typing import Any

from realtime.chat.prompt_fit import PromptFit
from realtime.dialects.messages.build import (
    MessagesOptions,
    messages_generation,
    parse_messages_request,
)
from realtime.dialects.messages.models import MessagesRequest
from realtime.protocol.input_limits import InputLimits


def refuse_unfit_message(
    data: Any, *, limits: InputLimits, fit: PromptFit, options: MessagesOptions
) -> MessagesRequest:
    """`parse_messages_request(data)`; raises InvalidRequestError as it does, and
    PromptTooLongError for a prompt that cannot fit, as preparing it would."""
    request = parse_messages_request(data, limits)
    fit.refuse(messages_generation(request, options))
    return request
