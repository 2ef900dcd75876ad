"""ChatTemplate renders exactly as transformers' apply_chat_template, byte for byte.

Every template of the corpus in tests/model/templates/ (written for these tests in
the styles of the major model families) is rendered in every scenario below, with
and without the generation prompt, by both, and the strings must be identical.
When transformers raises, we must raise InvalidRequestError with the same message.
The tiny model's own templates are compared down to the token ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import pytest

from realtime.model.model_dir import load_model_dir
from realtime.model.template import ChatTemplate
from realtime.protocol.errors import InvalidRequestError
from realtime.testing.tiny_model import train_tokenizer

pytest_plugins = ["tests.model_fixtures"]

TEMPLATES = Path(__file__).parent / "templates"

#: The special tokens each family's tokenizer defines (rendered as template variables).
SPECIAL_TOKENS: dict[str, dict[str, str]] = {
    "chatml_qwen": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "deepseek_r1": {
        "bos_token": "<｜begin▁of▁sentence｜>",  # noqa: RUF001 - DeepSeek spells it so
        "eos_token": "<｜end▁of▁sentence｜>",  # noqa: RUF001
    },
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "grounded": {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>"},
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.\nUse it for any weather question.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "filters": {
                    "type": "object",
                    "properties": {"lang": {"type": "string"}, "max": {"type": "integer"}},
                },
            },
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any = None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **extra}


def system(content: Any) -> dict[str, Any]:
    return {"role": "system", "content": content}


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def parts(*texts: str, image: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "text", "text": text} for text in texts]
    if image:
        out.insert(1, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})
    return out


@dataclass
class Scenario:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    documents: list[dict[str, Any]] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


PARIS = call("call00001", "get_weather", {"city": "Paris", "unit": "celsius"})
SCENARIOS: dict[str, Scenario] = {
    "user": Scenario([user("Hello there")]),
    "system": Scenario([system("You are terse."), user("Hi")]),
    "multi_turn": Scenario(
        [system("Be kind."), user("Hi"), assistant("Hello! How can I help?"), user("A joke?")]
    ),
    "no_system_multi_turn": Scenario([user("Hi"), assistant("Hey."), user("Bye")]),
    "content_parts": Scenario(
        [
            system(parts("Be brief.", "Be exact.")),
            user(parts("Look at ", "this:", image=True)),
            assistant("A cat."),
            user(parts("  And now?  ")),
        ]
    ),
    "unicode_and_markup": Scenario(
        [system("Réponds en français."), user('Grüße 你好 🚀 "quoted" <b>&amp;</b>\n  indented')]
    ),
    "tools": Scenario([system("Use tools."), user("Weather in Paris?")], tools=TOOLS),
    "tools_without_system": Scenario([user("Search for cats")], tools=TOOLS),
    "empty_tool_list": Scenario([user("Hi")], tools=[]),
    "tool_round_trip": Scenario(
        [
            system("Use tools."),
            user("Weather in Paris?"),
            assistant("", tool_calls=[PARIS]),
            tool("call00001", '{"temperature": 21, "sky": "clear"}'),
            assistant("It is 21 °C and clear."),
            user("And tomorrow?"),
        ],
        tools=TOOLS,
    ),
    "tool_arguments_as_json_string": Scenario(
        [
            user("Find cats"),
            assistant(None, tool_calls=[call("abcDEF123", "search", '{"query": "cats"}')]),
            tool("abcDEF123", "3 results"),
        ],
        tools=TOOLS,
    ),
    "parallel_tool_calls": Scenario(
        [
            user("Paris and Rome?"),
            assistant(
                "Checking both.",
                tool_calls=[PARIS, call("call00002", "get_weather", {"city": "Rome"})],
            ),
            tool("call00001", "21"),
            tool("call00002", "25"),
            assistant("Paris 21, Rome 25."),
        ],
        tools=TOOLS,
    ),
    "reasoning": Scenario(
        [
            user("2+2?"),
            assistant("Four.", reasoning_content="Two plus two."),
            user("3+2?"),
            assistant("<think>\nThree plus two.\n</think>\n\nFive."),
        ]
    ),
    "reasoning_under_another_name": Scenario([user("Why?"), assistant("So.", reasoning="Cause.")]),
    "thinking_disabled": Scenario([user("Quick answer")], kwargs={"enable_thinking": False}),
    "thinking_enabled": Scenario([user("Think hard")], kwargs={"enable_thinking": True}),
    "tool_call_id_not_nine_chars": Scenario(
        [user("Weather?"), assistant(None, tool_calls=[call("call_1", "get_weather", {})])],
        tools=TOOLS,
    ),
    "late_system_message": Scenario(
        [user("Hi"), assistant("Hey"), system("Now formal."), user("Ok")]
    ),
    "developer_role": Scenario([{"role": "developer", "content": "Dev rules."}, user("Hi")]),
    "documents": Scenario(
        [user("What is the weather?")],
        documents=[
            {"title": "Paris", "text": "Sunny, 21 °C."},
            {"title": "Zürich", "text": "Rain.", "meta": {"b": 2, "a": "é"}},
        ],
    ),
    "tools_in_system_turn": Scenario(
        [system("Sys."), user("Weather?")], tools=[WEATHER], kwargs={"tools_in_user_message": False}
    ),
}

#: (template, scenario) pairs whose template refuses the conversation, with a part
#: of the template's own message. Every other pair must render.
EXPECTED_ERRORS: dict[tuple[str, str], str] = {
    ("chatml_qwen", "developer_role"): "Unsupported role: developer",
    ("gemma", "developer_role"): "roles must alternate",
    ("gemma", "late_system_message"): "System role not supported",
    ("gemma", "parallel_tool_calls"): "roles must alternate",
    ("gemma", "tool_arguments_as_json_string"): "roles must alternate",
    ("gemma", "tool_round_trip"): "roles must alternate",
    ("llama3", "parallel_tool_calls"): "Only one tool call per assistant turn",
    ("mistral", "developer_role"): "Only user, assistant and tool roles",
    ("mistral", "late_system_message"): "Only user, assistant and tool roles",
    ("mistral", "tool_call_id_not_nine_chars"): "must be 9 alphanumeric characters; got call_1",
}


def template_source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


@cache
def hf_tokenizer(name: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    fast: Any = PreTrainedTokenizerFast
    return fast(tokenizer_object=train_tokenizer(), **SPECIAL_TOKENS[name])


def render_both(
    name: str, scenario: Scenario, add_generation_prompt: bool
) -> tuple[str | Exception, str | InvalidRequestError]:
    source = template_source(name)
    kwargs = {"date_string": "26 Jul 2024", **scenario.kwargs}
    theirs: str | Exception
    ours: str | InvalidRequestError
    try:
        theirs = hf_tokenizer(name).apply_chat_template(
            json.loads(json.dumps(scenario.messages)),
            tools=scenario.tools,
            documents=scenario.documents,
            chat_template=source,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **kwargs,
        )
    except Exception as exc:
        theirs = exc
    try:
        ours = ChatTemplate(source, SPECIAL_TOKENS[name]).render(
            scenario.messages,
            tools=scenario.tools,
            documents=scenario.documents,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
    except InvalidRequestError as exc:
        ours = exc
    return theirs, ours


def message_for(exc: Exception) -> str:
    if isinstance(exc, jinja2.TemplateError):
        return f"chat template error: {exc}"
    return f"chat template error: {type(exc).__name__}: {exc}"


def test_the_corpus_has_every_family() -> None:
    assert {path.stem for path in TEMPLATES.glob("*.jinja")} == set(SPECIAL_TOKENS)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("name", sorted(SPECIAL_TOKENS))
def test_parity_with_transformers(name: str, scenario: str) -> None:
    expected_error = EXPECTED_ERRORS.get((name, scenario))
    for add_generation_prompt in (True, False):
        theirs, ours = render_both(name, SCENARIOS[scenario], add_generation_prompt)
        if expected_error is None:
            assert isinstance(theirs, str), theirs
            assert ours == theirs
            assert theirs
        else:
            assert isinstance(theirs, jinja2.TemplateError)
            assert expected_error in str(theirs)
            assert isinstance(ours, InvalidRequestError)
            assert ours.message == message_for(theirs)


def test_generation_prompt_changes_the_output(tiny_model_dir: Path) -> None:
    # Guards the parity test against a corpus that ignores add_generation_prompt.
    for name in SPECIAL_TOKENS:
        if name == "mistral":  # [INST] prompts end the same way either way
            continue
        with_prompt, _ = render_both(name, SCENARIOS["system"], True)
        without, _ = render_both(name, SCENARIOS["system"], False)
        assert isinstance(with_prompt, str) and isinstance(without, str)
        assert with_prompt.startswith(without)
        assert with_prompt != without


@pytest.mark.parametrize("template", ["chatml", "llama3"])
def test_tiny_model_templates_match_down_to_token_ids(
    tiny_model_factory: Callable[..., Path], template: str
) -> None:
    from transformers import AutoTokenizer

    directory = tiny_model_factory(template=template)
    theirs: Any = AutoTokenizer.from_pretrained(directory)
    files = load_model_dir(directory)
    rendered = 0
    for scenario in SCENARIOS.values():
        for add_generation_prompt in (True, False):
            try:
                text = theirs.apply_chat_template(
                    json.loads(json.dumps(scenario.messages)),
                    tools=scenario.tools,
                    documents=scenario.documents,
                    add_generation_prompt=add_generation_prompt,
                    tokenize=False,
                    **scenario.kwargs,
                )
            except jinja2.TemplateError as exc:
                with pytest.raises(InvalidRequestError) as info:
                    files.chat_template.render(scenario.messages, tools=scenario.tools)
                assert info.value.message == message_for(exc)
                continue
            ours = files.chat_template.render(
                scenario.messages,
                tools=scenario.tools,
                documents=scenario.documents,
                add_generation_prompt=add_generation_prompt,
                **scenario.kwargs,
            )
            assert ours == text
            assert files.tokenizer.encode(ours) == theirs.encode(text, add_special_tokens=False)
            rendered += 1
    assert rendered >= len(SCENARIOS)


def test_strftime_now_uses_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.utils import chat_template_utils

    frozen = datetime(2025, 3, 5, 14, 30)

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> FrozenDatetime:
            return cls.fromtimestamp(frozen.timestamp())

    monkeypatch.setattr(chat_template_utils, "datetime", FrozenDatetime)
    source = template_source("llama3")
    messages = [user("What day is it?")]
    theirs = hf_tokenizer("llama3").apply_chat_template(
        messages, chat_template=source, tokenize=False
    )
    ours = ChatTemplate(source, SPECIAL_TOKENS["llama3"], clock=lambda: frozen).render(
        messages, add_generation_prompt=False
    )
    assert "Today Date: 05 Mar 2025" in theirs
    assert ours == theirs


@pytest.mark.parametrize(
    "source",
    [
        "{{ dict(a=1, b=[2]) | tojson }}|{{ dict.fromkeys(['x', 'y'], 0) | tojson }}",
        "{% set ns = namespace(count=0) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
        "{% endfor %}{{ ns.count }}",
        "{% set ns = namespace(_hidden=1) %}{{ ns._hidden }}",
        "{% set ns = namespace(x=1) %}{% set ns.__class__ = 2 %}{{ ns.x }}",
        "{{ messages[0].content.__class__ }}",
        "{{ {'b': 1, 'a': 'é'} | tojson(indent=2, sort_keys=true, ensure_ascii=true) }}",
        "{{ messages | tojson(separators=(',', ':')) }}",
        "{{ messages[0] | items | list }}{{ messages[0].keys() | list }}",
        "{% for m in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}{{ m.role }}"
        "{% endfor %}",
        "{{ none_given is none }}|{{ absent is defined }}|{{ messages is iterable }}",
        "{{ messages[0].content[::-1] }}|{{ 'a,b'.split(',') }}|{{ ' x '.strip() }}",
        "{{ 1 / 0 }}",
    ],
)
def test_environment_features_match(source: str) -> None:
    messages = [user("Hi"), assistant("Yo", reasoning="why"), user("more")]
    try:
        theirs: str | Exception = hf_tokenizer("chatml_qwen").apply_chat_template(
            messages, chat_template=source, tokenize=False, none_given=None
        )
    except Exception as exc:
        theirs = exc
    try:
        ours: str | Exception = ChatTemplate(source).render(
            messages, add_generation_prompt=False, none_given=None
        )
    except InvalidRequestError as exc:
        ours = exc
    if isinstance(theirs, str):
        assert ours == theirs
    else:
        assert isinstance(ours, InvalidRequestError)
        assert ours.message == message_for(theirs)


def test_a_template_error_is_a_400_with_the_template_message() -> None:
    scenario = SCENARIOS["tool_call_id_not_nine_chars"]
    with pytest.raises(InvalidRequestError) as info:
        ChatTemplate(template_source("mistral"), SPECIAL_TOKENS["mistral"]).render(
            scenario.messages, tools=scenario.tools
        )
    error = info.value
    assert error.message == (
        "chat template error: Tool call ids must be 9 alphanumeric characters; got call_1"
    )
    assert (error.status, error.param) == (400, "messages")


TOKEN_VARIABLES = (
    "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ image_token }}"
)


@pytest.mark.parametrize(
    ("tokenizer_config", "expected"),
    [
        (
            {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
            "<|begin_of_text|>|<|eot_id|>|||",
        ),
        (
            {
                "bos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "special": True},
                "eos_token": "<|im_end|>",
                "pad_token": None,
                "image_token": "<|im_start|>",
            },
            "<|endoftext|>|<|im_end|>|||<|im_start|>",
        ),
        (
            {"eos_token": "<|im_end|>", "extra_special_tokens": {"image_token": "<|eot_id|>"}},
            "|<|im_end|>|||<|eot_id|>",
        ),
    ],
)
def test_special_token_variables_match(
    tmp_path: Path, tokenizer_config: dict[str, Any], expected: str
) -> None:
    from transformers import AutoTokenizer

    directory = tmp_path / "model"
    directory.mkdir()
    train_tokenizer().save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": TOKEN_VARIABLES,
        **tokenizer_config,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (directory / "config.json").write_text('{"max_position_embeddings": 64}', encoding="utf-8")
    messages = [user("x")]
    theirs = AutoTokenizer.from_pretrained(directory).apply_chat_template(messages, tokenize=False)
    ours = load_model_dir(directory).chat_template.render(messages, add_generation_prompt=False)
    assert ours == theirs == expected
