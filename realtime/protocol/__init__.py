"""Wire models and rules only: no I/O, no engine, no torch.

Everything a client can send or receive is described here, together with the
client-facing errors, which decide HTTP status codes and WebSocket close codes.
"""
