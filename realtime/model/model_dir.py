"""Load what the server needs to know about a model from a Hugging Face model directory.

A model directory spreads one model's chat behaviour over several files:
tokenizer.json (the tokenizer), tokenizer_config.json (special tokens, the chat
template), chat_template.jinja / chat_template.json / additional_chat_templates/
(templates that win over tokenizer_config's, as in transformers),
generation_config.json (every EOS id, default sampling) and config.json (the
context length). `load_model_dir` reads them once and fails with one error naming
the file at fault, so a bad download is diagnosed at startup, not mid-request.

The file reading is the thin `load_model_dir`; the `_parse_*`/`_pick_*` helpers
are pure functions of the decoded JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from realtime.model.hf_tokenizer import HFTokenizer
from realtime.model.info import GenerationDefaults, ModelInfo
from realtime.model.template import ChatTemplate

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
TEMPLATE_JINJA = "chat_template.jinja"
TEMPLATE_JSON = "chat_template.json"
TEMPLATE_DIR = "additional_chat_templates"

#: config.json fields that bound the context, as different architectures name it.
_CONTEXT_FIELDS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
    "n_ctx",
)
#: tokenizer_config's "no limit" placeholder (transformers' VERY_LARGE_INTEGER).
_UNBOUNDED = 10**29


class ModelDirError(ValueError):
    """A model directory file is missing or broken; the message names the file."""


@dataclass(frozen=True, eq=False)
class ModelFiles:
    """Everything the server reads from a model directory (the weights are the engine's)."""

    path: Path
    name: str
    tokenizer: HFTokenizer
    chat_template: ChatTemplate
    eos_token_ids: frozenset[int]
    bos_token_id: int | None
    context_length: int
    generation_defaults: GenerationDefaults
    config: dict[str, Any] = field(repr=False)
    #: named special tokens as the template sees them (bos_token, eos_token, ...)
    special_tokens: Mapping[str, str] = field(default_factory=dict)

    def model_info(self, *, name: str | None = None, owned_by: str = "realtime") -> ModelInfo:
        """The engine-facing description (served under `name`, default the directory's)."""
        return ModelInfo(
            name=name or self.name,
            context_length=self.context_length,
            tokenizer=self.tokenizer,
            chat_template=self.chat_template,
            owned_by=owned_by,
            vocab_size=self.tokenizer.vocab_size,
            generation_defaults=self.generation_defaults,
        )


# --- reading files ---


def _read_text(path: Path, label: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelDirError(f"{label}: not found in {path.parent}") from None
    except UnicodeDecodeError:
        raise ModelDirError(f"{label}: not UTF-8 text") from None
    except OSError as exc:
        raise ModelDirError(f"{label}: cannot be read ({exc.strerror or exc})") from None


def _parse_json(text: str, label: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelDirError(
            f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


def _read_object(directory: Path, name: str, *, required: bool) -> dict[str, Any]:
    path = directory / name
    if not required and not path.exists():
        return {}
    value = _parse_json(_read_text(path, name), name)
    if not isinstance(value, dict):
        raise ModelDirError(f"{name}: expected a JSON object, got {type(value).__name__}")
    return value


def _load_tokenizer(directory: Path) -> Tokenizer:
    text = _read_text(directory / TOKENIZER, TOKENIZER)
    try:
        return Tokenizer.from_str(text)
    except Exception as exc:
        _parse_json(text, TOKENIZER)  # a syntax error gets its line number
        raise ModelDirError(f"{TOKENIZER}: the tokenizers library cannot load it: {exc}") from None


def _read_template_files(directory: Path) -> dict[str, tuple[str, str]]:
    """Templates from chat_template.jinja and additional_chat_templates/*.jinja."""
    found: dict[str, tuple[str, str]] = {}
    if (directory / TEMPLATE_JINJA).exists():
        found["default"] = (_read_text(directory / TEMPLATE_JINJA, TEMPLATE_JINJA), TEMPLATE_JINJA)
    extra = directory / TEMPLATE_DIR
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            label = f"{TEMPLATE_DIR}/{path.name}"
            found[path.name.removesuffix(".jinja")] = (_read_text(path, label), label)
    return found


# --- pure parsing ---


def _parse_templates(value: Any, label: str) -> dict[str, tuple[str, str]]:
    """A `chat_template` entry: None, a string, or a list of {name, template}."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": (value, label)}
    if isinstance(value, list):
        named: dict[str, tuple[str, str]] = {}
        for entry in value:
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("name"), str)
                and isinstance(entry.get("template"), str)
            ):
                raise ModelDirError(
                    f"{label}: chat_template list entries must be {{name, template}} strings"
                )
            named[entry["name"]] = (entry["template"], label)
        return named
    raise ModelDirError(f"{label}: chat_template must be a string or a list of named templates")


def _token_content(value: Any) -> str | None:
    """A special token given as a string or as an AddedToken object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _parse_special_tokens(
    tokenizer_config: Mapping[str, Any], special_tokens_map: Mapping[str, Any]
) -> dict[str, str]:
    """The named tokens transformers passes to templates (every `*_token` string)."""
    merged = dict(tokenizer_config)
    if "added_tokens_decoder" not in tokenizer_config:
        # transformers reads the legacy map (over the config) only for old configs
        merged.update(special_tokens_map)
    tokens: dict[str, str] = {}
    for key, value in merged.items():
        content = _token_content(value)
        if key.endswith("_token") and content is not None:
            tokens[key] = content
    extra = merged.get("extra_special_tokens")
    if isinstance(extra, dict):
        for key, value in extra.items():
            content = _token_content(value)
            if content is not None:
                tokens[str(key)] = content
    return tokens


def _ids(value: Any, label: str, key: str) -> list[int]:
    """An id field that may be absent, one id or a list of ids."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
        raise ModelDirError(f"{label}: {key} must be a token id or a list of token ids")
    return list(items)


def _sections(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """config.json and, for multimodal models, its text model's section."""
    text = config.get("text_config")
    return [config, text] if isinstance(text, dict) else [config]


def _parse_context_length(config: Mapping[str, Any], tokenizer_config: Mapping[str, Any]) -> int:
    found = [
        value
        for section in _sections(config)
        for key in _CONTEXT_FIELDS
        if isinstance(value := section.get(key), int) and not isinstance(value, bool) and value > 0
    ]
    if found:
        return min(found)
    limit = tokenizer_config.get("model_max_length")
    if isinstance(limit, (int, float)) and 0 < limit < _UNBOUNDED:
        return int(limit)
    raise ModelDirError(
        f"{CONFIG}: no context length (max_position_embeddings or similar), and"
        f" {TOKENIZER_CONFIG} has no model_max_length"
    )


def _parse_generation_defaults(generation: Mapping[str, Any]) -> GenerationDefaults:
    values: dict[str, Any] = {}
    for key, kind in (
        ("temperature", float),
        ("top_p", float),
        ("top_k", int),
        ("min_p", float),
        ("repetition_penalty", float),
    ):
        value = generation.get(key)
        if value is None:
            continue
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not numeric or (kind is int and not isinstance(value, int)):
            raise ModelDirError(f"{GENERATION_CONFIG}: {key} must be a {kind.__name__}")
        values[key] = kind(value)
    return GenerationDefaults(**values)


def _token_id(tokenizer: Tokenizer, token: str, key: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ModelDirError(f"{TOKENIZER_CONFIG}: {key} {token!r} is not a token in {TOKENIZER}")
    return int(token_id)


# --- choosing the template ---


def _pick_template(
    available: dict[str, tuple[str, str]], override: str | None
) -> tuple[str, str, str | None]:
    """(source, where it came from, tool_use source or None)."""
    if override is not None:
        if override in available:
            source, origin = available[override]
            return source, origin, None
        return _template_from_argument(override, sorted(available))
    if not available:
        raise ModelDirError(
            f"{TOKENIZER_CONFIG}: no chat_template (and no {TEMPLATE_JINJA});"
            " this looks like a base model: pass a chat template"
        )
    tool_use = available.get("tool_use")
    if "default" in available:
        source, origin = available["default"]
    elif len(available) == 1 or set(available) == {"tool_use"}:
        source, origin = next(iter(available.values()))
    else:
        names = ", ".join(sorted(available))
        origin = next(iter(available.values()))[1]
        raise ModelDirError(
            f"{origin}: several chat templates ({names}) and none named 'default'; choose one"
        )
    return source, origin, tool_use[0] if tool_use else None


def _template_from_argument(value: str, names: list[str]) -> tuple[str, str, str | None]:
    """A chat template given by the operator: a file path or the template itself."""
    path = Path(value)
    try:
        is_file = path.is_file()
    except (OSError, ValueError):  # an inline template too long or odd to be a path
        is_file = False
    if is_file:
        return _read_text(path, str(path)), str(path), None
    if "{{" in value or "{%" in value:
        return value, "the chat template given", None
    known = f" (this model has: {', '.join(names)})" if names else ""
    raise ModelDirError(
        f"chat template {value!r}: not a file, not a template name{known}, and not jinja"
    )


# --- the entry point ---


def load_model_dir(path: str | Path, *, chat_template: str | None = None) -> ModelFiles:
    """Read a model directory. `chat_template` overrides the model's template: a name
    of one of its templates, a file path, or the template text itself."""
    directory = Path(path).resolve()
    if not directory.is_dir():
        raise ModelDirError(f"{path}: not a directory")
    config = _read_object(directory, CONFIG, required=True)
    tokenizer_config = _read_object(directory, TOKENIZER_CONFIG, required=True)
    generation = _read_object(directory, GENERATION_CONFIG, required=False)
    special_map = _read_object(directory, SPECIAL_TOKENS_MAP, required=False)
    backend = _load_tokenizer(directory)

    available = _read_template_files(directory)
    if not available:
        legacy = _read_object(directory, TEMPLATE_JSON, required=False)
        available = _parse_templates(legacy.get("chat_template"), TEMPLATE_JSON)
    if not available:
        available = _parse_templates(tokenizer_config.get("chat_template"), TOKENIZER_CONFIG)
    source, origin, tool_use = _pick_template(available, chat_template)

    special_tokens = _parse_special_tokens(tokenizer_config, special_map)
    try:
        template = ChatTemplate(source, special_tokens, tool_use=tool_use)
    except ValueError as exc:
        raise ModelDirError(f"{origin}: {exc}") from None

    eos = set(_ids(generation.get("eos_token_id"), GENERATION_CONFIG, "eos_token_id"))
    for section in _sections(config):
        eos.update(_ids(section.get("eos_token_id"), CONFIG, "eos_token_id"))
    if "eos_token" in special_tokens:
        eos.add(_token_id(backend, special_tokens["eos_token"], "eos_token"))
    if "bos_token" in special_tokens:
        bos: int | None = _token_id(backend, special_tokens["bos_token"], "bos_token")
    else:
        fallback = _ids(generation.get("bos_token_id"), GENERATION_CONFIG, "bos_token_id")
        fallback = fallback or _ids(config.get("bos_token_id"), CONFIG, "bos_token_id")
        bos = fallback[0] if fallback else None

    tokenizer = HFTokenizer(backend, eos_token_ids=eos, bos_token_id=bos)
    return ModelFiles(
        path=directory,
        name=directory.name,
        tokenizer=tokenizer,
        chat_template=template,
        eos_token_ids=frozenset(eos),
        bos_token_id=bos,
        context_length=_parse_context_length(config, tokenizer_config),
        generation_defaults=_parse_generation_defaults(generation),
        config=config,
        special_tokens=special_tokens,
    )
