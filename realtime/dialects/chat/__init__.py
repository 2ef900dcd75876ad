"""OpenAI's chat completions (and text completions): the HTTP API and the chat frames of
/v1/realtime.

    build.py      a request -> the neutral `GenerationRequest`
    render.py     the pipeline's typed output -> `chat.completion.chunk`s, the same
                  chunks on SSE and on the socket
    run.py        one chat completion on the pipeline (`ChatRun`), as both
                  transports run it
    tokenize.py   /tokenize and /detokenize
    job.py        a chat completion of a socket session (`ChatJob`)
    dialect.py    chat frames <-> the session core's commands (requests, cancel,
                  setup, close)
    selector.py   claims every /v1/realtime handshake no other dialect claimed
"""
