"""Log context that follows one task across the web and worker processes.

``log_context(task_id=..., tenant=..., subject=..., trace_id=...)`` binds values for the
current thread or coroutine; ``ContextFilter`` puts them on every record, so that a grep
for a task id finds its lines in both processes.
"""

import contextvars
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

_FIELDS = ("task_id", "tenant", "subject", "trace_id")
_EMPTY: dict[str, str] = {}
# The dict is never mutated in place: every change sets a new one.
_context: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar(
    "countersign_log", default=_EMPTY
)  # noqa: B039


@contextmanager
def log_context(**values: object) -> Iterator[None]:
    merged = {**_context.get(), **{k: str(v) for k, v in values.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


def bind(**values: object) -> None:
    """Add values to the current context until it ends (for request-scoped code)."""
    _context.set({**_context.get(), **{k: str(v) for k, v in values.items() if v is not None}})


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get()
        for field in _FIELDS:
            if not hasattr(record, field):
                setattr(record, field, ctx.get(field, "-"))
        return True


class ForbiddenOneLine(logging.Filter):
    """A 403 is an answer, not a fault: Django logs "Forbidden (Permission denied): <path>"
    with the PermissionDenied's traceback (some 50 lines a refusal in Django admin). One line
    says all there is; faults (5xx) keep their tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True


# Characters that end or rewrite a line in a terminal or a log file.
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x1b``): a value a caller
    chose (a token's subject, a message's text) never starts a log line of its own."""
    return _LINE_BREAKING.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


class TextFormatter(logging.Formatter):
    """The key=value text lines: the message and the context fields one line each (a
    traceback still follows on lines of its own)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        names = ("message", *_FIELDS)
        saved = {name: record.__dict__.get(name) for name in names}
        try:
            for name, value in saved.items():
                if isinstance(value, str) and _LINE_BREAKING.search(value):
                    record.__dict__[name] = one_line(value)
            return super().formatMessage(record)
        finally:
            record.__dict__.update(saved)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for field in _FIELDS:
            payload[field] = getattr(record, field, "-")
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload)
