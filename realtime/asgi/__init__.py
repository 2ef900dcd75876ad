"""What both transports share at the ASGI level, below both of them.

`access.py` is the access guard that runs before any route or socket (and
refuses a WebSocket handshake with an HTTP response), `auth.py` the pure rules it
applies (API keys compared in constant time, the Origin policy); `lifecycle.py`
holds the shutdown phases both transports watch; `responses.py` builds the
OpenAI error response both transports answer with over HTTP. `http/` and `ws/`
import from here, never from each other.
"""
