"""Structured logs: one JSON object per line with `--log-format json`, key=value text otherwise.

Code logs events with `event(logger, "ws.close", conn_id=..., code=...)`; the
fields travel in `record.fields`, so both formats show them and the JSON
formatter never has to parse a message. `RedactSecrets` scrubs what must never
reach a log even when someone else writes it: uvicorn's access log prints the
request line, query string included, so a client that put a key in the URL
would otherwise leave it there.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

import orjson

from realtime.protocol.credentials import KEY_SUBPROTOCOL_PREFIXES, is_credential_param

#: A query parameter: separator, name, "=", value. The name is decoded before it is judged.
_QUERY_PARAM = re.compile(r"([?&;])([^=&;\s\"'?#]+)=([^&;\s\"'#]*)")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"']+")
_KEY_SUBPROTOCOL = re.compile(
    "(" + "|".join(re.escape(prefix) for prefix in KEY_SUBPROTOCOL_PREFIXES) + r")[^\s,\"']+"
)
#: Header lines that carry credentials, as debug logs print them ("< authorization: ...").
_CREDENTIAL_HEADER = re.compile(
    r"(?i)((?:proxy-)?authorization|x-api-key|api-key|cookie)(\s*[:=]\s*)[^\r\n\"']+"
)

#: A JSON string member, as debug logs quote frames and bodies: `"api_key": "..."`. Only
#: unmistakable names: `token` and `key` are everyday JSON (logprobs have `token`).
_JSON_MEMBER = re.compile(r'("([^"\\]{1,64})"\s*:\s*")([^"]*)')
_JSON_SECRET_NAMES = frozenset({"apikey", "accesstoken", "authorization"})


def _redact_json_member(match: re.Match[str]) -> str:
    if re.sub(r"[^a-z0-9]", "", match[2].lower()) in _JSON_SECRET_NAMES:
        return f"{match[1]}[redacted]"
    return match[0]


def _redact_query_param(match: re.Match[str]) -> str:
    if is_credential_param(match[2]):
        return f"{match[1]}{match[2]}=[redacted]"
    return match[0]


_RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "fields"}


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event with structured fields (only formatted if the level is enabled)."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={"fields": {"event": name, **fields}})


#: The longest field name a log line quotes (an unknown field's name is the client's text).
MAX_LOGGED_NAME_CHARS = 128
_UNPRINTABLE = re.compile(r"[^\x21-\x7e]")


def field_name(name: str | None) -> str | None:
    """A field's name as a log line may show it: the error's `param` (never a value),
    printable ASCII only and cut at MAX_LOGGED_NAME_CHARS, so a client that names an
    unknown field cannot write lines or bulk into the log."""
    if name is None:
        return None
    shown = _UNPRINTABLE.sub("?", name[: MAX_LOGGED_NAME_CHARS + 1])
    return shown if len(shown) <= MAX_LOGGED_NAME_CHARS else shown[:MAX_LOGGED_NAME_CHARS] + "..."


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    if "=" in text:
        text = _QUERY_PARAM.sub(_redact_query_param, text)
    if '"' in text:
        text = _JSON_MEMBER.sub(_redact_json_member, text)
    text = _CREDENTIAL_HEADER.sub(r"\1\2[redacted]", text)
    text = _BEARER.sub(r"\1[redacted]", text)
    text = _KEY_SUBPROTOCOL.sub(r"\1[redacted]", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


class RedactSecrets(logging.Filter):
    """Rewrites a record with credentials replaced by `[redacted]`.

    The message, its structured fields, and its traceback: an exception's text can
    quote what a client sent (websockets' header errors quote the whole header), so
    the traceback is formatted here, redacted, and left in `exc_text`, which every
    formatter prints instead of formatting `exc_info` again.
    """

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self.secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message, self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not record.exc_text:
            trace = _PLAIN.formatException((type(exc), exc, exc.__traceback__))
            record.exc_text = redact(trace, self.secrets)
        elif record.exc_text:  # already formatted (by another handler): redact it too
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        fields = getattr(record, "fields", None)
        if fields:
            record.fields = {
                k: redact(v, self.secrets) if isinstance(v, str) else v for k, v in fields.items()
            }
        return True


_PLAIN = logging.Formatter()


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = dict(getattr(record, "fields", None) or {})
    for key, value in record.__dict__.items():  # extra={...} from other code
        if key not in _RESERVED and not key.startswith("_") and key != "color_message":
            fields.setdefault(key, value)
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": fields.pop("event", None) or "log",
            "message": record.getMessage(),
            **fields,
        }
        if record.exc_text:  # formatted, and redacted, by `RedactSecrets`
            line["exception"] = record.exc_text
        elif record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _fields(record)
        fields.pop("event", None)
        if fields:
            text += " " + " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
        return text


_UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def configure_logging(level: str, fmt: str, secrets: Iterable[str] = ()) -> None:
    """Root handler in the chosen format; uvicorn's loggers routed through it, redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    redactor = RedactSecrets(secrets)
    handler.addFilter(redactor)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in _UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.addFilter(redactor)


def protect_uvicorn_logs(secrets: Iterable[str] = ()) -> None:
    """Redact credentials in uvicorn's own log records, whatever handlers it configured."""
    secrets = tuple(secrets)
    for name in _UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        existing = [f for f in logger.filters if isinstance(f, RedactSecrets)]
        if existing:  # several servers in one process: redact every server's keys
            existing[0].secrets = tuple(dict.fromkeys((*existing[0].secrets, *secrets)))
        else:
            logger.addFilter(RedactSecrets(secrets))
