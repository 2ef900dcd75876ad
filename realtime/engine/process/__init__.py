"""The engine in a process of its own: the engine core's loop, and the front end's proxy.

A model engine built on `ThreadedEngineCore` (cpu, exllamav2, and plug-ins built the
same way) can run in a child process, the *engine core*, which owns the model and
steps it in a plain loop with no event loop beside it; each front end (the server's
HTTP and WebSocket process, one or several) reaches it through `EngineProxy`, an
`Engine` like any other, so the pipeline does not know the difference.

- `wire.py`: the messages and their framing (sans-I/O);
- `spec.py`: what the child is asked to build (an engine name and its options);
- `core_server.py`: the engine core's loop: commands in, steps, outputs out;
- `main.py`: the child's entry point (`python -m realtime.engine.process.main`);
- `launcher.py`: starts the child and watches it;
- `proxy.py`: the front end's engine.

See docs/architecture.md ("The engine process") for the measurements behind the
choices (the transport, where tokenizing and grammar compilation happen).
"""
