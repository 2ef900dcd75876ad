"""The Messages request's fields against the installed `anthropic` SDK's own request types:
every field the SDK can send is served or accepted with no effect (and documented), so a
field a new SDK adds fails here rather than in a client."""

from __future__ import annotations

from pathlib import Path

import pytest
from anthropic.types import message_count_tokens_params, message_create_params
from anthropic.types.beta import message_count_tokens_params as beta_count
from anthropic.types.beta import message_create_params as beta_create

from realtime.dialects.messages.build import parse_count_tokens_request, parse_messages_request
from realtime.dialects.messages.models import (
    NO_EFFECT_FIELDS,
    CountTokensRequest,
    MessagesRequest,
)
from realtime.protocol.errors import InvalidRequestError, UnknownFieldError

#: Sent as the `anthropic-beta` header, never in the body.
HEADER_ONLY = {"betas"}
PROTOCOL = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"


def sdk_fields(*types: type) -> set[str]:
    fields: set[str] = set()
    for kind in types:
        for klass in kind.__mro__:
            fields |= set(getattr(klass, "__annotations__", {}))
    return fields - HEADER_ONLY


def test_every_create_field_of_the_sdk_is_accepted() -> None:
    sdk = sdk_fields(
        message_create_params.MessageCreateParamsStreaming,
        beta_create.MessageCreateParamsStreaming,
    )
    assert sdk - set(MessagesRequest.model_fields) == set()


def test_every_count_tokens_field_of_the_sdk_is_accepted() -> None:
    sdk = sdk_fields(
        message_count_tokens_params.MessageCountTokensParams, beta_count.MessageCountTokensParams
    )
    assert sdk - set(CountTokensRequest.model_fields) == set()


def test_the_fields_with_no_effect_are_declared_and_documented() -> None:
    text = PROTOCOL.read_text(encoding="utf-8")
    for name in NO_EFFECT_FIELDS:
        assert name in MessagesRequest.model_fields
        assert f"`{name}`" in text, f"docs/protocol.md does not list {name}"


def test_an_unknown_field_is_refused_by_name() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(UnknownFieldError) as info:
        parse_messages_request({**body, "temprature": 1})
    assert info.value.param == "temprature"
    with pytest.raises(UnknownFieldError):
        parse_count_tokens_request({**body, "max_tokens": None} | {"stream": True})


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages.0.content"),
        ({"thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking.budget_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"stop_sequences": ["x"] * 65}, "stop_sequences"),
        ({"stop_sequences": ["ok", ""]}, "stop_sequences"),
    ],
)
def test_a_bad_field_is_named(body: dict[str, object], param: str) -> None:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(InvalidRequestError) as info:
        parse_messages_request({**base, **body})
    assert (info.value.param or "").startswith(param), info.value.message
