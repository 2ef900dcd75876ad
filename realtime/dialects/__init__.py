"""The wire protocols, one package each: its codec, its dialect, its handshake selector.

What a client sends becomes one typed request (`realtime.protocol.generation_request`),
and the pipeline's typed output becomes what that client reads. No protocol is
translated through another's JSON.

    chat/              OpenAI's chat (and text) completions: HTTP and the chat frames
                       of /v1/realtime
    responses/         the OpenAI Responses API: HTTP's and WebSocket mode's (/v1/responses)
    realtime_events/   the OpenAI Realtime API's events (text) on /v1/realtime

Each socket dialect turns its frames into the session core's commands, the core's
answers into its frames and a started request into a job (`realtime.session`); a
selector claims the handshakes that ask for it. No dialect imports another (for
now the Realtime events still run their responses as chat's `ChatJob`: the layer
test names that one exception).
"""
