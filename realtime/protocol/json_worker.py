"""What runs in the decode process (`realtime.pipeline.json_process`), and only that.

A module of its own so that the process imports `json_input` and nothing of the
server (importing `realtime.pipeline` takes half a second and 250 modules).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.json_input import Decoded, RefusedShape, decode_checked

#: How often the decode process looks for its parent.
PARENT_POLL_S = 0.5


#: How much lower the decode process's CPU priority is than the server's (`nice`).
NICENESS = 10


def exit_with_parent(parent: int) -> None:
    """The process's initializer: it exits once `parent` is gone. Its task queue's pipe
    never reports the end (the process holds that pipe's writing end too), so without
    this a server killed with kill -9 left its decode process running, holding the
    server's stderr open.

    It also lowers the process's priority by `NICENESS`: only large inputs come here,
    and when a client floods it with them on a busy machine, the engine and the front
    ends should get the cores first, the flood what is left."""
    try:
        os.nice(NICENESS)
    except OSError:  # not allowed here: run at the server's priority
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def decode_pickled(
    raw: bytes | str,
    max_depth: int,
    max_values: int | None,
    parse: Callable[[Any], object] | None = None,
) -> bytes:
    """`decode_checked`, pickled: the answer arrives as one bytes object, which the
    server unpickles on its own thread (`json_process.decode` says why).

    `parse` is the route's own validation (a module-level function, so it pickles by
    name; its module is imported here on first use). A document it refuses comes
    back as its refusal and envelope only (`RefusedShape`), so an 8 MiB string in a
    field the route does not know is never rebuilt in the server: taking it back
    in cost the server's loop more than everything else about the request."""
    decoded = decode_checked(raw, max_depth, max_values)
    value = decoded.value
    if parse is not None and decoded.syntax is None and decoded.too_deep is None:
        if type(value) is not RefusedShape:
            refused = _refusal(parse, value)
            if refused is not None:
                return refused
    return pickle.dumps(decoded, pickle.HIGHEST_PROTOCOL)


def _refusal(parse: Callable[[Any], object], value: Any) -> bytes | None:
    """The pickled refusal of `value` by `parse`, or None: it passed, or failed in a way
    the server's own parse must meet and report itself (not a client's 400)."""
    try:
        parse(value)
    except InvalidRequestError as exc:
        try:
            data = pickle.dumps(Decoded(RefusedShape.of(value, exc)), pickle.HIGHEST_PROTOCOL)
            pickle.loads(data)  # an error that cannot be rebuilt there is answered there
        except Exception:
            return None
        return data
    except Exception:
        return None
    return None
