"""load_model_dir: every file variant, and one clear error naming each broken file.

Most tests write a model directory without weights (the loader never reads them),
so they need only the `tokenizers` library; the last ones use the built tiny model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.run import ChatRun
from realtime.engine.base import EngineOutput, EngineRequest
from realtime.model.generation import FinishReason
from realtime.model.info import GenerationDefaults, ModelInfo
from realtime.model.model_dir import ModelDirError, ModelFiles, load_model_dir
from realtime.pipeline import ChatPipeline
from realtime.testing.tiny_model import train_tokenizer

pytest_plugins = ["tests.model_fixtures"]

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    return train_tokenizer().to_str()


@pytest.fixture(scope="module")
def ids() -> dict[str, int]:
    tokenizer = train_tokenizer()
    names = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>")
    found = {name: tokenizer.token_to_id(name) for name in names}
    return {name: token_id for name, token_id in found.items() if token_id is not None}


class Dir:
    """A model directory under construction (no weights: the loader never reads them)."""

    def __init__(self, path: Path, tokenizer_json: str, ids: dict[str, int]):
        self.path = path
        path.mkdir()
        self.write("tokenizer.json", tokenizer_json)
        self.json(
            "config.json", {"max_position_embeddings": 2048, "eos_token_id": ids["<|im_end|>"]}
        )
        self.json(
            "tokenizer_config.json",
            {
                "added_tokens_decoder": {},
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "chat_template": TEMPLATE,
            },
        )

    def write(self, name: str, text: str) -> None:
        (self.path / name).parent.mkdir(parents=True, exist_ok=True)
        (self.path / name).write_text(text, encoding="utf-8")

    def json(self, name: str, value: Any) -> None:
        self.write(name, json.dumps(value, indent=2))

    def update(self, name: str, **changes: Any) -> None:
        value = json.loads((self.path / name).read_text())
        value.update(changes)
        self.json(name, value)

    def load(self, **kwargs: Any) -> ModelFiles:
        return load_model_dir(self.path, **kwargs)

    def error(self, **kwargs: Any) -> str:
        with pytest.raises(ModelDirError) as info:
            load_model_dir(self.path, **kwargs)
        return str(info.value)


@pytest.fixture
def model(tmp_path: Path, tokenizer_json: str, ids: dict[str, int]) -> Dir:
    return Dir(tmp_path / "my-model", tokenizer_json, ids)


# --- what is read ---


def test_minimal_directory(model: Dir, ids: dict[str, int]) -> None:
    files = model.load()
    assert files.path == model.path.resolve()
    assert files.name == "my-model"
    assert files.context_length == 2048
    assert files.eos_token_ids == {ids["<|im_end|>"]}
    assert files.tokenizer.eos_token_ids == files.eos_token_ids
    assert files.bos_token_id is None
    assert files.generation_defaults == GenerationDefaults()
    assert files.special_tokens == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    assert files.chat_template.render(USER, add_generation_prompt=False) == (
        "<|im_start|>user\nhi<|im_end|>\n"
    )
    assert files.config["max_position_embeddings"] == 2048


def test_eos_ids_come_from_all_three_files(model: Dir, ids: dict[str, int]) -> None:
    model.update("config.json", eos_token_id=[ids["<|eot_id|>"]])
    model.json("generation_config.json", {"eos_token_id": [ids["<|endoftext|>"], 7]})
    files = model.load()
    expected = {ids["<|eot_id|>"], ids["<|endoftext|>"], 7, ids["<|im_end|>"]}
    assert files.eos_token_ids == expected
    assert files.tokenizer.eos_token_ids == expected


def test_bos_from_the_tokenizer_config_then_generation_config_then_config(
    model: Dir, ids: dict[str, int]
) -> None:
    model.update("config.json", bos_token_id=1)
    assert model.load().bos_token_id == 1
    model.json("generation_config.json", {"bos_token_id": 2})
    assert model.load().bos_token_id == 2
    model.update("tokenizer_config.json", bos_token="<|begin_of_text|>")
    files = model.load()
    assert files.bos_token_id == ids["<|begin_of_text|>"]
    assert files.tokenizer.bos_token_id == files.bos_token_id


def test_special_tokens_as_added_token_objects(model: Dir) -> None:
    added = {"__type": "AddedToken", "content": "<|begin_of_text|>", "lstrip": False}
    model.update(
        "tokenizer_config.json",
        bos_token=added,
        image_token="<|im_start|>",
        extra_special_tokens={"audio_token": "<|eot_id|>"},
        add_bos_token=True,
        chat_template="{{ bos_token }}|{{ image_token }}|{{ audio_token }}|{{ eos_token }}",
    )
    files = model.load()
    assert files.special_tokens["bos_token"] == "<|begin_of_text|>"
    assert "add_bos_token" not in files.special_tokens
    assert (
        files.chat_template.render(USER) == "<|begin_of_text|>|<|im_start|>|<|eot_id|>|<|im_end|>"
    )


def test_legacy_special_tokens_map(model: Dir) -> None:
    legacy = {"bos_token": {"content": "<|endoftext|>"}, "eos_token": "<|eot_id|>"}
    model.json("special_tokens_map.json", legacy)
    model.update("tokenizer_config.json", chat_template="{{ bos_token }}|{{ eos_token }}")
    # transformers reads the legacy map only when added_tokens_decoder is absent...
    assert model.load().chat_template.render(USER) == "|<|im_end|>"
    config = json.loads((model.path / "tokenizer_config.json").read_text())
    del config["added_tokens_decoder"]
    model.json("tokenizer_config.json", config)
    # ...and then its values win over the config's.
    assert model.load().chat_template.render(USER) == "<|endoftext|>|<|eot_id|>"


def test_eos_token_missing_from_the_vocabulary(model: Dir) -> None:
    model.update("tokenizer_config.json", eos_token="</s>")
    assert (
        model.error() == "tokenizer_config.json: eos_token '</s>' is not a token in tokenizer.json"
    )


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_position_embeddings": 4096}, 4096),
        ({"n_positions": 1024}, 1024),
        ({"max_seq_len": 8192, "seq_length": 2048}, 2048),
        ({"text_config": {"max_position_embeddings": 131072}}, 131072),
    ],
)
def test_context_length_fields(model: Dir, config: dict[str, Any], expected: int) -> None:
    model.json("config.json", config)
    assert model.load().context_length == expected


def test_context_length_falls_back_to_model_max_length(model: Dir) -> None:
    model.json("config.json", {})
    model.update("tokenizer_config.json", model_max_length=1000000000000000019884624838656)
    assert model.error() == (
        "config.json: no context length (max_position_embeddings or similar),"
        " and tokenizer_config.json has no model_max_length"
    )
    model.update("tokenizer_config.json", model_max_length=512)
    assert model.load().context_length == 512


def test_generation_defaults(model: Dir) -> None:
    model.json(
        "generation_config.json",
        {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0, "repetition_penalty": 1.05},
    )
    assert model.load().generation_defaults == GenerationDefaults(0.6, 0.95, 20, 0.0, 1.05)
    model.json("generation_config.json", {"top_k": 0.5})
    assert model.error() == "generation_config.json: top_k must be a int"


# --- which chat template ---


def test_named_templates_pick_default_and_allow_choosing(model: Dir) -> None:
    model.update(
        "tokenizer_config.json",
        chat_template=[
            {"name": "default", "template": "default"},
            {"name": "rag", "template": "rag"},
        ],
    )
    assert model.load().chat_template.render(USER) == "default"
    assert model.load(chat_template="rag").chat_template.render(USER) == "rag"


def test_tool_use_template_is_used_when_tools_are_given(model: Dir) -> None:
    model.update(
        "tokenizer_config.json",
        chat_template=[
            {"name": "default", "template": "plain"},
            {"name": "tool_use", "template": "tools:{{ tools | length }}"},
        ],
    )
    template = model.load().chat_template
    assert template.render(USER) == "plain"
    assert template.render(USER, tools=[{"type": "function"}]) == "tools:1"


def test_several_templates_without_a_default(model: Dir) -> None:
    model.update(
        "tokenizer_config.json",
        chat_template=[{"name": "a", "template": "A"}, {"name": "b", "template": "B"}],
    )
    assert model.error() == (
        "tokenizer_config.json: several chat templates (a, b) and none named 'default'; choose one"
    )
    assert model.load(chat_template="b").chat_template.render(USER) == "B"


def test_template_files_win_over_tokenizer_config(model: Dir) -> None:
    model.json("chat_template.json", {"chat_template": "from json"})
    assert model.load().chat_template.render(USER) == "from json"
    model.write("chat_template.jinja", "from jinja\n")
    assert model.load().chat_template.render(USER) == "from jinja"
    model.write("additional_chat_templates/rag.jinja", "rag file")
    assert model.load(chat_template="rag").chat_template.render(USER) == "rag file"
    assert model.load().chat_template.render(USER) == "from jinja"


def test_override_from_a_file_or_inline(model: Dir, tmp_path: Path) -> None:
    path = tmp_path / "mine.jinja"
    path.write_text("file: {{ messages[0].content }}", encoding="utf-8")
    assert model.load(chat_template=str(path)).chat_template.render(USER) == "file: hi"
    inline = "inline: {{ messages[0].content }}"
    assert model.load(chat_template=inline).chat_template.render(USER) == "inline: hi"
    assert model.error(chat_template="nope") == (
        "chat template 'nope': not a file, not a template name (this model has: default),"
        " and not jinja"
    )


def test_a_base_model_without_template(model: Dir) -> None:
    model.update("tokenizer_config.json", chat_template=None)
    assert model.error().startswith("tokenizer_config.json: no chat_template")
    assert model.load(chat_template="{{ messages[0].content }}").chat_template.render(USER) == "hi"


@pytest.mark.parametrize(
    ("name", "write"),
    [
        (
            "tokenizer_config.json",
            lambda d: d.update("tokenizer_config.json", chat_template="{% if %}"),
        ),
        ("chat_template.jinja", lambda d: d.write("chat_template.jinja", "{{ x ")),
        (
            "chat_template.json",
            lambda d: d.json("chat_template.json", {"chat_template": "{% for %}"}),
        ),
    ],
)
def test_a_template_that_does_not_compile_names_its_file(model: Dir, name: str, write: Any) -> None:
    write(model)
    assert model.error().startswith(f"{name}: chat template does not compile: ")


def test_malformed_template_lists(model: Dir) -> None:
    model.update("tokenizer_config.json", chat_template=[{"name": "default"}])
    assert model.error() == (
        "tokenizer_config.json: chat_template list entries must be {name, template} strings"
    )
    model.update("tokenizer_config.json", chat_template=3)
    assert model.error() == (
        "tokenizer_config.json: chat_template must be a string or a list of named templates"
    )


# --- broken and missing files ---


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "tokenizer.json"])
def test_a_missing_file_is_named(model: Dir, name: str) -> None:
    (model.path / name).unlink()
    assert model.error() == f"{name}: not found in {model.path.resolve()}"


@pytest.mark.parametrize(
    "name",
    [
        "config.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.json",
        "special_tokens_map.json",
    ],
)
def test_invalid_json_gives_the_line(model: Dir, name: str) -> None:
    model.write(name, '{\n  "a": 1,\n  "b": \n}\n')
    assert model.error() == f"{name}: invalid JSON at line 4 column 1: Expecting value"


def test_invalid_tokenizer_json_gives_the_line(model: Dir) -> None:
    model.write("tokenizer.json", '{"version": "1.0",\n"model": nope}')
    assert model.error() == "tokenizer.json: invalid JSON at line 2 column 10: Expecting value"


def test_a_json_file_that_is_not_a_tokenizer(model: Dir) -> None:
    model.json("tokenizer.json", {"version": "1.0"})
    assert model.error().startswith("tokenizer.json: the tokenizers library cannot load it: ")


def test_json_that_is_not_an_object(model: Dir) -> None:
    model.json("config.json", [1, 2])
    assert model.error() == "config.json: expected a JSON object, got list"


def test_a_file_that_is_not_utf8(model: Dir) -> None:
    (model.path / "tokenizer_config.json").write_bytes(b'{"eos_token": "\xff"}')
    assert model.error() == "tokenizer_config.json: not UTF-8 text"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("config.json", {"eos_token_id": "2"}),
        ("generation_config.json", {"eos_token_id": [1, None]}),
    ],
)
def test_bad_token_ids_name_the_file(model: Dir, name: str, value: dict[str, Any]) -> None:
    model.json(name, {"max_position_embeddings": 8, **value})
    assert model.error() == f"{name}: eos_token_id must be a token id or a list of token ids"


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelDirError, match=r"not a directory$"):
        load_model_dir(tmp_path / "absent")


def test_the_error_is_a_value_error() -> None:
    assert issubclass(ModelDirError, ValueError)


# --- the built tiny model through the pipeline ---


def test_the_tiny_model_directory(tiny_model_dir: Path) -> None:
    files = load_model_dir(tiny_model_dir)
    tokenizer = files.tokenizer
    assert files.eos_token_ids == {
        tokenizer.token_to_id("<|im_end|>"),
        tokenizer.token_to_id("<|endoftext|>"),
    }
    assert files.context_length == 4096
    assert files.generation_defaults == GenerationDefaults(0.7, 0.8, 20, None, None)
    info = files.model_info(name="tiny")
    assert isinstance(info, ModelInfo)
    assert (info.name, info.context_length) == ("tiny", 4096)
    assert info.tokenizer is tokenizer
    assert files.model_info().name == tiny_model_dir.name


class ScriptedEngine:
    """Generates a fixed answer token by token, then an EOS id, to drive the pipeline."""

    def __init__(self, info: ModelInfo, answer: list[int]):
        self.info = info
        self.ready = True
        self.unavailable_reason: str | None = None
        self.answer = answer
        self.prompts: list[list[int]] = []

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        self.prompts.append(request.prompt_token_ids)
        for token_id in self.answer[:-1]:
            yield EngineOutput([token_id])
        yield EngineOutput([self.answer[-1]], finish_reason=FinishReason.EOS, stopped_on_token=True)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.mark.anyio
async def test_tokenizer_and_template_work_in_the_chat_pipeline(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    files = load_model_dir(tiny_model_dir)
    tokenizer = files.tokenizer
    text = "Voilà: 你好 🚀 — naïve"
    answer = [*tokenizer.encode(text), tokenizer.token_to_id("<|im_end|>") or 0]
    engine = ScriptedEngine(files.model_info(name="tiny"), answer)
    pipeline = ChatPipeline(engine)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Salut 👋"}]
    request = parse_chat_request({"model": "tiny", "messages": messages, "stream": False})
    result = await ChatRun.prepare(pipeline, request, stream=False).complete()

    expected = AutoTokenizer.from_pretrained(tiny_model_dir).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert engine.prompts == [list(expected)]
    assert result["choices"][0]["message"]["content"] == text
    assert result["usage"]["completion_tokens"] == len(answer)
