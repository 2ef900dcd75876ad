"""The `realtime.client` library and its REPL (the examples in clients/ are tests/examples)."""
