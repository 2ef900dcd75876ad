"""Whether a request's prompt can fit the context, decided where the model is not loaded.

`realtime.pipeline.prompt_floor` refuses a prompt whose floor on the token count
already fills the context, before encoding it. `PromptFit` carries what that needs
(the chat template's source, the tokenizer's characters per token, the context)
as plain, picklable values, so a decode process (`realtime.pipeline.json_process`),
which never loads the model, can render the same prompt and refuse it the same way.
A body of megabytes whose prompt cannot fit then comes back to the server as its
error alone, instead of being taken back whole, rendered there and then refused.

It refuses only what the server would refuse with the same error: a request for
another model, or one that sends token ids, is left to the server, and the floor
is taken on the prompt less `MARGIN_CHARS`, for what a template's clock
(`strftime_now`) may render differently a moment later.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from realtime.chat.conversation import template_input
from realtime.model.info import ModelInfo
from realtime.model.template import ChatTemplate
from realtime.model.tokenizer import chars_per_token
from realtime.protocol.errors import PromptTooLongError
from realtime.protocol.generation_request import GenerationRequest

#: Characters of the rendered prompt the floor leaves out (a clock's rendering may differ).
MARGIN_CHARS = 64


@dataclass(frozen=True, slots=True)
class PromptFit:
    """The model's template, tokenizer bound and context, as a decode process needs them."""

    model: str
    template: str
    tool_use: str | None
    special_tokens: tuple[tuple[str, str], ...]
    chars_per_token: int
    context_length: int

    @classmethod
    def of(cls, info: ModelInfo) -> PromptFit | None:
        """None when the tokenizer gives no bound (its prompts are only counted by encoding)."""
        per_token = chars_per_token(info.tokenizer)
        if per_token is None:
            return None
        template = info.chat_template
        return cls(
            info.name,
            template.source,
            template.tool_use_source,
            tuple(template.special_tokens.items()),
            per_token,
            info.context_length,
        )

    def refuse(self, request: GenerationRequest) -> None:
        """Raise PromptTooLongError when `request`'s prompt cannot fit the context; the
        template's own refusals (InvalidRequestError) are the server's too."""
        if request.model != self.model:
            return  # the server answers model_not_found first
        conversation = template_input(request)
        if conversation is None:
            return  # token ids: counted by the server, without encoding anything
        prompt = _template(self.template, self.tool_use, self.special_tokens).render(
            conversation.messages, tools=conversation.tools, **conversation.kwargs
        )
        if (len(prompt) - MARGIN_CHARS) // self.chars_per_token >= self.context_length:
            raise PromptTooLongError.at_least(
                len(prompt) // self.chars_per_token,
                len(prompt),
                self.context_length,
                request.paths.input,
            )


@functools.lru_cache(maxsize=4)
def _template(
    source: str, tool_use: str | None, special_tokens: tuple[tuple[str, str], ...]
) -> ChatTemplate:
    """The compiled template, once per process (compiling takes milliseconds)."""
    return ChatTemplate(source, dict(special_tokens), tool_use=tool_use)
