"""How the operator pages present what they show: a task's messages, JSON, times and spans,
and the keyset cursors of the inbox, the audit trail and the tasks page."""

import json
from datetime import UTC, datetime, tzinfo

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from runtime.decisions.summaries import message_calls_redacted


def message_view(message: dict) -> dict:
    """A ProtoJSON Message as the page shows it: who, its text, its data, its files."""
    texts, datas, files = [], [], []
    for part in message.get("parts") or []:
        if "text" in part:
            texts.append(part["text"])
        elif "data" in part:
            datas.append(json.dumps(part["data"], indent=2, sort_keys=True))
        else:
            files.append(part.get("filename") or part.get("url") or "a file")
    return {
        "role": "agent" if message.get("role") == "ROLE_AGENT" else "caller",
        "texts": texts,
        "datas": datas,
        "files": files,
    }


def visible_messages(task) -> list[dict]:
    """What the caller and the agent said on the task: the history, then the status message.
    A call a caller describes to a gate or a gateway shows its redacted fields as ``•••``."""
    shown = list(task.history or [])
    if task.status_message:
        shown.append(task.status_message)
    return [message_view(message_calls_redacted(task.agent, m)) for m in shown]


def pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


# What reverse() leaves unquoted in a path segment (RFC 3986 sub-delimiters, "~:@").
URL_SAFE = "!$&'()*+,;=~:@"
_SPANS = (
    ("year", 365 * 86400),
    ("month", 30 * 86400),
    ("week", 7 * 86400),
    ("day", 86400),
    ("hour", 3600),
    ("minute", 60),
)


def span_text(seconds: float) -> str:
    """A duration in its largest unit: "3 hours", "1 day" ("" under a minute)."""
    for unit, size in _SPANS:
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return ""


def when_text(moment: datetime, zone: tzinfo | None = None) -> tuple[str, str]:
    """An aware time as (ISO 8601 to the second, "30 Nov 2026, 11:41:46 CET") in the current
    time zone (the tenant's, tenants.access.member_required): never microseconds. A list
    passes the ``zone`` it read once (timezone.get_current_timezone()) for all its rows."""
    local = moment.astimezone(zone or timezone.get_current_timezone()).replace(microsecond=0)
    return local.isoformat(), f"{local.day} {local:%b %Y, %H:%M:%S} {local.tzname() or ''}".strip()


def relative_text(moment: datetime, now: datetime) -> str:
    """ "3 hours ago", "in 23 hours", "just now": a time as far from ``now``."""
    seconds = (moment - now).total_seconds()
    span = span_text(abs(seconds))
    if not span:
        return "just now"
    return f"in {span}" if seconds > 0 else f"{span} ago"


def keyset_cursor_parse(raw: str) -> tuple[datetime, int, int] | None:
    try:
        ts, rank_text, pk_text = raw.rsplit("~", 2)
        when = parse_datetime(ts)
        rank, pk = int(rank_text), int(pk_text)
    except ValueError:
        return None
    # Only a position we could have written: an aware time, a source rank, a bigint id.
    if when is None or when.tzinfo is None or rank not in (0, 1) or not 0 < pk < 2**63:
        return None
    return when, rank, pk


def keyset_cursor_format(cursor: tuple[datetime, int, int]) -> str:
    ts, rank, pk = cursor
    return f"{ts.isoformat()}~{rank}~{pk}"


def task_cursor_parse(raw: str) -> tuple[datetime, int] | None:
    """The tasks page's keyset cursor, ``<status time>~<id>``; None if it does not read."""
    try:
        ts, pk_text = raw.rsplit("~", 1)
        when = parse_datetime(ts)
        pk = int(pk_text)
        # An aware time the database can take: in UTC it must still be a year 1 to 9999.
        when = when.astimezone(UTC) if when is not None and when.tzinfo else None
    except (ValueError, OverflowError):
        return None
    if when is None or not 0 < pk < 2**63:
        return None
    return when, pk


def task_cursor_format(cursor: tuple[datetime, int]) -> str:
    ts, pk = cursor
    return f"{ts.isoformat()}~{pk}"
