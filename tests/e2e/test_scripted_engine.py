"""The scripted engine: replay order, match branching, limits, cancellation, running out.

Most tests drive `generate` directly (it is an ordinary engine); the last ones go
through a real server to show that running out of script fails only that request.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path

import openai
import pytest

from realtime.client import EngineError as ClientEngineError
from realtime.client import RealtimeClient
from realtime.config import ServerConfig
from realtime.engine.base import EngineOutput, EngineRequest, StopConditions
from realtime.engine.errors import EngineFailure
from realtime.engine.recent import RECENT_REQUESTS
from realtime.engine.registry import create_engine, engine_names
from realtime.engine.scripted import (
    RECENT_PROMPTS,
    SCRIPTED_TEMPLATE,
    ScriptedEngine,
    ScriptError,
    load_script,
)
from realtime.model.generation import FinishReason
from tests.conftest import async_wait_until

pytestmark = pytest.mark.anyio


def request(engine: ScriptedEngine, prompt: str, rid: str = "r", **stop: object) -> EngineRequest:
    ids = engine.info.tokenizer.encode(prompt)
    return EngineRequest(rid, ids, stop=StopConditions(**stop))


async def outputs(engine: ScriptedEngine, prompt: str, **stop: object) -> list[EngineOutput]:
    async with aclosing(engine.generate(request(engine, prompt, **stop))) as stream:
        return [out async for out in stream]


async def reply(engine: ScriptedEngine, prompt: str, **stop: object) -> str:
    ids = [i for out in await outputs(engine, prompt, **stop) for i in out.token_ids]
    return engine.info.tokenizer.decode(ids)


async def test_plain_replies_come_in_order_then_the_script_runs_out():
    engine = ScriptedEngine(["first answer", {"reply": "second answer"}])
    assert await reply(engine, "user: a") == "first answer"
    assert engine.remaining == ["second answer"]
    assert await reply(engine, "user: a") == "second answer"
    with pytest.raises(EngineFailure, match="the script ran out: no reply left after 2 given"):
        await reply(engine, "user: one more")
    assert engine.replies_given == ["first answer", "second answer"]
    assert len(engine.prompts) == 3 and engine.stats.requests_finished == 2


async def test_a_long_running_script_keeps_only_recent_prompts_and_replies():
    """A match entry never runs out: a demo server may answer forever, and must not grow."""
    engine = ScriptedEngine([{"match": "ping", "reply": "pong"}])
    count = RECENT_PROMPTS * 3
    for n in range(count):
        assert await reply(engine, f"user: ping {n}") == "pong"
    assert len(engine.prompts) == len(engine.replies_given) == RECENT_PROMPTS
    assert engine.prompts[-1].endswith(f"ping {count - 1}")
    assert engine.replies_total == count
    assert len(engine.stats.tokens_by_request) <= RECENT_REQUESTS


async def test_match_entries_branch_on_the_newest_message_and_never_run_out():
    engine = ScriptedEngine(
        [
            {"match": "weather", "reply": "call the weather tool"},
            {"match": "sunny", "reply": "it is sunny"},
            {"match": "sun", "reply": "never: 'sunny' starts at the same place and comes first"},
            "a plain fallback",
        ]
    )
    assert await reply(engine, "user: the weather?") == "call the weather tool"
    # Both match; "sunny" is in the later message, so it decides.
    assert await reply(engine, "user: the weather?\ntool: sunny") == "it is sunny"
    assert await reply(engine, "user: the weather?\ntool: sunny") == "it is sunny"
    assert await reply(engine, "user: the weather?") == "call the weather tool"
    assert await reply(engine, "user: something else") == "a plain fallback"
    with pytest.raises(EngineFailure, match="no 'match' entry found in the prompt"):
        await reply(engine, "user: something else")


async def test_replies_stream_one_token_per_step_and_end_on_eos_without_a_token():
    engine = ScriptedEngine(["one two three"])
    outs = await outputs(engine, "user: go")
    assert [len(out.token_ids) for out in outs] == [1, 1, 1, 0]
    assert [out.finish_reason for out in outs] == [None, None, None, FinishReason.EOS]
    assert engine.stats.tokens_generated == 3


async def test_with_a_model_the_reply_ends_on_its_eos_token(tiny_model_dir):
    engine = ScriptedEngine(["Hello there."], model_dir=tiny_model_dir)
    tokenizer = engine.info.tokenizer
    outs = await outputs(engine, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    last = outs[-1]
    assert last.finish_reason == FinishReason.EOS and last.stopped_on_token
    assert tokenizer.token_text(last.token_ids[-1]) == "<|im_end|>"  # tokenizer_config's eos
    assert tokenizer.decode([i for out in outs[:-1] for i in out.token_ids]) == "Hello there."
    assert engine.info.name == "scripted"


async def test_max_tokens_cuts_the_reply():
    engine = ScriptedEngine(["one two three four"])
    outs = await outputs(engine, "user: go", max_tokens=2)
    assert [out.finish_reason for out in outs] == [None, FinishReason.LENGTH]
    assert engine.stats.tokens_by_request["r"] == 2
    assert engine.stats.requests_finished == 1 and engine.stats.active == 0


async def test_a_stop_token_id_ends_the_reply():
    engine = ScriptedEngine(["one two three"])
    stop_id = engine.info.tokenizer.encode(" two")[0]
    outs = await outputs(engine, "user: go", stop_token_ids=[stop_id])
    assert outs[-1].finish_reason == FinishReason.STOP and outs[-1].stopped_on_token
    assert outs[-1].token_ids == [stop_id]


async def test_closing_the_stream_counts_as_cancelled():
    engine = ScriptedEngine(["one two three four five six"])
    async with aclosing(engine.generate(request(engine, "user: go"))) as stream:
        got = [await anext(stream), await anext(stream)]
    assert len(got) == 2
    stats = engine.stats
    assert (stats.requests_cancelled, stats.requests_finished, stats.active) == (1, 0, 0)
    assert stats.tokens_generated == 2


async def test_load_script_from_a_file_and_its_errors(tmp_path: Path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps(["a", {"match": "m", "reply": "b", "comment": "why"}]))
    entries = load_script(path)
    assert [(e.reply, e.match) for e in entries] == [("a", None), ("b", "m")]
    assert ScriptedEngine(str(path)).script == entries
    bad = {
        "not json": "cannot be read",
        "{": "not valid JSON",
        '{"reply": "x"}': "expected a JSON list of replies, got dict",
        "[1]": r"\[0\]: expected a string or an object, got int",
        '["ok", {"mach": "x", "reply": "y"}]': r"\[1\]: unknown keys \['mach'\]",
        '[{"match": "x"}]': "'reply' must be a string",
        '[{"match": "", "reply": "y"}]': "'match' must be a non-empty string",
    }
    for text, message in bad.items():
        target = tmp_path / "missing.json" if text == "not json" else path
        if text != "not json":
            path.write_text(text)
        with pytest.raises(ScriptError, match=message):
            load_script(target)


def test_the_no_model_template_shows_the_whole_conversation():
    engine = ScriptedEngine([])
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    prompt = engine.info.chat_template.render(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
    )
    assert prompt == (
        "tools: f\n"
        "system: be brief\n"
        "user: hi\n"
        'assistant: \n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>\n'
        "tool c1: 42\n"
        "assistant: "
    )
    assert engine.info.chat_template.source == SCRIPTED_TEMPLATE


def test_registered_as_an_engine(tmp_path: Path):
    assert "scripted" in engine_names()
    path = tmp_path / "s.json"
    path.write_text('["hi"]')
    engine = create_engine("scripted", script=str(path), delay=0.01)
    assert isinstance(engine, ScriptedEngine) and engine.delay == 0.01
    with pytest.raises(ValueError, match="--script FILE"):
        create_engine("scripted")


# --- through a server ---


async def test_running_out_fails_only_that_request_on_the_socket(server_factory):
    engine = ScriptedEngine([{"match": "again", "reply": "once more"}])
    server = server_factory(ServerConfig(log_level="warning"), engine)
    async with RealtimeClient(server.ws_url, model="scripted") as client:
        with pytest.raises(ClientEngineError, match="the script ran out"):
            await client.chat([{"role": "user", "content": "something new"}]).text()
        assert await client.chat([{"role": "user", "content": "again"}]).text() == "once more"
    http = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.InternalServerError, match="the script ran out"):
        http.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "something new"}]
        )


async def test_cancel_on_the_socket_stops_the_reply(server_factory):
    engine = ScriptedEngine(["word " * 200], delay=0.005)
    server = server_factory(ServerConfig(log_level="warning"), engine)
    async with RealtimeClient(server.ws_url, model="scripted") as client:
        stream = client.chat([{"role": "user", "content": "go"}])
        async for _ in stream:
            await stream.cancel()
        assert stream.cancelled
        await async_wait_until(lambda: engine.stats.requests_cancelled == 1)
    assert engine.stats.active == 0 and engine.stats.tokens_generated < 200
