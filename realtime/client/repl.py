"""`python -m realtime.client [URL]`: chat with the server over one /v1/realtime socket.

Why it exists: it is the quickest way to feel what the server is for - one
persistent socket, tokens as they are generated, time to first token and decode
speed after every answer - and a worked example of the client library
(`realtime.client`), which it is built on through `RealtimeClientSync`.

How it behaves:

* The conversation lives here; the server keeps nothing between requests. Each
  turn sends the system prompt (if any), every earlier user and assistant turn
  and the new message as one request, always on the same socket.
* Tokens are written as they arrive; reasoning (`delta.reasoning_content`) is
  shown dimmed after a `[reasoning]` label, tool calls as `[tool call] name
  arguments` lines once the answer ends. On a terminal a spinner turns until
  the first token. After each answer a stats line shows the time to first token
  (request sent -> first output) and the decode speed: the
  `usage.completion_tokens` after the first one, over first token ->
  `response.done`. The first token is left out of the rate because its time is
  already the TTFT; counting it would overstate the speed of short answers.
* Input: a line ending in `\\` continues on the next line; a line starting with
  `\"\"\"` opens a block that ends at a line ending with `\"\"\"`. Lines are edited
  with readline; the history is kept in `~/.realtime_history` when the home
  directory is writable (else in memory only; `--no-history` turns it off).
* Commands: `/system [TEXT]`, `/model [NAME]`, `/set [KEY VALUE]`, `/unset KEY`,
  `/save FILE`, `/load FILE`, `/reset`, `/help`, `/exit`. `/reset` keeps the
  system prompt, the model and the settings.
* Ctrl-C while an answer streams sends `response.cancel` for it, waits for its
  terminal frame and prints `[cancelled]`; the socket stays open. The partial
  answer is KEPT as the assistant turn: it is what the user saw, a follow-up
  ("go on", "shorter") refers to it, and it keeps user and assistant turns
  alternating, which many chat templates require. If no text had arrived yet,
  the turn is dropped as if it had never been sent. If the server has not
  confirmed the cancel after a second, another Ctrl-C gives up: the socket is
  closed and the REPL exits with 130.
* A turn answered by an `error` frame prints `error: <message>` and is not added
  to the conversation, so sending the message again retries it.
* Ctrl-C at the prompt discards the line; a second one in a row quits, as do
  `/exit` and Ctrl-D: a normal close (1000) and exit status 0.
* A server restart does not end the REPL. When the socket closes with 1001
  (shutting down), 1012 (restart), 1013, 1014, or drops without a Close frame
  (1006), the client library reconnects with backoff (`RECONNECT`) and the
  REPL prints `[connection lost: ...; reconnecting]`, then `[reconnected]`. The
  conversation lives here, so it is intact on the new socket. A message typed
  while the server is away waits and goes out once the socket is back (a
  spinner turns meanwhile; Ctrl-C cancels it); one refused because the server
  was draining is sent again by the library, since the server never started it.
  An answer the restart cut off is not resent behind the user's back (it may
  have run, and spent tokens): it prints `[interrupted: ...]`, the turn is not
  kept, and the next prompt comes with the message already typed, so Enter
  sends it again (a message of several lines must be pasted again).
* When the server closes the socket for a reason retrying does not fix (1011
  engine unavailable or internal error, 1008, 1000...), or the reconnect gives
  up, the REPL prints the close code and reason
  (`server closed the connection: 1011 engine unavailable: ...`) and exits with
  status 1.
* A server that cannot be reached: `cannot connect to <url>: <why>`, status 1.
* `--session KEY` sends `x-session-affinity: KEY` with the socket's handshake.
  Behind a proxy that routes by it (`deploy/nginx`), the socket opens on the
  replica that holds KEY's conversation (its KV cache), and a reconnect after
  that replica went away opens on the next one on the proxy's ring.
* `--json` is for scripts: each input line (from a pipe or a terminal) is a
  message, every server frame is printed to stdout as one line of JSON, and
  everything else (command answers, errors) goes to stderr, uncoloured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from websockets.exceptions import ConnectionClosed
from websockets.frames import CLOSE_CODE_EXPLANATIONS

from realtime.client.client import (
    DEFAULT_URL,
    describe_connect_error,
    fetch_models,
    models_url,
)
from realtime.client.errors import (
    APIError,
    ConnectError,
    ConnectionClosedError,
    RealtimeClientError,
    RequestInterruptedError,
    describe_close_code,
)
from realtime.client.sync import RealtimeClientSync, SyncChatStream
from realtime.client.terminal import (
    HISTORY_FILE_NAME,
    History,
    InterruptGate,
    Spinner,
    Style,
    default_history_file,
    enable_line_editing,
    input_with_text,
)
from realtime.client.types import ClientEvent, ReconnectPolicy, ToolCall, fold_tool_calls
from realtime.dialects.chat.response import ChatCompletionChunk

__all__ = [
    "DEFAULT_URL",
    "Repl",
    "decode_rate",
    "describe_close",
    "describe_connect_error",
    "format_stats",
    "main",
    "models_url",
]

#: Used when --model is not given and GET /v1/models does not answer.
FALLBACK_MODEL = "echo"
PROMPT = "> "
CONTINUATION_PROMPT = "... "
BLOCK_QUOTE = '"""'

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INTERRUPTED = 130

#: How often the streaming loop looks at the Ctrl-C counter (the cancel latency bound).
POLL_SECONDS = 0.05
#: After connecting: a server that refuses work (engine down) closes right away.
STARTUP_SETTLE_SECONDS = 0.1
#: After an error frame: an error that ends the session is followed by the Close frame.
ERROR_SETTLE_SECONDS = 0.25
#: Ctrl-C presses while a cancel is unconfirmed only abort after this long, so a
#: double-tap does not throw the conversation away.
ABORT_ARM_SECONDS = 1.0

#: Reconnect after a restart or a dropped connection, not after a fault the server
#: closed for (1011: engine unavailable, internal error): retrying does not fix those.
RECONNECT = ReconnectPolicy(retry_on=frozenset({1001, 1006, 1012, 1013, 1014}))

Message = dict[str, Any]
CONVERSATION_ROLES = ("system", "developer", "user", "assistant", "tool")


# --- pure helpers ---


def decode_rate(completion_tokens: int | None, decode_seconds: float | None) -> float | None:
    """Tokens per second after the first token; None when there is nothing to measure."""
    if completion_tokens is None or decode_seconds is None:
        return None
    if completion_tokens < 2 or decode_seconds <= 0:
        return None
    return (completion_tokens - 1) / decode_seconds


def format_stats(
    ttft_seconds: float | None, completion_tokens: int | None, decode_seconds: float | None
) -> str:
    """The line printed after an answer, e.g. `[ttft 52 ms, 19.8 tok/s, 12 tokens]`."""
    parts = [f"ttft {ttft_seconds * 1000:.0f} ms" if ttft_seconds is not None else "ttft -"]
    rate = decode_rate(completion_tokens, decode_seconds)
    parts.append(f"{rate:.1f} tok/s" if rate is not None else "- tok/s")
    if completion_tokens is not None:
        parts.append(f"{completion_tokens} token{'' if completion_tokens == 1 else 's'}")
    return "[" + ", ".join(parts) + "]"


def describe_close(exc: ConnectionClosed) -> str:
    """`1011 engine unavailable: ...`; the code's meaning when the server gave no reason."""
    close = exc.rcvd
    if close is None:
        return "connection lost without a close frame"
    if close.reason:
        return f"{close.code} {close.reason}"
    return f"{close.code} ({CLOSE_CODE_EXPLANATIONS.get(close.code, 'no reason given')})"


def _parse_stop(text: str) -> str | list[str]:
    """`/set stop ###` is one stop string; `/set stop ["a", "b"]` a list."""
    if text.startswith("["):
        value = json.loads(text)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise ValueError('a list of stop strings, e.g. ["###", "END"]')
    return text


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "on", "yes", "1"):
        return True
    if lowered in ("false", "off", "no", "0"):
        return False
    raise ValueError("true or false")


#: The request fields `/set` knows, with how to read their value. Kept to a known
#: list so a typo is refused here instead of failing every later turn with
#: `unknown_field`.
PARAMETERS: dict[str, Callable[[str], Any]] = {
    "temperature": float,
    "top_p": float,
    "max_tokens": int,
    "max_completion_tokens": int,
    "seed": int,
    "presence_penalty": float,
    "frequency_penalty": float,
    "stop": _parse_stop,
    "top_k": int,
    "min_p": float,
    "repetition_penalty": float,
    "min_tokens": int,
    "ignore_eos": _parse_bool,
    "reasoning_effort": str,
}


def parse_parameter(key: str, text: str) -> Any:
    """The typed value of `/set KEY TEXT`; ValueError (with what is expected) otherwise."""
    parser = PARAMETERS.get(key)
    if parser is None:
        raise ValueError(f"unknown parameter {key!r}; known: {', '.join(PARAMETERS)}")
    try:
        return parser(text)
    except ValueError as exc:
        expected = "a number" if parser is float else "an integer" if parser is int else str(exc)
        raise ValueError(f"{key} takes {expected}, not {text!r}") from None


def conversation_document(
    model: str, params: dict[str, Any], messages: list[Message]
) -> dict[str, Any]:
    """What `/save` writes: the messages as they would be sent, plus model and settings."""
    return {"model": model, "params": params, "messages": messages}


def read_conversation(data: Any) -> tuple[list[Message], str | None, dict[str, Any]]:
    """Validate what `/load` read: a saved document or a bare list of messages.

    Returns (messages, model or None, params); ValueError says what is wrong.
    """
    model: str | None = None
    params: dict[str, Any] = {}
    if isinstance(data, dict):
        raw_model = data.get("model")
        if raw_model is not None and not isinstance(raw_model, str):
            raise ValueError("`model` must be a string")
        model = raw_model
        raw_params = data.get("params") or {}
        if not isinstance(raw_params, dict):
            raise ValueError("`params` must be an object")
        for key, value in raw_params.items():
            if key not in PARAMETERS:
                raise ValueError(f"unknown parameter {key!r} in `params`")
            params[key] = value
        data = data.get("messages")
    if not isinstance(data, list):
        raise ValueError("expected a list of messages or an object with `messages`")
    messages: list[Message] = []
    for index, message in enumerate(data):
        if not isinstance(message, dict) or message.get("role") not in CONVERSATION_ROLES:
            raise ValueError(f"message {index} needs a role among {', '.join(CONVERSATION_ROLES)}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ValueError(f"message {index}: content must be text")
        messages.append(dict(message))
    return messages, model, params


def _message_text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class _CancelWatch:
    """Where a turn stands with Ctrl-C: when the cancel went out, presses seen, abort armed."""

    sent_at: float | None = None
    presses: int = 0
    armed: bool = False


class _Aborted(Exception):
    """The user gave up waiting for a cancel to be confirmed."""


class _SessionEnded(Exception):
    """The socket is closed; the REPL reports why and exits with status 1."""

    def __init__(self, description: str):
        super().__init__(description)
        self.description = description


# --- the REPL ---


class Repl:
    def __init__(
        self,
        client: RealtimeClientSync,
        *,
        url: str,
        model: str,
        system: str | None,
        gate: InterruptGate,
        out: TextIO,
        err: TextIO,
        json_mode: bool = False,
        history: History | None = None,
        api_key: str | None = None,
        stdin: TextIO | None = None,
        events: deque[ClientEvent] | None = None,
    ):
        self.client = client
        self.url = url
        self.model = model
        self.system = system
        self.params: dict[str, Any] = {}
        self.turns: list[Message] = []
        self.gate = gate
        self.out = out
        self.err = err
        self.json_mode = json_mode
        self.history = history
        self.api_key = api_key
        self.stdin = stdin or sys.stdin
        self.style = Style(out, enabled=False if json_mode else None)
        self.err_style = Style(err, enabled=False if json_mode else None)
        #: Messages go to stderr in JSON mode so that stdout is only frames.
        self.info = err if json_mode else out
        self._at_line_start = True
        #: Events from the client's thread (connection lost and back, error frames that
        #: end no request).
        self.events: deque[ClientEvent] = events if events is not None else deque()
        #: A message a restart cut off, typed in advance at the next prompt.
        self._offer: str | None = None

    # --- the conversation ---

    def messages(self) -> list[Message]:
        """What the next request sends before the new user message."""
        head: list[Message] = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.turns

    # --- the loop ---

    def run(self) -> int:
        try:
            self._check_session(STARTUP_SETTLE_SECONDS)
            if not self.json_mode:
                self._say(self.style.dim(f"connected to {self.url} (model {self.model})"))
                self._say(
                    self.style.dim(
                        "type a message; Ctrl-C stops an answer, /help lists commands, "
                        "/exit or Ctrl-D quits"
                    )
                )
            return self._loop()
        except _SessionEnded as exc:
            self._end_line()
            self._error(f"server closed the connection: {exc.description}")
            return EXIT_FAILURE
        except _Aborted:
            self._end_line()
            self._error("gave up waiting for the server to confirm the cancel; closing")
            self.client.close()
            return EXIT_INTERRUPTED
        finally:
            if self.history is not None:
                self.history.save()

    def _loop(self) -> int:
        interrupted = False  # the previous prompt ended with Ctrl-C
        while True:
            try:
                text = self._read_message()
            except EOFError:
                if not self.json_mode:
                    self._write("\n")
                return self._quit()
            except KeyboardInterrupt:
                self._write("\n")
                if interrupted:
                    return self._quit()
                interrupted = True
                self._say(self.style.dim("(Ctrl-C again, /exit or Ctrl-D to quit)"))
                continue
            self._at_line_start = True
            interrupted = False
            try:
                if not self._handle(text):
                    return self._quit()
            except KeyboardInterrupt:
                # Landed just outside the streaming window, before anything was sent.
                self._end_line()
                interrupted = True

    def _read_line(self, prompt: str) -> str:
        if self.json_mode:
            line = self.stdin.readline()
            if not line:
                raise EOFError
            return line.rstrip("\r\n")
        offer, self._offer = self._offer, None
        if offer is not None and prompt == PROMPT:
            return input_with_text(prompt, offer)
        return input(prompt)

    def _read_message(self) -> str:
        """One message: a line, `\\`-continued lines, or a `\"\"\"` block."""
        first = self._read_line(PROMPT)
        stripped = first.strip()
        lines: list[str]
        if stripped.startswith(BLOCK_QUOTE):
            rest = stripped[len(BLOCK_QUOTE) :]
            if rest.endswith(BLOCK_QUOTE) and rest:
                return rest[: -len(BLOCK_QUOTE)]
            lines = [rest] if rest else []
            while True:
                line = self._read_line(CONTINUATION_PROMPT)
                if line.rstrip().endswith(BLOCK_QUOTE):
                    lines.append(line.rstrip()[: -len(BLOCK_QUOTE)])
                    break
                lines.append(line)
            count = len(lines) + 1
            text = "\n".join(lines).strip("\n")
        elif first.endswith("\\"):
            lines = [first[:-1]]
            while True:
                line = self._read_line(CONTINUATION_PROMPT)
                if not line.endswith("\\"):
                    lines.append(line)
                    break
                lines.append(line[:-1])
            count = len(lines)
            text = "\n".join(lines)
        else:
            return stripped
        if self.history is not None:
            self.history.replace_last(count, text.replace("\n", " "))
        return text

    def _handle(self, text: str) -> bool:
        """Run one command or chat turn; False means quit."""
        self._print_events()
        if not text.strip():
            return True
        if text.startswith("/"):
            return self._command(text)
        self._turn(text)
        return True

    def _quit(self) -> int:
        self.client.close()  # a normal close: 1000
        return EXIT_OK

    # --- commands ---

    def _command(self, line: str) -> bool:
        command, _, arg = line.strip().partition(" ")
        command = command.lower()
        arg = arg.strip()
        if command in ("/exit", "/quit"):
            return False
        handlers: dict[str, Callable[[str], None]] = {
            "/help": self._cmd_help,
            "/reset": self._cmd_reset,
            "/system": self._cmd_system,
            "/model": self._cmd_model,
            "/set": self._cmd_set,
            "/unset": self._cmd_unset,
            "/save": self._cmd_save,
            "/load": self._cmd_load,
        }
        handler = handlers.get(command)
        if handler is None:
            self._note(f"unknown command {command}; commands: {', '.join(handlers)}, /exit")
        else:
            handler(arg)
        return True

    def _cmd_help(self, arg: str) -> None:
        self._note(
            "/system TEXT  set the system prompt (/system alone clears it)\n"
            "/model NAME   use another model (/model alone lists them)\n"
            "/set KEY VAL  set a request field, e.g. /set temperature 0.2 (/set alone shows them)\n"
            "/unset KEY    drop a request field\n"
            "/save FILE    write the conversation as JSON; /load FILE reads one back\n"
            "/reset        clear the conversation (keeps system prompt, model, settings)\n"
            '/exit         quit; a line ending in \\ continues, """ opens a block',
            dim=False,
        )

    def _cmd_reset(self, arg: str) -> None:
        self.turns = []
        self._note("[conversation cleared]")

    def _cmd_system(self, arg: str) -> None:
        self.system = arg or None
        self._note(f"[system prompt set: {arg}]" if arg else "[system prompt cleared]")

    def _served_models(self) -> list[str] | None:
        try:
            return [card.id for card in fetch_models(self.url, self.api_key)]
        except (OSError, ValueError):
            return None

    def _cmd_model(self, arg: str) -> None:
        served = self._served_models()
        if not arg:
            listing = ", ".join(served) if served else "unknown (GET /v1/models failed)"
            self._note(f"[model {self.model}; served: {listing}]")
            return
        if served is not None and arg not in served:
            self._error(f"unknown model {arg!r}; served: {', '.join(served)}")
            return
        self.model = arg
        self._note(f"[model set to {arg}]")

    def _cmd_set(self, arg: str) -> None:
        if not arg:
            settings = ", ".join(f"{k}={json.dumps(v)}" for k, v in self.params.items())
            self._note(
                f"[model {self.model}; system {json.dumps(self.system)}; "
                f"settings: {settings or 'server defaults'}]"
            )
            return
        key, _, value = arg.partition(" ")
        if not value.strip():
            self._error(f"usage: /set {key} VALUE (or /unset {key})")
            return
        try:
            self.params[key] = parse_parameter(key, value.strip())
        except ValueError as exc:
            self._error(str(exc))
            return
        self._note(f"[{key} = {json.dumps(self.params[key])}]")

    def _cmd_unset(self, arg: str) -> None:
        if self.params.pop(arg, None) is None:
            self._error(f"{arg or '(nothing)'} is not set")
        else:
            self._note(f"[{arg} unset]")

    def _cmd_save(self, arg: str) -> None:
        if not arg:
            self._error("usage: /save FILE")
            return
        path = Path(arg).expanduser()
        document = conversation_document(self.model, self.params, self.messages())
        try:
            path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            self._error(f"cannot save to {path}: {exc.strerror or exc}")
            return
        self._note(f"[saved {len(document['messages'])} messages to {path}]")

    def _cmd_load(self, arg: str) -> None:
        if not arg:
            self._error("usage: /load FILE")
            return
        path = Path(arg).expanduser()
        try:
            messages, model, params = read_conversation(json.loads(path.read_text()))
        except OSError as exc:
            self._error(f"cannot read {path}: {exc.strerror or exc}")
            return
        except ValueError as exc:
            self._error(f"{path} is not a saved conversation: {exc}")
            return
        count = len(messages)  # the system prompt too, as `/save` counts it
        system = None
        if messages and messages[0]["role"] == "system":
            system = _message_text(messages.pop(0))
        self.system, self.turns = system, messages
        if model:
            self.model = model
        self.params = params
        self._note(f"[loaded {count} messages from {path}; model {self.model}]")

    # --- one turn ---

    def _turn(self, text: str) -> None:
        user: Message = {"role": "user", "content": text}
        with self.gate.counting():
            self._check_session(0)
            stream = self.client.chat([*self.messages(), user], model=self.model, **self.params)
            if self.client.state == "open":  # else it waits for the reconnect in the polls
                try:
                    stream.start()
                except RealtimeClientError:
                    pass  # surfaced by the first poll below
            if self.json_mode:
                self._stream_json(stream, user)
            else:
                self._stream_text(stream, user)

    def _watch_interrupts(self, stream: SyncChatStream, watch: _CancelWatch) -> None:
        """Turn Ctrl-C presses into a cancel, and a later one into giving up."""
        if self.gate.count and watch.sent_at is None:
            stream.cancel()
            watch.sent_at = time.monotonic()
            watch.presses = self.gate.count
        elif watch.sent_at is not None:
            if watch.armed and self.gate.count > watch.presses:
                raise _Aborted
            if not watch.armed and time.monotonic() - watch.sent_at > ABORT_ARM_SECONDS:
                watch.armed = True
                watch.presses = self.gate.count
                self._end_line()
                self._say(
                    self.style.dim(
                        "[waiting for the server to confirm the cancel; Ctrl-C again to quit]"
                    )
                )

    def _stream_text(self, stream: SyncChatStream, user: Message) -> None:
        spinner = Spinner(self.out)
        watch = _CancelWatch()
        pieces: list[str] = []
        calls: dict[int, ToolCall] = {}
        in_reasoning = False
        try:
            while True:
                self._watch_interrupts(stream, watch)
                # Notes (connection lost, back) go before the answer, never inside it.
                quiet = not (pieces or calls or in_reasoning)
                if self.events and quiet:
                    spinner.clear()
                    self._print_events()
                try:
                    chunk = stream.poll(POLL_SECONDS)
                except APIError as exc:
                    spinner.clear()
                    self._end_line()
                    self._error(f"error: {exc.message}")
                    self._after_error(exc)
                    return  # the turn is not kept: sending it again retries it
                except ConnectionClosedError as exc:  # RequestInterruptedError included
                    spinner.clear()
                    if self._interrupted(exc, user):
                        return  # not kept; offered again at the next prompt
                    raise _SessionEnded(describe_close_code(exc.code, exc.reason)) from None
                except RealtimeClientError as exc:
                    spinner.clear()
                    self._end_line()
                    self._error(f"error: {exc}")
                    return
                if chunk is None:
                    if stream.finished:
                        break
                    if stream.stream.first_token_at is None:
                        spinner.tick()
                    continue
                if self.events and quiet:
                    spinner.clear()
                    self._print_events()
                in_reasoning = self._render(chunk, spinner, pieces, calls, in_reasoning)
        finally:
            spinner.clear()
        self._finish(stream, user, "".join(pieces), [calls[i] for i in sorted(calls)])

    def _render(
        self,
        chunk: ChatCompletionChunk,
        spinner: Spinner,
        pieces: list[str],
        calls: dict[int, ToolCall],
        in_reasoning: bool,
    ) -> bool:
        """Write one chunk; returns whether the output is now inside reasoning."""
        for choice in chunk.choices:
            delta = choice.delta
            if delta.reasoning_content:
                spinner.clear()
                if not in_reasoning:
                    self._end_line()
                    self._write(self.style.dim("[reasoning] "))
                    in_reasoning = True
                self._write(self.style.dim(delta.reasoning_content))
            if delta.content:
                spinner.clear()
                if in_reasoning:
                    self._end_line()
                    in_reasoning = False
                pieces.append(delta.content)
                self._write(delta.content)
            if delta.tool_calls:
                spinner.clear()
                fold_tool_calls(calls, delta.tool_calls)
        return in_reasoning

    def _stream_json(self, stream: SyncChatStream, user: Message) -> None:
        """Print every frame of the turn as one JSON line; keep the conversation going."""
        watch = _CancelWatch()
        pieces: list[str] = []
        failed: APIError | None = None
        while True:
            self._watch_interrupts(stream, watch)
            self._print_events()
            try:
                frame = stream.poll_frame(POLL_SECONDS)
            except ConnectionClosedError as exc:
                if self._interrupted(exc, user):
                    return
                raise _SessionEnded(describe_close_code(exc.code, exc.reason)) from None
            except RealtimeClientError as exc:
                self._error(f"error: {exc}")
                return
            if frame is None:
                if stream.finished:
                    break
                continue
            self.out.write(json.dumps(frame, ensure_ascii=False, separators=(",", ":")) + "\n")
            self.out.flush()
            for choice in frame.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if isinstance(content, str):
                    pieces.append(content)
        error = stream.stream.error
        if isinstance(error, APIError):
            failed = error
        if failed is not None:
            self._after_error(failed)
            return
        text = "".join(pieces)
        if stream.done is not None and (stream.done.status == "completed" or text):
            self.turns += [user, {"role": "assistant", "content": text}]

    def _interrupted(self, exc: ConnectionClosedError, user: Message) -> bool:
        """A turn cut off by a restart while the client reconnects: say so and offer it again.

        False when the socket is closed for good (the caller reports that and exits).
        """
        if not isinstance(exc, RequestInterruptedError) or exc.code not in RECONNECT.retry_on:
            return False
        self._end_line()
        self._print_events()
        text = str(user["content"])
        retype = self.json_mode or "\n" in text
        how = "send it again to retry" if retype else "press Enter to send it again"
        why = describe_close_code(exc.code, exc.reason)
        self._note(f"[interrupted: {why}; the message was not resent: {how}]")
        if not retype:
            self._offer = text
        return True

    def _after_error(self, exc: APIError) -> None:
        if exc.close_code is not None:
            raise _SessionEnded(describe_close_code(exc.close_code, exc.close_reason or ""))
        self._check_session(
            ERROR_SETTLE_SECONDS if exc.code in ("engine_unavailable", "internal_error") else 0
        )

    def _finish(
        self, stream: SyncChatStream, user: Message, answer: str, calls: list[ToolCall]
    ) -> None:
        self._end_line()
        for call in calls:
            label = f"[tool call {call.id}]" if call.id else "[tool call]"
            self._say(self.style.cyan(f"{label} {call.name} {call.arguments}"))
        assistant: Message = {"role": "assistant", "content": answer}
        if calls:
            assistant["tool_calls"] = [call.as_message_part() for call in calls]
        done = stream.done
        if stream.cancelled:
            self._say(self.style.yellow("[cancelled]"))
            if answer or calls:  # keep what the user saw (see the module docstring)
                self.turns += [user, assistant]
        else:
            if done is not None and done.finish_reason == "length":
                self._say(self.style.dim("[stopped at the token limit]"))
            self.turns += [user, assistant]
        usage = done.usage if done is not None else None
        self._say(
            self.style.dim(
                format_stats(
                    stream.ttft,
                    usage.completion_tokens if usage is not None else None,
                    stream.decode_seconds,
                )
            )
        )

    def _check_session(self, wait: float) -> None:
        """Raise `_SessionEnded` if the socket is (or within `wait` becomes) closed."""
        if self.client.state != "closed" and wait > 0:
            self.client.wait_closed(wait)
        if self.client.state == "closed":
            self._print_events()
            error = self.client.close_error
            if isinstance(error, ConnectionClosedError):
                raise _SessionEnded(describe_close_code(error.code, error.reason))
            raise _SessionEnded(str(error) if error else "closed")

    def _print_events(self) -> None:
        while self.events:
            event = self.events.popleft()
            if event.kind == "lost":
                self._end_line()
                why = describe_close_code(event.code, event.reason)
                self._note(f"[connection lost: {why}; reconnecting]")
            elif event.kind == "open" and event.attempt > 0:
                self._end_line()
                self._note("[reconnected]")
            elif event.kind == "server_error":
                message = getattr(event.error, "message", None) or "error without a message"
                self._end_line()
                self._error(f"error: {message}")

    # --- output ---

    def _write(self, text: str) -> None:
        if not text:
            return
        self.out.write(text)
        self.out.flush()
        self._at_line_start = text.endswith("\n")

    def _say(self, line: str) -> None:
        self._write(line + "\n")

    def _note(self, line: str, *, dim: bool = True) -> None:
        """A command's answer: dimmed on the terminal, on stderr in JSON mode."""
        if self.json_mode:
            self.err.write(line + "\n")
            self.err.flush()
        else:
            self._say(self.style.dim(line) if dim else line)

    def _end_line(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _error(self, line: str) -> None:
        self.out.flush()  # keep the order of stdout and stderr on one terminal
        self.err.write(self.err_style.red(line) + "\n")
        self.err.flush()


# --- entry point ---


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m realtime.client",
        description="Chat with a realtime server over one persistent /v1/realtime WebSocket.",
    )
    parser.add_argument(
        "url", nargs="?", default=DEFAULT_URL, help="the server's socket URL (default %(default)s)"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model name to request (default: the server's, from GET /v1/models, "
        f"else {FALLBACK_MODEL!r})",
    )
    parser.add_argument(
        "--system",
        default=None,
        metavar="TEXT",
        help="a system message to start every conversation with (kept by /reset)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("REALTIME_API_KEY"),
        help="sent as `Authorization: Bearer KEY` (default: $REALTIME_API_KEY)",
    )
    parser.add_argument(
        "--session",
        default=None,
        type=_session_key,
        metavar="KEY",
        help="sent as `x-session-affinity: KEY` with the handshake, so a proxy that routes "
        "by it keeps this conversation on one replica (see docs/howto/run-several-replicas.md)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="for scripts: read one message per input line, print every server frame as JSON",
    )
    parser.add_argument(
        "--no-history",
        action="store_true",
        help=f"do not read or write ~/{HISTORY_FILE_NAME}",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds to wait for the connection (default %(default)s)",
    )
    return parser


#: A session key as the server takes one in a session header: printable ASCII, no spaces.
_SESSION_KEY = re.compile(r"[\x21-\x7e]{1,256}")


def _session_key(value: str) -> str:
    if _SESSION_KEY.fullmatch(value) is None:
        raise argparse.ArgumentTypeError(
            "a session key is 1 to 256 printable ASCII characters, without spaces"
        )
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    gate = InterruptGate()
    gate.install()
    try:
        return _run(args, gate)
    except KeyboardInterrupt:  # while connecting or closing
        sys.stdout.write("\n")
        return EXIT_INTERRUPTED
    finally:
        gate.uninstall()


def _run(args: argparse.Namespace, gate: InterruptGate) -> int:
    url: str = args.url
    events: deque[ClientEvent] = deque()
    client = RealtimeClientSync(
        url,
        api_key=args.api_key,
        reconnect=RECONNECT,  # see the module docstring
        open_timeout=args.connect_timeout,
        on_event=events.append,
        headers={"x-session-affinity": args.session} if args.session else None,
    )
    try:
        client.connect()
    except ConnectError as exc:
        sys.stdout.flush()
        sys.stderr.write(Style(sys.stderr).red(f"cannot connect to {url}: {exc.message}") + "\n")
        return EXIT_FAILURE
    try:
        model = args.model or _discover_model(url, args.api_key) or FALLBACK_MODEL
        history: History | None = None
        if not args.json:
            enable_line_editing()
            if not args.no_history:
                history = History(default_history_file())
                history.load()
        repl = Repl(
            client,
            events=events,
            url=url,
            model=model,
            system=args.system,
            gate=gate,
            out=sys.stdout,
            err=sys.stderr,
            json_mode=args.json,
            history=history,
            api_key=args.api_key,
        )
        return repl.run()
    finally:
        client.close()  # a no-op when already closed


def _discover_model(url: str, api_key: str | None) -> str | None:
    """The server's model name from GET /v1/models, so no --model is needed; None if unknown."""
    try:
        cards = fetch_models(url, api_key)
    except (OSError, ValueError):
        return None
    return cards[0].id if cards else None
