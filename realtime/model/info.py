"""The served model's description: what an engine tells the rest of the server about it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # jinja2 loads only where templates are used
    from realtime.model.template import ChatTemplate
    from realtime.model.tokenizer import Tokenizer


@dataclass(frozen=True, slots=True)
class GenerationDefaults:
    """A model's own sampling defaults (generation_config.json); None where it is silent.

    They apply where a request leaves a parameter out, as vLLM does by default,
    because many models are only coherent at the settings they were tuned for.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    context_length: int
    tokenizer: Tokenizer
    chat_template: ChatTemplate
    owned_by: str = "realtime"
    created: int = 0
    #: Number of token ids; lets the pipeline reject out-of-range ids before a stream starts.
    vocab_size: int | None = None
    generation_defaults: GenerationDefaults = GenerationDefaults()
