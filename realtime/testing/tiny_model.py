"""A deterministic tiny model directory: tests, demos and benchmarks need a real model.

`build_tiny_model(dir)` writes a small random-weight Llama-architecture model in the
Hugging Face layout (config.json, model.safetensors, generation_config.json,
tokenizer.json, tokenizer_config.json with a chat template). Nothing is downloaded:
the byte-level BPE tokenizer is trained on `tiny_model_corpus.txt`, shipped with the
package, and the weights come from `torch.manual_seed(seed)`. The same seed and
template always give byte-identical files, so tests can rely on exact outputs.

    python -m realtime.testing.tiny_model DIR [--seed N] [--template chatml|llama3]
        [--hidden-size N] [--layers N] [--context-length N]

The size options build a larger random model of the same family (benchmarks need a
forward pass that is not dominated by Python overhead); their defaults are the tiny
model's, and leave its files byte-identical.

torch and transformers are imported only when the weights are built, so the
tokenizer half (`train_tokenizer`) works with `tokenizers` alone.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from realtime.engine.install import CPU_INSTALL_HINT

#: Trained BPE vocabulary (byte alphabet + merges), before the added tokens.
BPE_VOCAB_SIZE = 640
#: Added tokens that delimit turns; special, so `skip_special_tokens` hides them.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)
#: Added tokens the client must see (reasoning and tool-call markers), as in Qwen.
CONTROL_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")

CHATML_TEMPLATE = """\
{#- ChatML with tools, tool responses and optional thinking, in the style of Qwen. -#}
{%- macro text(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content | selectattr('type', 'equalto', 'text') -%}
            {{- part.text -}}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role in ['system', 'developer'] -%}
{%- if tools -%}
    {{- '<|im_start|>system\\n' -}}
    {%- if has_system -%}
        {{- text(messages[0].content) + '\\n\\n' -}}
    {%- endif -%}
    {{- '# Tools\\n\\nYou may call one or more functions. ' -}}
    {{- 'Their signatures are inside <tools></tools>:\\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\\n</tools>\\n\\nFor each call, write a JSON object with the name and arguments ' -}}
    {{- 'inside <tool_call></tool_call>:\\n<tool_call>\\n' -}}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\\n' + text(messages[0].content) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for message in messages -%}
    {%- if message.role == 'user' -%}
        {%- set ns.last_user = loop.index0 -%}
    {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set content = text(message.content) -%}
    {%- if message.role in ['system', 'developer'] -%}
        {%- if not loop.first -%}
            {{- raise_exception('The system message must be the first message.') -}}
        {%- endif -%}
    {%- elif message.role == 'user' -%}
        {{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' -}}
    {%- elif message.role == 'assistant' -%}
        {%- set reasoning = '' -%}
        {%- if message.reasoning_content is string -%}
            {%- set reasoning = message.reasoning_content -%}
        {%- elif '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
            {%- set content = content.split('</think>')[-1] -%}
        {%- endif -%}
        {{- '<|im_start|>assistant\\n' -}}
        {%- if loop.index0 > ns.last_user and reasoning -%}
            {{- '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' -}}
        {%- endif -%}
        {{- content.lstrip('\\n') -}}
        {%- for call in message.tool_calls or [] -%}
            {%- set fn = call.function if call.function is defined else call -%}
            {%- if content or not loop.first -%}
                {{- '\\n' -}}
            {%- endif -%}
            {{- '<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' -}}
            {%- if fn.arguments is string -%}
                {{- fn.arguments -}}
            {%- else -%}
                {{- fn.arguments | tojson -}}
            {%- endif -%}
            {{- '}\\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\\n' -}}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\\n' -}}
        {%- endif -%}
    {%- else -%}
        {{- raise_exception('Unexpected message role: ' + message.role) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\\n' -}}
    {%- if enable_thinking is defined and enable_thinking is false -%}
        {{- '<think>\\n\\n</think>\\n\\n' -}}
    {%- endif -%}
{%- endif -%}
"""

LLAMA3_TEMPLATE = """\
{#- Llama 3 headers; tools go into the first user message as JSON. -#}
{%- macro text(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- else -%}
        {{- content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') -}}
    {%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- if messages and messages[0].role == 'system' -%}
    {%- set system = text(messages[0].content) -%}
    {%- set rest = messages[1:] -%}
{%- else -%}
    {%- set system = '' -%}
    {%- set rest = messages -%}
{%- endif -%}
{%- if system or tools -%}
    {{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system + '<|eot_id|>' -}}
{%- endif -%}
{%- for message in rest -%}
    {%- if loop.first and tools and message.role == 'user' -%}
        {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
        {{- 'Answer with a JSON function call ' -}}
        {{- '{"name": function name, "parameters": arguments}. ' -}}
        {{- 'Available functions:\\n\\n' -}}
        {%- for tool in tools -%}
            {{- tool | tojson(indent=4) + '\\n\\n' -}}
        {%- endfor -%}
        {{- text(message.content) + '<|eot_id|>' -}}
    {%- elif message.role == 'assistant' and message.tool_calls -%}
        {%- if message.tool_calls | length != 1 -%}
            {{- raise_exception('This model calls one tool at a time.') -}}
        {%- endif -%}
        {%- set fn = message.tool_calls[0].function -%}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + fn.name + '", "parameters": ' -}}
        {{- (fn.arguments if fn.arguments is string else fn.arguments | tojson) + '}<|eot_id|>' -}}
    {%- else -%}
        {%- set role = 'ipython' if message.role == 'tool' else message.role -%}
        {{- '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' -}}
        {{- text(message.content) | trim -}}
        {{- '<|eot_id|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
{%- endif -%}
"""


@dataclass(frozen=True)
class _Flavour:
    """What differs between template choices: the template and its special tokens."""

    chat_template: str
    bos_token: str | None
    eos_token: str
    #: generation_config.json's eos_token_id list (every token that ends a turn)
    stop_tokens: tuple[str, ...]
    #: config.json's eos_token_id: a single id or a list, as real models vary
    config_eos_as_list: bool
    #: Llama 3's tokenizer.json adds BOS itself when asked for special tokens
    post_processor_bos: bool


FLAVOURS: dict[str, _Flavour] = {
    "chatml": _Flavour(
        chat_template=CHATML_TEMPLATE,
        bos_token=None,
        eos_token="<|im_end|>",
        stop_tokens=("<|im_end|>", "<|endoftext|>"),
        config_eos_as_list=False,
        post_processor_bos=False,
    ),
    "llama3": _Flavour(
        chat_template=LLAMA3_TEMPLATE,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        stop_tokens=("<|eot_id|>", "<|endoftext|>"),
        config_eos_as_list=True,
        post_processor_bos=True,
    ),
}
TEMPLATES = tuple(FLAVOURS)

_ARCHITECTURE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class ModelSize:
    """The size options; the defaults are the tiny model (64 wide, 2 layers, 4k context)."""

    hidden_size: int = 64
    num_layers: int = 2
    #: None: twice the hidden size, as in the tiny model
    intermediate_size: int | None = None
    context_length: int = 4096

    def architecture(self) -> dict[str, Any]:
        if self.hidden_size % _ARCHITECTURE["num_attention_heads"]:
            raise ValueError("hidden_size must be a multiple of 4 (the attention heads)")
        if min(self.hidden_size, self.num_layers, self.context_length) < 1:
            raise ValueError("hidden_size, num_layers and context_length must be positive")
        return {
            **_ARCHITECTURE,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size or 2 * self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "max_position_embeddings": self.context_length,
        }

    @property
    def suffix(self) -> str:
        """A directory-name suffix; empty for the default size (keeps old paths)."""
        if self == ModelSize():
            return ""
        inter = self.intermediate_size or 2 * self.hidden_size
        return f"-h{self.hidden_size}-l{self.num_layers}-i{inter}-c{self.context_length}"


_SAMPLING_DEFAULTS: dict[str, Any] = {
    "do_sample": True,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
}


def corpus_text() -> str:
    """The training text shipped with the package."""
    corpus = resources.files("realtime.testing").joinpath("tiny_model_corpus.txt")
    return corpus.read_text("utf-8")


def train_tokenizer(text: str | None = None) -> Tokenizer:
    """A byte-level BPE tokenizer trained on `text` (the shipped corpus by default).

    Deterministic: the BPE trainer breaks ties by pair, not by hash order. Pairs
    seen only once are never merged (min_frequency=2), so rare characters such as
    most CJK and emoji stay split across several byte tokens.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    corpus = corpus_text() if text is None else text
    tokenizer.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    tokenizer.add_special_tokens([_added(token, special=True) for token in SPECIAL_TOKENS])
    tokenizer.add_tokens([_added(token, special=False) for token in CONTROL_TOKENS])
    return tokenizer


def _added(content: str, *, special: bool) -> AddedToken:
    return AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False)


def _token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    assert token_id is not None, token
    return int(token_id)


def _tokenizer_config(
    tokenizer: Tokenizer, flavour: _Flavour, architecture: dict[str, Any] = _ARCHITECTURE
) -> dict[str, Any]:
    decoder: dict[str, Any] = {}
    for token_id, token in sorted(tokenizer.get_added_tokens_decoder().items()):
        decoder[str(token_id)] = {
            "content": token.content,
            "lstrip": token.lstrip,
            "normalized": token.normalized,
            "rstrip": token.rstrip,
            "single_word": token.single_word,
            "special": token.special,
        }
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": decoder,
        "bos_token": flavour.bos_token,
        "chat_template": flavour.chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": flavour.eos_token,
        "model_max_length": architecture["max_position_embeddings"],
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _save_weights(
    directory: Path,
    tokenizer: Tokenizer,
    flavour: _Flavour,
    seed: int,
    architecture: dict[str, Any] = _ARCHITECTURE,
) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    pad_id = _token_id(tokenizer, "<|endoftext|>")
    bos_id = _token_id(tokenizer, flavour.bos_token or "<|endoftext|>")
    stop_ids = [_token_id(tokenizer, token) for token in flavour.stop_tokens]
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        bos_token_id=bos_id,
        eos_token_id=stop_ids if flavour.config_eos_as_list else stop_ids[0],
        pad_token_id=pad_id,
        **architecture,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        model.save_pretrained(directory, safe_serialization=True)
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
    # Written by hand (over the one derived from config.json) so that it lists
    # every EOS id and carries sampling defaults, as real chat models' files do.
    generation = {"bos_token_id": bos_id, "eos_token_id": stop_ids, "pad_token_id": pad_id}
    _write_json(directory / "generation_config.json", {**generation, **_SAMPLING_DEFAULTS})


def build_tiny_model(
    directory: str | Path,
    *,
    seed: int = 0,
    template: str = "chatml",
    size: ModelSize | None = None,
) -> Path:
    """Write the tiny model (or, with `size`, a larger one) into `directory` and return it."""
    architecture = (size or ModelSize()).architecture()
    if template not in FLAVOURS:
        raise ValueError(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    flavour = FLAVOURS[template]
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    if flavour.post_processor_bos:
        bos = flavour.bos_token or ""
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, _token_id(tokenizer, bos))],
        )
    tokenizer.save(str(target / "tokenizer.json"), pretty=True)
    _write_json(
        target / "tokenizer_config.json", _tokenizer_config(tokenizer, flavour, architecture)
    )
    _save_weights(target, tokenizer, flavour, seed, architecture)
    return target


def cached_tiny_model(
    root: str | Path, *, seed: int = 0, template: str = "chatml", size: ModelSize | None = None
) -> Path:
    """The tiny model under `root`, built once per (seed, template, size) and then reused.

    Built in a scratch directory and renamed into place, so a concurrent or
    interrupted build never leaves a half-written model where a reader looks.
    """
    base = Path(root)
    target = base / f"tiny-{template}-seed{seed}{(size or ModelSize()).suffix}"
    if (target / "model.safetensors").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=base))
    try:
        build_tiny_model(scratch, seed=seed, template=template, size=size)
        try:
            os.replace(scratch, target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m realtime.testing.tiny_model",
        description="Write a small random-weight model directory (deterministic per seed).",
    )
    parser.add_argument("directory", help="where to write the model (created if needed)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--template", choices=TEMPLATES, default="chatml", help="chat template")
    default = ModelSize()
    parser.add_argument("--hidden-size", type=int, default=default.hidden_size)
    parser.add_argument("--layers", type=int, default=default.num_layers)
    parser.add_argument("--context-length", type=int, default=default.context_length)
    args = parser.parse_args(argv)
    size = ModelSize(
        hidden_size=args.hidden_size,
        num_layers=args.layers,
        context_length=args.context_length,
    )
    missing = _missing_weight_libraries()
    if missing:
        print(
            "python -m realtime.testing.tiny_model: writing the weights needs"
            f" {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not"
            f" installed: {CPU_INSTALL_HINT}",
            file=sys.stderr,
        )
        return 1
    target = Path(args.directory)
    path = publish(
        target,
        lambda scratch: build_tiny_model(
            scratch, seed=args.seed, template=args.template, size=size
        ),
    )
    print(path)
    return 0


def _missing_weight_libraries() -> list[str]:
    """torch and transformers, if absent (transformers only looked up: without torch,
    importing it prints a warning of its own)."""
    missing = []
    try:
        importlib.import_module("torch")
    except ImportError:
        missing.append("torch")
    if importlib.util.find_spec("transformers") is None:
        missing.append("transformers")
    return missing


def publish(target: Path, build: Callable[[Path], object]) -> Path:
    """Run `build` in a scratch directory beside `target`, then move its files into `target`.

    A build that fails (an import, a full disk, Ctrl-C) leaves `target` as it was:
    absent, or with its old files, never half-written.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-building-", dir=target.parent))
    try:
        build(scratch)
        if not target.exists():
            os.replace(scratch, target)
        else:
            for path in scratch.iterdir():
                os.replace(path, target / path.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


if __name__ == "__main__":
    raise SystemExit(main())
