"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`): what Claude
Code and the `anthropic` SDKs speak. `models.py` is the strict wire request,
`build.py` turns it into the neutral `GenerationRequest`, `render.py` turns the
pipeline's typed output into Anthropic's content blocks (SSE events or one
`Message`), `errors.py` words every error as Anthropic does, and `run.py` puts
them together for the HTTP route."""
