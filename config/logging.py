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


def log_fields() -> dict[str, str]:
    """The current context's values (to log with them from another thread)."""
    return dict(_context.get())


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


# An e-mail's one-time decision link (integrations.email.links) carries its token in the
# path, /integrations/email/<token>/<action>: the link is its recipient's credential while
# it works. The segment after the prefix is masked, also percent-encoded (a ``next=``).
# (``pending``, the token-less page of a link on its way through sign-in, is kept.)
_LINK_TOKEN = re.compile(
    r"(/integrations/email/|%2Fintegrations%2Femail%2F)"
    r"(?!pending(?![A-Za-z0-9_-]))[^/\s?#&'\"%]+",
    re.I,
)
LINK_TOKEN_MASK = "***"


def link_tokens_masked(text: str) -> str:
    """``text`` with the token of every e-mail link path in it masked."""
    if "ntegrations" not in text and "NTEGRATIONS" not in text:
        return text  # the common case, without the regular expression
    return _LINK_TOKEN.sub(lambda m: m.group(1) + LINK_TOKEN_MASK, text)


class LinkTokenMask(logging.Filter):
    """Masks e-mail link tokens in a record's message and its arguments (the path Django's
    request and CSRF warnings name, the path of uvicorn's access log line), before any
    handler writes it: on the console handler (every record that reaches it) and on each
    logger that prints paths, since a server may give such a logger a handler of its own
    (gunicorn and uvicorn do to ``uvicorn.access``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = link_tokens_masked(record.msg)
        args = record.args
        # Each argument keeps its place and type (uvicorn's own access formatter unpacks
        # them); one that prints a path (a request object) is replaced by its masked text.
        if isinstance(args, tuple):
            record.args = tuple(_masked_argument(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _masked_argument(v) for k, v in args.items()}
        # A traceback can print a path too (an exception's message naming the request, as
        # the template engine's lookups at DEBUG do): formatted once here, masked, and kept
        # as the text every formatter writes.
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = link_tokens_masked(record.exc_text)
        if record.stack_info:
            record.stack_info = link_tokens_masked(record.stack_info)
        return True


def _masked_argument(value):
    if isinstance(value, str):
        return link_tokens_masked(value)
    if value is None or isinstance(value, int | float):
        return value
    text = str(value)
    masked = link_tokens_masked(text)
    return value if masked == text else masked


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
        if record.exc_info or record.exc_text:
            # exc_text when a filter formatted (and masked) it already: LinkTokenMask.
            payload["exc"] = record.exc_text or (
                self.formatException(record.exc_info) if record.exc_info else ""
            )
        return json.dumps(payload)
