"""Upper echo: each text frame is a prompt, answered upper-cased, one answer at a time.

client  any text                 a prompt (answered in order, one at a time)
        "cancel"                 stops the last prompt sent
server  {"type": "upper.ready", "model"}                    when the socket opens
        {"type": "upper.started", "id"}                     an answer begins
        {"type": "upper.delta", "id", "text"}               its text, upper-cased
        {"type": "upper.done", "id", "status", "tokens"}    its end
        {"type": "upper.error", "id", "code"}               a refusal or a failure
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from realtime.pipeline import ChatPipeline
from realtime.pipeline.events import Step
from realtime.protocol.conversation import Message
from realtime.protocol.errors import InvalidRequestError, RealtimeError
from realtime.protocol.generation_request import FieldPaths, GenerationRequest
from realtime.protocol.output import ContentDelta
from realtime.session.commands import Cancel, Command, Frame, Reply, Submit
from realtime.session.dialect import DialectContext, DoneStatus, SessionView
from realtime.session.record import RequestRecord
from tests.dialects.upper_echo.job import UpperEchoJob

#: Every prompt of a socket runs in this lane: one at a time, in order.
LANE = "prompts"
#: The protocol's names for what the pipeline may find wrong (its errors name them).
PATHS = FieldPaths(model="model", input="text")


class UpperEchoDialect:
    def __init__(self, pipeline: ChatPipeline, context: DialectContext) -> None:
        self.pipeline = pipeline
        self.context = context
        self.prompts = 0
        self.last: str | None = None

    def opened(self) -> Sequence[Frame]:
        return ({"type": "upper.ready", "model": self.context.model_name},)

    def parse(self, text: str, view: SessionView) -> Command:
        if text == "cancel":
            if self.last is None:
                error = {"type": "upper.error", "id": None, "code": "nothing_to_cancel"}
                return Reply((error,), "error", label="cancel")
            return Cancel(self.last)
        self.prompts += 1
        request_id = self.last = f"up_{self.prompts}"
        if not text.strip():
            error = InvalidRequestError("an empty prompt has nothing to echo", param="text")
            return Submit(request_id, None, error, LANE, len(text), label="prompt")
        request = GenerationRequest(
            model=self.context.model_name,
            conversation=(Message("user", (text,)),),
            paths=PATHS,
        )
        return Submit(request_id, request, None, LANE, len(text), label="prompt")

    def parse_binary(self, data: bytes) -> Command:
        error = {"type": "upper.error", "id": None, "code": "binary_frame"}
        return Reply((error,), "error", label="binary")

    def render_started(self, request: RequestRecord) -> Sequence[Frame]:
        return ({"type": "upper.started", "id": request.id},)

    def job(self, request: RequestRecord) -> UpperEchoJob:
        return UpperEchoJob(
            self.pipeline,
            request.request,
            session_id=self.context.session_id,
            size=request.size,
        )

    def render_output(self, request: RequestRecord, item: Any) -> Sequence[Frame]:
        """Straight from the pipeline's typed events: a step's answer text, upper-cased."""
        if type(item) is not Step:
            return ()  # the `Finish`: `upper.done` is the terminal frame
        if item.events is None:
            text = item.text
        else:
            text = "".join(e.text for e in item.events if isinstance(e, ContentDelta))
        return ({"type": "upper.delta", "id": request.id, "text": text.upper()},) if text else ()

    def fold(self, held: Frame, frame: Frame) -> bool:
        """A slow reader gets two deltas of one request as one."""
        if held.get("type") != "upper.delta" or frame.get("type") != "upper.delta":
            return False
        held["text"] += frame["text"]
        return True

    def render_done(self, request: RequestRecord, status: DoneStatus) -> Sequence[Frame]:
        usage = request.job.usage() if request.job is not None else None
        tokens = usage["completion_tokens"] if usage else 0
        done = {"type": "upper.done", "id": request.id, "status": status, "tokens": tokens}
        return (done,)

    def render_error(
        self, request_id: str | None, error: RealtimeError, request: RequestRecord | None
    ) -> Sequence[Frame]:
        return ({"type": "upper.error", "id": request_id, "code": error.code},)

    def render_expiring(self, close_in_seconds: float) -> Sequence[Frame]:
        return ()

    def closes_socket(self, error: RealtimeError) -> bool:
        return error.close_code is not None

    def ended(self) -> None:
        return None
