"""OpenAI's chat completions (and text completions): the HTTP API and the chat frames of
/v1/realtime. `build.py` turns a request into the neutral `GenerationRequest`;
`render.py` turns the pipeline's typed output into `chat.completion.chunk`s, the
same chunks on SSE and on the socket."""
