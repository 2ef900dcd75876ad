"""Chat frames: the chat-completions API over /v1/realtime, a socket's default dialect.

dialect.py    frames <-> the session core's commands (requests, cancel, setup, close)
selector.py   claims every /v1/realtime handshake no other dialect claimed
"""
