"""The issue's check on a real model path: a random-weight tiny model sampled at
temperature 1 under a constraint always produces answers that parse and validate.

The loop is the one the cpu engine runs (mask first, then softmax, then one
draw per token); the server path comes with the wiring.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from realtime.chat.tools import ToolSpec
from realtime.chat.tools.grammar import tool_call_grammar, tool_markers_ban
from realtime.chat.tools.hermes import HermesToolParser
from realtime.constrain import json_object_grammar, json_schema_grammar
from realtime.constrain.matcher import ConstraintCompiler
from realtime.constrain.tokenizer import TokenizerBinding
from realtime.model.model_dir import ModelFiles, load_model_dir
from tests.constrain.decode import ModelSteps, load_model, sample_under

SEEDS = range(6)
TICKET = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "urgent": {"type": "boolean"},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["color", "urgent", "priority"],
    "additionalProperties": False,
}
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "alerts": {"type": "boolean"},
        },
        "required": ["unit", "days"],
        "additionalProperties": False,
    },
)
TIME = ToolSpec(
    "get_time",
    {
        "type": "object",
        "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}},
        "required": ["zone"],
        "additionalProperties": False,
    },
)


class Tiny:
    """The tiny model, its files, its binding and a prompt."""

    def __init__(self, directory: Path) -> None:
        self.files: ModelFiles = load_model_dir(directory)
        self.tokenizer = self.files.tokenizer
        width = int(self.files.config["vocab_size"])
        self.binding = TokenizerBinding(
            self.tokenizer.backend, eos_token_ids=self.tokenizer.eos_token_ids, logits_width=width
        )
        self.compiler = ConstraintCompiler(self.binding)
        self.model = load_model(directory)
        self.prompt = self.tokenizer.encode(
            "<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n"
        )

    def sample(self, constraint: Any, seed: int, max_tokens: int) -> tuple[str, bool]:
        matcher = self.compiler.start(constraint) if constraint is not None else None
        sampled = sample_under(
            ModelSteps(self.model, self.prompt),
            matcher,
            eos_ids=self.binding.eos_token_ids,
            seed=seed,
            max_tokens=max_tokens,
        )
        ids = sampled.token_ids[:-1] if sampled.finished else sampled.token_ids
        return self.tokenizer.decode(ids, skip_special_tokens=False), sampled.finished


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> Tiny:
    return Tiny(tiny_model_dir)


def test_unconstrained_answers_of_the_random_model_are_not_json(tiny: Tiny) -> None:
    """The control: without the mask the same loop does not produce the schema."""
    text, _ = tiny.sample(None, seed=0, max_tokens=30)
    with pytest.raises(ValueError):
        json.loads(text)


@pytest.mark.parametrize("seed", SEEDS)
def test_json_schema_answers_parse_and_validate(tiny: Tiny, seed: int) -> None:
    text, finished = tiny.sample(json_schema_grammar(TICKET), seed, max_tokens=200)
    assert finished, text
    jsonschema.validate(json.loads(text), TICKET)


def test_the_six_answers_are_not_all_the_same(tiny: Tiny) -> None:
    answers = {tiny.sample(json_schema_grammar(TICKET), seed, max_tokens=200)[0] for seed in SEEDS}
    assert len(answers) > 1


@pytest.mark.parametrize("seed", SEEDS)
def test_json_object_answers_parse_as_objects(tiny: Tiny, seed: int) -> None:
    text, finished = tiny.sample(json_object_grammar(), seed, max_tokens=1500)
    assert finished, f"{len(text)} characters without an end"
    assert isinstance(json.loads(text), dict)


def test_max_tokens_inside_an_answer_leaves_the_partial_text(tiny: Tiny) -> None:
    """Cut off inside the object: the text so far is kept (the wiring reports
    finish_reason "length"); it is a prefix of a valid answer, not an answer."""
    full, finished = tiny.sample(json_schema_grammar(TICKET), seed=3, max_tokens=200)
    partial, cut_finished = tiny.sample(json_schema_grammar(TICKET), seed=3, max_tokens=8)
    assert finished and not cut_finished
    assert full.startswith(partial) and len(partial) < len(full)
    with pytest.raises(ValueError):
        json.loads(partial)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("function", [None, "get_weather"])
def test_required_and_named_tool_calls_in_hermes_markup_parse_and_validate(
    tiny: Tiny, seed: int, function: str | None
) -> None:
    tools = [WEATHER, TIME]
    spec = tool_call_grammar(
        "hermes",
        tools,
        function=function,
        parallel=False,
        added_tokens=tiny.binding.added_tokens,
    )
    text, finished = tiny.sample(spec, seed, max_tokens=300)
    assert finished, text
    parsed = HermesToolParser.parse(text, tools)
    assert parsed.content in (None, ""), parsed.content
    (call,) = parsed.tool_calls
    if function is not None:
        assert call.name == function
    schema = {t.name: t.parameters for t in tools}[call.name]
    jsonschema.validate(json.loads(call.arguments), schema)


def test_tool_choice_none_bans_the_call_marker(tiny: Tiny) -> None:
    """With the marker made likely, it shows up unconstrained and never under the ban."""
    marker = tiny.binding.added_tokens["<tool_call>"]
    ban = tool_markers_ban("hermes", tiny.binding.added_tokens)
    assert ban is not None and ban.token_ids == {marker}

    def biased(generated: Any, steps: ModelSteps) -> torch.Tensor:
        logits = steps(generated).clone()
        logits[marker] += 6.0
        return logits

    for constraint in (None, ban):
        steps = ModelSteps(tiny.model, tiny.prompt)
        matcher = tiny.compiler.start(constraint) if constraint is not None else None
        sampled = sample_under(
            lambda g, s=steps: biased(g, s),
            matcher,
            eos_ids=tiny.binding.eos_token_ids,
            seed=1,
            max_tokens=40,
        )
        assert (marker in sampled.token_ids) == (constraint is None)
