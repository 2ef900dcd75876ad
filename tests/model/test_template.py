"""ChatTemplate: sandboxed jinja2 rendering as Hugging Face's apply_chat_template does it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pytest

from realtime.model.template import ChatTemplate, plain_data
from realtime.protocol.errors import InvalidRequestError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
]


def test_renders_messages_with_generation_prompt() -> None:
    out = ChatTemplate(CHATML).render(MESSAGES)
    assert out == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_without_generation_prompt() -> None:
    out = ChatTemplate(CHATML).render(MESSAGES, add_generation_prompt=False)
    assert out == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


def test_source_is_kept() -> None:
    assert ChatTemplate(CHATML).source == CHATML


def test_attribute_access_to_message_keys() -> None:
    template = ChatTemplate("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}")
    assert template.render(MESSAGES) == "[system:Be brief.][user:Hi]"


def test_trim_blocks_and_lstrip_blocks() -> None:
    source = (
        "{% for m in messages %}\n"
        "    {% if m.role == 'user' %}\n"
        "{{ m.content }}\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
    )
    assert ChatTemplate(source).render(MESSAGES) == "Hi\n"


def test_loopcontrols_extension() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{{ m.content }}{% endfor %}"
    )
    assert ChatTemplate(source).render(MESSAGES) == "Hi"


def test_namespace_works_in_the_sandbox() -> None:
    source = (
        "{% set ns = namespace(n=0) %}"
        "{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    )
    assert ChatTemplate(source).render(MESSAGES) == "2"


def test_tools_are_passed() -> None:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    source = (
        "{% if tools %}{% for t in tools %}<tool>{{ t.function.name }}</tool>{% endfor %}"
        "{% else %}none{% endif %}"
    )
    template = ChatTemplate(source)
    assert template.render(MESSAGES, tools=tools) == "<tool>get_weather</tool>"
    assert template.render(MESSAGES) == "none"


def test_kwargs_reach_the_template() -> None:
    source = (
        "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
        "{{ messages[-1].content }}"
    )
    template = ChatTemplate(source)
    assert template.render(MESSAGES, enable_thinking=False) == "<think></think>Hi"
    assert template.render(MESSAGES, enable_thinking=True) == "Hi"
    assert template.render(MESSAGES) == "Hi"


def test_special_tokens() -> None:
    template = ChatTemplate(
        "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
        special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
    )
    assert template.special_tokens == {"bos_token": "<s>", "eos_token": "</s>"}
    assert template.render(MESSAGES) == "<s>Be brief.</s>"


def test_kwargs_override_special_tokens_but_not_messages() -> None:
    template = ChatTemplate(
        "{{ bos_token }}|{{ messages | length }}", special_tokens={"bos_token": "<s>"}
    )
    assert template.render(MESSAGES, bos_token="<B>") == "<B>|2"


def test_special_tokens_are_copied() -> None:
    tokens = {"bos_token": "<s>"}
    template = ChatTemplate("{{ bos_token }}", special_tokens=tokens)
    tokens["bos_token"] = "changed"
    assert template.render([]) == "<s>"


def test_tojson_default_is_compact_and_not_html_escaped() -> None:
    template = ChatTemplate("{{ value | tojson }}")
    value = {"a": "<b>&'\u00e9", "n": [1, 2]}
    assert template.render([], value=value) == '{"a": "<b>&\'\u00e9", "n": [1, 2]}'


def test_tojson_with_indent() -> None:
    template = ChatTemplate("{{ value | tojson(indent=2) }}")
    assert template.render([], value={"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}'


def test_tojson_keyword_arguments() -> None:
    template = ChatTemplate(
        "{{ value | tojson(separators=(',', ':'), sort_keys=true, ensure_ascii=true) }}"
    )
    assert template.render([], value={"b": "\u00e9", "a": 1}) == '{"a":1,"b":"\\u00e9"}'


def test_strftime_now_is_available() -> None:
    out = ChatTemplate("{{ strftime_now('%Y') }}").render([])
    assert len(out) == 4
    assert out.isdigit()


def test_raise_exception_becomes_invalid_request() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}"
    )
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate(source).render(MESSAGES)
    error = info.value
    assert type(error) is InvalidRequestError
    assert error.message == "chat template error: System role not supported"
    assert error.param == "messages"
    assert error.status == 400


def test_undefined_attribute_error_becomes_invalid_request() -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate("{{ messages[0].nothing.deeper }}").render(MESSAGES)
    assert info.value.param == "messages"
    assert info.value.message.startswith("chat template error: ")
    assert "nothing" in info.value.message


def test_attribute_of_undefined_name_becomes_invalid_request() -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate("{{ undefined_name.attr }}").render(MESSAGES)
    assert info.value.message == "chat template error: 'undefined_name' is undefined"


def test_missing_key_renders_empty() -> None:
    # Like transformers: plain undefined values render as empty strings.
    assert ChatTemplate("[{{ messages[0].name }}]").render(MESSAGES) == "[]"


def test_syntax_error_at_construction() -> None:
    with pytest.raises(ValueError, match=r"^chat template does not compile: "):
        ChatTemplate("{% for m in messages %}{{ m.content }}")
    with pytest.raises(ValueError, match=r"^chat template does not compile: "):
        ChatTemplate("{{ }}")


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{{ raise_exception.__globals__.os }}",
        "{{ (1).__class__.__bases__ }}",
    ],
)
def test_sandbox_blocks_dunder_attribute_access(source: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate(source).render(MESSAGES)
    assert info.value.param == "messages"
    assert "unsafe" in info.value.message


def test_sandbox_is_immutable() -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate("{% set x = messages.append(1) %}").render(MESSAGES)
    assert info.value.message.startswith("chat template error: ")
    assert len(MESSAGES) == 2


def test_rendering_does_not_modify_messages() -> None:
    messages = [{"role": "user", "content": "x"}]
    ChatTemplate(CHATML).render(messages)
    assert messages == [{"role": "user", "content": "x"}]


# --- input preparation and environment, as apply_chat_template does them ---


def test_keys_set_to_none_are_dropped() -> None:
    source = "{% for m in messages %}{{ m.content is defined }},{{ m | length }};{% endfor %}"
    messages = [{"role": "assistant", "content": None, "tool_calls": None}]
    assert ChatTemplate(source).render(messages) == "False,1;"
    assert messages == [{"role": "assistant", "content": None, "tool_calls": None}]


def test_reasoning_is_offered_under_both_names() -> None:
    source = "{% for m in messages %}{{ m | tojson }}{% endfor %}"
    out = ChatTemplate(source).render([{"role": "assistant", "content": "x", "reasoning": "r"}])
    assert out == (
        '{"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r",'
        ' "reasoning_content": "r"}'
    )


def test_documents_reach_the_template() -> None:
    source = "{% for d in documents or [] %}[{{ d.title }}]{% endfor %}"
    template = ChatTemplate(source)
    assert template.render(MESSAGES, documents=[{"title": "A"}, {"title": "B"}]) == "[A][B]"
    assert template.render(MESSAGES) == ""


def test_tool_use_template_only_with_tools() -> None:
    template = ChatTemplate("plain", tool_use="{{ tools | length }} tools")
    assert template.render(MESSAGES) == "plain"
    assert template.render(MESSAGES, tools=[]) == "0 tools"
    assert template.tool_use_source == "{{ tools | length }} tools"


def test_strftime_now_reads_the_given_clock() -> None:
    clock = lambda: datetime(2024, 7, 26, 9, 5)  # noqa: E731
    out = ChatTemplate("{{ strftime_now('%d %b %Y %H:%M') }}", clock=clock).render([])
    assert out == "26 Jul 2024 09:05"


def test_dict_global() -> None:
    source = "{{ dict(a=1) | tojson }}{{ dict.fromkeys(['k']) | tojson }}"
    assert ChatTemplate(source).render([]) == '{"a": 1}{"k": null}'


@pytest.mark.parametrize(
    "source",
    ["{% set ns = namespace(_x=1) %}", "{% set ns = namespace(x=1) %}{% set ns.__dict__ = 1 %}"],
)
def test_namespaces_refuse_private_names(source: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate(source).render([])
    assert "underscore-prefixed attributes" in info.value.message


def test_python_errors_in_a_template_are_client_errors() -> None:
    source = "{{ 'text: ' + messages[0].content }}"
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate(source).render([{"role": "user", "content": [{"type": "text", "text": "x"}]}])
    assert info.value.message == (
        'chat template error: TypeError: can only concatenate str (not "list") to str'
    )
    assert info.value.status == 400


def test_a_message_that_is_not_an_object() -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate(CHATML).render(["hello"])  # type: ignore[list-item]
    assert info.value.message == "chat messages must be objects, got str"


def test_plain_data_keeps_json_and_replaces_the_rest() -> None:
    @dataclass
    class Point:
        x: int

    value = {"a": (1, 2.5), "b": [True, None], "p": Point(3), "f": print}
    assert plain_data(value) == {
        "a": (1, 2.5),
        "b": [True, None],
        "p": {"x": 3},
        "f": "<builtin_function_or_method>",
    }


def test_plain_data_copies_and_turns_subclasses_into_their_json_type() -> None:
    class Text(str):
        pass

    class Number(int):
        pass

    inner = {"k": [Text("t"), Number(4), 1.5, None]}
    value = {Text("key"): inner, "list": [inner], "n": Number(2)}
    plain = plain_data(value)
    assert plain == {"key": inner, "list": [inner], "n": 2}
    assert plain["key"] is not inner and plain["list"][0] is not inner  # copies, not views
    kinds = {type(k) for k in plain} | {type(x) for x in plain["key"]["k"]} | {type(plain["n"])}
    assert kinds == {str, int, float, type(None)}


def test_a_message_loses_its_none_fields_and_only_at_its_top() -> None:
    from realtime.model.template import prepare_messages

    (message,) = prepare_messages([{"role": "user", "content": "hi", "name": None, "x": [None]}])
    assert message == {"role": "user", "content": "hi", "x": [None]}
