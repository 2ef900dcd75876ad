"""The wire protocols, one package each: what a client sends becomes one typed request
(`realtime.protocol.generation_request`), and the pipeline's typed output becomes
what that client reads. No protocol is translated through another's JSON."""
