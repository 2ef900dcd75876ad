"""The examples in the clients/ folder (the `realtime.client` library is tests/client)."""
