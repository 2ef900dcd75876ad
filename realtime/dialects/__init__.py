"""The wire protocols, one package each: its pure codec, its dialect, its handshake selector.

    chat/              chat frames on /v1/realtime (the chat-completions API over a socket)
    responses/         the OpenAI Responses API: HTTP's and WebSocket mode's (/v1/responses)
    realtime_events/   the OpenAI Realtime API's events (text) on /v1/realtime

Each dialect turns its frames into the session core's commands and the core's
answers into its frames (`realtime.session.dialect`); a selector claims the
handshakes that ask for it. No dialect imports another.
"""
