"""Request fields -> the constraint an engine enforces while it samples.

    prepare()    `plan_chat` / `plan_completion` decide what the request asks for
                 (`response_format`, `tool_choice`) and refuse what the engine
                 cannot do, at once and cheaply;
    constrain()  `compile` builds the plan's grammar and compiles it for the served
                 model on a worker thread (a new schema takes milliseconds), before
                 the answer is committed (the HTTP status, the first chunk); the
                 result goes on the engine request.

What each request gets:

* `response_format` `json_object` / `json_schema`: the answer is one JSON value in
  the compact `json.dumps` layout. `strict` changes nothing: the schema is always
  enforced, and a schema the grammar engine cannot enforce is refused.
* `tool_choice` `required` or a named function (with a tool parser): the answer is
  tool calls only, in the parser's markup, each call's arguments valid against its
  tool's schema; `parallel_tool_calls: false` allows exactly one call. A
  `response_format` is checked but has nothing to shape (there is no text answer).
* `tool_choice` `auto` with tools and a `response_format`: the calls, or the JSON
  answer. Without a `response_format`, `auto` is free.
* `tool_choice` `none`: the markers that open a call, where they are single tokens,
  are banned (a `response_format` grammar already excludes them).
* A reasoning block may open any of these while the reasoning parser is on. A
  thinking budget (the Messages API's `budget_tokens`) closes it after that many
  tokens; alone, it is a grammar of its own (the block, then any tokens).

Engines that cannot constrain (echo, scripted) refuse the JSON modes; their
`tool_choice` stays checked on the output only, as it always is
(`ChatOutputParser.tool_choice_violation`, the safety net on every engine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from realtime.chat.reasoning.tags import TagReasoningParser
from realtime.chat.tools.base import ToolSpec
from realtime.chat.tools.grammar import enforceable_parsers, tool_call_grammar, tool_markers_ban
from realtime.chat.tools.output import ChatOutputParser
from realtime.constrain import (
    RESPONSE_FORMAT,
    Constraint,
    ConstraintError,
    ConstraintLimits,
    Reasoning,
    response_format_constraint,
)
from realtime.constrain.json_schema import ANY_OBJECT
from realtime.constrain.priority import lower_priority
from realtime.constrain.thinking import thinking_budget_grammar
from realtime.engine.base import ConstrainingEngine, Engine
from realtime.pipeline.engine_errors import constraint_error, constraint_field
from realtime.protocol.errors import UnsupportedFeatureError
from realtime.protocol.generation_request import CHAT_PATHS, FieldPaths, JsonFormat

if TYPE_CHECKING:  # torch loads only with an engine that constrains
    from realtime.constrain.matcher import CompiledConstraint, ConstraintCompiler

_ENFORCEABLE = frozenset(enforceable_parsers())


@dataclass(frozen=True, slots=True)
class ConstraintPlan:
    """What one request must be constrained to, not yet built: `build` (and each of
    `checks`, compiled first only to validate a field) runs off the event loop."""

    compiler: ConstraintCompiler
    build: Callable[[], Constraint | None]
    checks: tuple[Callable[[], Constraint | None], ...] = ()
    #: Cheap to build and nothing to compile (a ban): no worker thread.
    inline: bool = False
    #: The client's names for the fields a compile error may name (`text.format`...).
    paths: FieldPaths = CHAT_PATHS


class Constraints:
    """The pipeline's half of constrained decoding, for the served model.

    The compiler (and its cache of compiled grammars, shared by every request)
    is made the first time a request needs it, from the engine's
    `grammar_binding`, with the server's limits (`--max-schema-bytes`,
    `--max-schema-depth`, `--grammar-*`), which every spec it builds carries.
    Compiles run one at a time on a thread of their own.
    """

    def __init__(self, engine: Engine, limits: ConstraintLimits | None = None) -> None:
        self.engine = engine
        self.limits = limits or ConstraintLimits()
        self._compiler: ConstraintCompiler | None = None
        # One compile at a time: a client sending a new large schema with every request
        # keeps at most one core busy compiling, not every core the default executor has.
        # At a lower priority than the engine and the event loop, as the mask workers.
        self._pool = ThreadPoolExecutor(
            1, thread_name_prefix="grammar-compile", initializer=lower_priority
        )

    def close(self) -> None:
        """Take no more compiles (one running finishes: it is bounded by the limits)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- deciding, in prepare() ---

    def plan_chat(
        self,
        *,
        response_format: Mapping[str, Any] | None,
        tools: list[ToolSpec],
        tool_parser: str | None,
        output: ChatOutputParser,
        paths: FieldPaths = CHAT_PATHS,
        thinking_budget: int | None = None,
    ) -> ConstraintPlan | None:
        """The plan for a chat request (None: generation is free).

        `response_format` is the field as plain JSON; `output` is the request's
        output parser, which holds its tool choice and whether it reasons; `paths`
        names the client's fields in errors; `thinking_budget` bounds the reasoning
        block in tokens where its markers are single tokens (else it has no effect).
        Raises UnsupportedFeatureError for a JSON mode this engine cannot enforce.
        """
        fmt = _json_mode(response_format)
        choice = output.tool_choice
        calls = choice.demands_call and tool_parser in _ENFORCEABLE
        ban = choice.mode == "none" and tool_parser is not None and fmt is None
        budget = thinking_budget if _reasoning(output) is not None else None
        if fmt is None and not calls and not ban and budget is None:
            return None
        compiler = self._compiler_for(fmt, param=paths.format)
        if compiler is None:
            return None  # tool_choice: checked on the output, as without constraints
        added, limits = compiler.binding.added_tokens, self.limits
        reasoning = _reasoning(output, budget, added)
        checks = (partial(response_format_constraint, fmt, limits=limits),) if fmt else ()
        if calls:
            assert tool_parser is not None
            build: Callable[[], Constraint | None] = partial(
                tool_call_grammar,
                tool_parser,
                tools,
                added_tokens=added,
                function=choice.function,
                parallel=output.parallel_tool_calls,
                reasoning=reasoning,
                limits=limits,
            )
            return ConstraintPlan(compiler, build, checks, paths=paths)
        if fmt is not None:
            parsed_calls = output.tools is not None and tool_parser in _ENFORCEABLE
            if choice.mode == "auto" and parsed_calls:
                assert tool_parser is not None
                build = partial(
                    tool_call_grammar,
                    tool_parser,
                    tools,
                    added_tokens=added,
                    parallel=output.parallel_tool_calls,
                    answer=_answer_schema(fmt),
                    reasoning=reasoning,
                    limits=limits,
                )
                return ConstraintPlan(compiler, build, checks, paths=paths)
            build = partial(
                response_format_constraint,
                fmt,
                limits=limits,
                reasoning=reasoning,
                added_tokens=added,
            )
            return ConstraintPlan(compiler, build, paths=paths)
        ban_spec = tool_markers_ban(tool_parser, added) if ban and tool_parser else None
        if reasoning is not None and reasoning.max_tokens is not None:
            assert isinstance(output.reasoning, TagReasoningParser)  # _reasoning saw to it
            build = partial(
                thinking_budget_grammar,
                reasoning,
                added,
                opening=output.reasoning.start,
                banned=ban_spec.token_ids if ban_spec is not None else (),
            )
            return ConstraintPlan(compiler, build, paths=paths)
        if ban_spec is None:
            return None  # the format's calls start with plain text: nothing to ban
        return ConstraintPlan(compiler, lambda: ban_spec, inline=True, paths=paths)

    def plan_completion(
        self, response_format: Mapping[str, Any] | None, paths: FieldPaths = CHAT_PATHS
    ) -> ConstraintPlan | None:
        """The plan for a text completion: its `response_format` only (None for text)."""
        fmt = _json_mode(response_format)
        if fmt is None:
            return None
        compiler = self._compiler_for(fmt, param=paths.format)
        assert compiler is not None  # _compiler_for refuses a JSON mode without one
        build = partial(
            response_format_constraint,
            fmt,
            limits=self.limits,
            added_tokens=compiler.binding.added_tokens,
        )
        return ConstraintPlan(compiler, build, paths=paths)

    # --- compiling, before the answer is committed ---

    async def compile(self, plan: ConstraintPlan) -> CompiledConstraint | None:
        """Build and compile the plan; InvalidRequestError naming the field at fault."""
        try:
            if plan.inline:
                return _compile(plan)
            return await asyncio.get_running_loop().run_in_executor(self._pool, _compile, plan)
        except ConstraintError as exc:
            exc.param = constraint_field(exc.param, plan.paths)
            raise constraint_error(exc) from None

    # --- the compiler ---

    def _compiler_for(
        self, fmt: Mapping[str, Any] | None, *, param: str = RESPONSE_FORMAT
    ) -> ConstraintCompiler | None:
        """The compiler, or None when the engine cannot constrain: then a JSON mode
        (`fmt`) is refused, since it would otherwise be silently ignored."""
        engine = self.engine
        binding = engine.grammar_binding if isinstance(engine, ConstrainingEngine) else None
        if binding is None:
            if fmt is not None:
                raise UnsupportedFeatureError(
                    f"{param} {fmt.get('type')!r} needs constrained generation, which "
                    f"{_why_not(engine)}",
                    param=param,
                )
            return None
        compiler = self._compiler
        if compiler is None or compiler.binding is not binding:  # first use, or reloaded
            from realtime.constrain.matcher import ConstraintCompiler

            compiler = self._compiler = ConstraintCompiler(binding, self.limits)
        return compiler


def response_format_of(fmt: JsonFormat | None) -> dict[str, object] | None:
    """A request's structured output in the form the constraint layer reads (the chat
    API's `response_format`, as plain JSON)."""
    if fmt is None:
        return None
    if fmt.kind == "json_object":
        return {"type": "json_object"}
    spec: dict[str, object] = {}
    if fmt.name is not None:
        spec["name"] = fmt.name
    if fmt.schema is not None:
        spec["schema"] = fmt.schema
    if fmt.description is not None:
        spec["description"] = fmt.description
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}


def _compile(plan: ConstraintPlan) -> CompiledConstraint | None:
    for check in plan.checks:
        spec = check()
        if spec is not None:
            plan.compiler.compile(spec)
    spec = plan.build()
    return plan.compiler.compile(spec) if spec is not None else None


def _json_mode(response_format: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The field when it asks for JSON; None for none or `text`."""
    if response_format is None or response_format.get("type") in (None, "text"):
        return None
    return response_format


def _answer_schema(fmt: Mapping[str, Any]) -> Mapping[str, Any]:
    """The JSON answer's schema (its shape was checked by `response_format_constraint`)."""
    spec = fmt.get("json_schema")
    if fmt.get("type") == "json_schema" and isinstance(spec, Mapping):
        schema = spec.get("schema")
        if isinstance(schema, Mapping):
            return schema
    return ANY_OBJECT


def _reasoning(
    output: ChatOutputParser, budget: int | None = None, added: Mapping[str, int] | None = None
) -> Reasoning | None:
    """The reasoning block the answer may open with, while the reasoning parser is on;
    bounded by `budget` when both its markers are single added tokens (`added`): a
    budget that ends free text mid-block could not make it spell the end marker."""
    parser = output.reasoning
    if not isinstance(parser, TagReasoningParser) or not parser.enabled:
        return None
    start = None if parser.starts_in_reasoning else parser.start
    one_token = added is not None and parser.start in added and parser.end in added
    return Reasoning(end=parser.end, start=start, max_tokens=budget if one_token else None)


def _why_not(engine: Engine) -> str:
    reason = engine.grammar_unavailable_reason if isinstance(engine, ConstrainingEngine) else None
    if reason is not None:
        return f"this server cannot do: {reason}"
    return (
        f"this engine ({type(engine).__name__}) does not do; "
        "serve a model with the cpu or exllamav2 engine"
    )
