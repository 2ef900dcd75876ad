"""The chat-frame dialect of /v1/realtime: chat-completion requests and chunks over a socket.

The wire shapes are `realtime.dialects.chat.frames` (documented in docs/protocol.md).
Requests without `request_id` get a server id and run in one lane (in order);
requests with one run concurrently. A frame that is not JSON closes the socket
with 1007, a binary frame with 1003; JSON that is not a valid frame gets an
`error` frame and the socket stays. This dialect also owns the optional
`session.setup` (its model and request defaults), through the `SETUP` table.
Each request runs on the chat pipeline as a `ChatJob`; the pipeline's events are
rendered as chunks here, as they come, each with the request's id.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from realtime.chat.coalesce import fold_chunk
from realtime.chat.prompt_fit import PromptFit
from realtime.dialects.chat.frames import (
    CancelFrame,
    CloseSessionFrame,
    FrameRejected,
    RequestFrame,
    SessionAlreadySetUpError,
    SessionSetupFrame,
    check_request_frame,
    decode_client_frame,
    done_frame,
    error_frame,
    expiring_frame,
    ready_frame,
)
from realtime.dialects.chat.job import ChatJob
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import (
    BinaryFrameError,
    MalformedFrameError,
    ModelNotFoundError,
    RealtimeError,
)
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.protocol.states import SETUP, IllegalTransition, SetupEvent, SetupState
from realtime.session.commands import (
    Cancel,
    CloseGracefully,
    CloseWith,
    Command,
    Frame,
    Reply,
    Submit,
)
from realtime.session.dialect import (
    DialectContext,
    DialectFactory,
    DoneStatus,
    SessionView,
    ViolationHook,
)
from realtime.session.record import RequestRecord

#: The lane of requests sent without `request_id`: they run one at a time, in order.
ORDERED_LANE = "ordered"


def _ignore_violation(machine: str, exc: Exception) -> None:
    return None


class ChatFrameDialect:
    """One socket's chat-frame codec; keeps its `session.setup` state."""

    def __init__(
        self,
        pipeline: ChatPipeline,
        *,
        model_name: str,
        session_id: str,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        on_violation: ViolationHook = _ignore_violation,
    ):
        self.pipeline = pipeline
        self.model_name = model_name
        self.session_id = session_id
        self.limits = limits
        self._on_violation = on_violation
        #: `SetupState`: whether a `session.setup` is still allowed.
        self.setup_state = SetupState.AWAITING_SETUP.value
        #: From `session.setup`: the fields (model included) every request inherits.
        self.defaults: dict[str, Any] | None = None

    @classmethod
    def factory(cls, pipeline: ChatPipeline) -> DialectFactory:
        """The `DialectFactory` of chat frames whose requests run on `pipeline`."""

        def make(context: DialectContext) -> ChatFrameDialect:
            return cls(
                pipeline,
                model_name=context.model_name,
                session_id=context.session_id,
                limits=context.limits,
                on_violation=context.on_violation,
            )

        return make

    # --- client frames ---

    def opened(self) -> Sequence[Frame]:
        return ()  # the chat dialect speaks only when spoken to

    def parse(self, text: str, view: SessionView) -> Command:
        try:
            frame = decode_client_frame(text, self.defaults, self.limits)
        except MalformedFrameError as exc:
            return CloseWith(exc, label="malformed")
        except FrameRejected as rejected:
            if rejected.is_setup:
                return self._refuse_setup(rejected.error)
            if rejected.is_request:
                self._setup_event(SetupEvent.REQUEST)
                return self._submit(rejected.request_id, None, rejected.error, len(text))
            # Not a request, so it ends none: request_id stays null.
            return Reply((error_frame(None, rejected.error),), "error", label="rejected")
        if isinstance(frame, RequestFrame):
            self._setup_event(SetupEvent.REQUEST)
            return self._submit(frame.request_id, frame.request, None, len(text))
        if isinstance(frame, SessionSetupFrame):
            return self._setup(frame)
        if isinstance(frame, CancelFrame):
            return Cancel(frame.request_id)
        if isinstance(frame, CloseSessionFrame):
            return CloseGracefully()
        raise TypeError(f"unexpected frame {frame!r}")  # pragma: no cover - exhaustive

    def large_frame_check(self) -> Callable[[Any], object]:
        """A request frame's validation under this socket's defaults, and its prompt's
        fit, run by the decode process on a large frame (`ws/large_frames.py`)."""
        return functools.partial(
            check_request_frame,
            defaults=self.defaults,
            limits=self.limits,
            fit=PromptFit.of(self.pipeline.engine.info),
        )

    def parse_binary(self, data: bytes) -> Command:
        return CloseWith(
            BinaryFrameError("binary frames are not supported; send JSON text frames"),
            label="binary",
        )

    @staticmethod
    def _submit(
        request_id: str | None, request: Any, rejection: RealtimeError | None, size: int
    ) -> Submit:
        lane = ORDERED_LANE if request_id is None else None
        return Submit(request_id, request, rejection, lane, size)

    def _setup(self, frame: SessionSetupFrame) -> Reply:
        """Fix the session's model and defaults, once, before any request."""
        if self.setup_state != SetupState.AWAITING_SETUP.value:
            return self._refuse_setup(None)
        if frame.model != self.model_name:
            error = ModelNotFoundError(
                f"The model `{frame.model}` does not exist. Available: {self.model_name}",
                param="model",
            )
            return self._refuse_setup(error)
        self.defaults = {**frame.defaults, "model": frame.model}
        self._setup_event(SetupEvent.SETUP)
        ready = ready_frame(self.session_id, frame.model, frame.defaults)
        return Reply((ready,), "ready", label="session_setup")

    def _refuse_setup(self, error: RealtimeError | None) -> Reply:
        """A refused setup (request_id null); once settled, any setup is too late."""
        if self.setup_state == SetupState.AWAITING_SETUP.value and error is not None:
            self._setup_event(SetupEvent.SETUP_REFUSED)
        else:
            why = (
                "the session is already set up"
                if self.setup_state == SetupState.SET_UP.value
                else "session.setup must come before the first request"
            )
            error = SessionAlreadySetUpError(f"{why}; nothing was changed", param="type")
            self._setup_event(SetupEvent.LATE_SETUP)
        return Reply((error_frame(None, error),), "error", label="session_setup")

    def _setup_event(self, event: SetupEvent) -> None:
        try:
            self.setup_state = SETUP.next(self.setup_state, event.value)
        except IllegalTransition as exc:
            self._on_violation("setup", exc)

    # --- server frames ---

    def render_started(self, request: RequestRecord) -> Sequence[Frame]:
        return ()

    def job(self, request: RequestRecord) -> ChatJob:
        return ChatJob(
            self.pipeline, request.request, session_id=self.session_id, size=request.size
        )

    def render_output(self, request: RequestRecord, item: Any) -> Sequence[Frame]:
        """A pipeline event as its chunks (the completion of a request that did not
        stream as it is), each with the request's id."""
        frames: list[Frame] = request.job.render(item)
        for frame in frames:
            frame["request_id"] = request.id
        return frames

    def fold(self, held: Frame, frame: Frame) -> bool:
        """Two plain text chunks of one completion fold (`realtime.chat.coalesce`)."""
        return fold_chunk(held, frame)

    def render_done(self, request: RequestRecord, status: DoneStatus) -> Sequence[Frame]:
        job: ChatJob | None = request.job
        run = job.run if job is not None else None
        if run is None:  # never ran: no completion id, no usage
            return (done_frame(request.id, None, status, None, None),)
        delta = run.delta
        finish_reason = delta.finish_reason if status == "completed" else None
        return (done_frame(request.id, delta.id, status, finish_reason, delta.usage()),)

    def render_error(
        self, request_id: str | None, error: RealtimeError, request: RequestRecord | None
    ) -> Sequence[Frame]:
        return (error_frame(request_id, error),)

    def render_expiring(self, close_in_seconds: float) -> Sequence[Frame]:
        return (expiring_frame(close_in_seconds),)

    def closes_socket(self, error: RealtimeError) -> bool:
        return error.close_code is not None

    def ended(self) -> None:
        self._setup_event(SetupEvent.END)
