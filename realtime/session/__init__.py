"""The socket session core, without I/O: events in, actions out, one record per request.

`core.SessionCore` decides everything a socket session decides (accepting,
refusing, ordering, starting, cancelling, answering, ending) and says so as
actions (`actions.py`); the asyncio glue in `realtime.ws.session` owns the socket,
the outbox and the tasks and does what the actions say. What the client sends
and receives is a dialect's business (`dialect.py`): it parses frames into
commands (`commands.py`) and renders the core's answers as frames; the work of
each request is a job the dialect makes (`job.py`) and the glue runs. The dialects
themselves are `realtime.dialects`' packages; this core imports none of them, nor
a store, a pipeline or the config.
"""

from realtime.session.actions import Action
from realtime.session.commands import (
    Cancel,
    CloseGracefully,
    CloseWith,
    Command,
    Frame,
    Reply,
    Submit,
)
from realtime.session.core import CoreLimits, SessionCore
from realtime.session.dialect import (
    Dialect,
    DialectChoice,
    DialectContext,
    DialectFactory,
    DialectSelector,
    DoneStatus,
    SessionView,
)
from realtime.session.job import Job, Observe, Timer
from realtime.session.record import RequestRecord

__all__ = [
    "Action",
    "Cancel",
    "CloseGracefully",
    "CloseWith",
    "Command",
    "CoreLimits",
    "Dialect",
    "DialectChoice",
    "DialectContext",
    "DialectFactory",
    "DialectSelector",
    "DoneStatus",
    "Frame",
    "Job",
    "Observe",
    "Reply",
    "RequestRecord",
    "SessionCore",
    "SessionView",
    "Submit",
    "Timer",
]
