"""Stored responses: one async interface, its record, and the two embedded stores.

    base.py     the `ResponseStore` interface, `StoredResponse`, `Chain`, the owner
                fingerprint and the chain walk
    memory.py   `MemoryResponseStore`: in memory (no directory), and a socket's own
                `store: false` responses
    sqlite.py   `SQLiteResponseStore`: on disk under `--response-store DIR`
    postgres.py `PostgresResponseStore`: one database several replicas share
    conversations.py  the conversation record and its item pages (every store
                keeps conversations beside the responses)

A layer of its own, below the dialects that keep responses (the Responses API)
and above nothing but the wire rules: a store knows records, never requests.
"""

from realtime.store.base import Chain, ResponseStore, StoredResponse
from realtime.store.memory import MemoryResponseStore

__all__ = ["Chain", "MemoryResponseStore", "ResponseStore", "StoredResponse"]
