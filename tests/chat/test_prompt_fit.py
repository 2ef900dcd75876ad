"""`PromptFit`: the prompt-fit refusal a decode process makes, the same as the server's own."""

from __future__ import annotations

import dataclasses
import functools
import json
import pickle

import pytest

from realtime.chat.prompt_fit import MARGIN_CHARS, PromptFit
from realtime.dialects.chat.build import chat_generation
from realtime.dialects.chat.early_refusal import refuse_unfit_chat
from realtime.dialects.chat.request import parse_chat_request
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import PromptTooLongError, UnknownFieldError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS
from realtime.protocol.json_input import RefusedShape
from realtime.protocol.json_worker import decode_pickled

ENGINE = EchoEngine()
INFO = ENGINE.info


def _body(content: str, model: str = "echo") -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def _generation(content: str, model: str = "echo"):  # type: ignore[no-untyped-def]
    return chat_generation(parse_chat_request(_body(content, model)))


def _fit() -> PromptFit:
    fit = PromptFit.of(INFO)
    assert fit is not None
    return fit


def _servers_refusal(content: str) -> PromptTooLongError | None:
    pipeline, generation = ChatPipeline(ENGINE), _generation(content)
    try:  # what `ChatPipeline.prepare` does, past its model and readiness checks
        pipeline.render_prompt(generation, pipeline.template_input(generation), fit_context=True)
    except PromptTooLongError as exc:
        return exc
    return None


def test_a_prompt_beyond_the_context_gets_the_servers_own_error() -> None:
    content = "x" * (6 * INFO.context_length + 1000)
    with pytest.raises(PromptTooLongError) as refused:
        _fit().refuse(_generation(content))
    server = _servers_refusal(content)
    assert server is not None
    assert refused.value.to_body() == server.to_body()
    assert (refused.value.prompt_tokens, refused.value.context_length) == (
        server.prompt_tokens,
        server.context_length,
    )


def test_what_it_lets_through_the_server_prepares_or_refuses_itself() -> None:
    fit = _fit()
    fit.refuse(_generation("short"))  # fits: nothing raised
    fit.refuse(_generation("x" * 6 * INFO.context_length * 2, model="other"))  # the server's 404
    # At the edge, the margin leaves the prompt to the server's own check.
    prompt = INFO.chat_template.render([{"role": "user", "content": ""}])
    edge = "x" * (6 * INFO.context_length - len(prompt) + MARGIN_CHARS // 2)
    fit.refuse(_generation(edge))
    assert _servers_refusal(edge) is not None


def test_it_pickles_to_a_decode_process_and_is_none_without_a_bound() -> None:
    fit = _fit()
    assert pickle.loads(pickle.dumps(fit)) == fit
    assert fit.chars_per_token == 6 and fit.context_length == INFO.context_length

    class Unbounded:
        pass

    info = dataclasses.replace(INFO, tokenizer=Unbounded())  # type: ignore[arg-type]
    assert PromptFit.of(info) is None


def test_the_decode_process_returns_only_the_refusal_of_a_prompt_that_cannot_fit() -> None:
    early = functools.partial(refuse_unfit_chat, limits=DEFAULT_INPUT_LIMITS, fit=_fit())
    huge = "x" * (6 * INFO.context_length + 1000)
    refused = pickle.loads(decode_pickled(json.dumps(_body(huge)), 64, None, early))
    assert type(refused.value) is RefusedShape
    assert "messages" not in refused.value and refused.value["model"] == "echo"
    with pytest.raises(PromptTooLongError) as error:
        refused.checked_value()
    assert error.value.code == "context_length_exceeded" and error.value.param == "messages"

    unknown = pickle.loads(decode_pickled(json.dumps({**_body(huge), "x": 1}), 64, None, early))
    with pytest.raises(UnknownFieldError):  # the body's own refusal comes first
        unknown.checked_value()

    served = pickle.loads(decode_pickled(json.dumps(_body("fits")), 64, None, early))
    assert served.checked_value() == _body("fits")


def test_the_messages_check_refuses_in_anthropics_numbers() -> None:
    from realtime.dialects.messages.build import DEFAULT_OPTIONS
    from realtime.dialects.messages.early_refusal import refuse_unfit_message

    early = functools.partial(
        refuse_unfit_message, limits=DEFAULT_INPUT_LIMITS, fit=_fit(), options=DEFAULT_OPTIONS
    )
    huge = "x" * (6 * INFO.context_length + 1000)
    body = {**_body(huge), "max_tokens": 5}
    refused = pickle.loads(decode_pickled(json.dumps(body), 64, None, early))
    with pytest.raises(PromptTooLongError) as error:
        refused.checked_value()
    assert error.value.context_length == INFO.context_length
    assert error.value.prompt_tokens >= INFO.context_length
    fits = {**_body("fits"), "max_tokens": 5}
    assert pickle.loads(decode_pickled(json.dumps(fits), 64, None, early)).checked_value() == fits


def test_a_chat_frame_is_checked_under_the_sessions_defaults() -> None:
    from realtime.dialects.chat.frames import check_request_frame

    huge = "x" * (6 * INFO.context_length + 1000)
    frame = {
        "type": "response.create",
        "request_id": "r1",
        "messages": [{"role": "user", "content": huge}],
    }
    check = functools.partial(
        check_request_frame, defaults={"model": "echo"}, limits=DEFAULT_INPUT_LIMITS, fit=_fit()
    )
    refused = pickle.loads(decode_pickled(json.dumps(frame), 64, None, check))
    assert refused.value["request_id"] == "r1"  # the envelope names the request it ends
    with pytest.raises(PromptTooLongError):
        refused.checked_value()
    other = functools.partial(check, defaults={"model": "another"})
    assert pickle.loads(decode_pickled(json.dumps(frame), 64, None, other)).checked_value() == frame
