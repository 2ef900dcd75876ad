"""What runs in the decode process (`realtime.pipeline.json_process`), and only that.

A module of its own so that the process imports `json_input` and nothing of the
server (importing `realtime.pipeline` takes half a second and 250 modules).
"""

from __future__ import annotations

import os
import pickle
import threading
import time

from realtime.protocol.json_input import decode_checked

#: How often the decode process looks for its parent.
PARENT_POLL_S = 0.5


def exit_with_parent(parent: int) -> None:
    """The process's initializer: it exits once `parent` is gone. Its task queue's pipe
    never reports the end (the process holds that pipe's writing end too), so without
    this a server killed with kill -9 left its decode process running, holding the
    server's stderr open."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def decode_pickled(raw: bytes | str, max_depth: int, max_values: int | None) -> bytes:
    """`decode_checked`, pickled: the answer arrives as one bytes object, which the
    server unpickles on its own thread (`json_process.decode` says why)."""
    return pickle.dumps(decode_checked(raw, max_depth, max_values), pickle.HIGHEST_PROTOCOL)
