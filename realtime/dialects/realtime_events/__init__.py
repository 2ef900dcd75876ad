"""The OpenAI Realtime event protocol in text mode: a second dialect of /v1/realtime.

A socket speaks it when its handshake URL carries a `model` query parameter (the
`openai` SDK's `client.realtime.connect(model=...)` always sends one); without
one the socket speaks chat frames (`realtime.dialects.chat`). Everything here is
pure: event models, the session's configuration and conversation, the chat
request built from them, the server events rendered from the pipeline's chunks,
the dialect (its responses run, for now, as chat's `ChatJob`s) and the handshake
selector.
"""
