"""Requests in, chunks out: the glue between the transports, the chat logic and the engine.

    ChatCompletionRequest / CompletionRequest
      -> prepare(): the API's prompt (chat.py: template; completions.py: as given),
         then one shared path to engine requests (engine_requests.py): model check,
         token budget with the server's cap (budget.py), stops, sampling (sampling.py)
      -> stream(): engine outputs -> visible text (generation.py) -> chunk dicts,
         engine errors mapped to client errors on the way (engine_errors.py)

Transports call `prepare` and `stream`/`complete` and never adjust what `prepare`
returns. This code awaits the engine, so it is I/O and cannot live in `chat/`;
and it speaks OpenAI, so it cannot live in `engine/`.
"""

from realtime.pipeline.chat import ChatPipeline, PreparedChat
from realtime.pipeline.completions import CompletionPipeline, PreparedCompletion

__all__ = ["ChatPipeline", "CompletionPipeline", "PreparedChat", "PreparedCompletion"]
