"""What an e-mail says: its subject (one line, whatever the prompt holds: a header holds no
line break, and one in a prompt would forge headers) and its plain-text and HTML bodies
(Django's templates, HTML escaped)."""

from datetime import datetime

from django.template.loader import render_to_string

from notifications.content import (
    FOLLOW_UPS,
    SUBJECT_MAX,
    arguments_text,
    headline,
    model_summary_lines,
    one_line,
)


def email_subject(content: dict) -> str:
    """One line, whatever the prompt holds (a header with a line break is refused)."""
    return one_line(content["title"], SUBJECT_MAX)


def when_text(iso: str) -> str:
    """An ISO time as people read it in mail: ``2026-12-02 14:08 UTC``."""
    try:
        return f"{datetime.fromisoformat(iso):%Y-%m-%d %H:%M} UTC"
    except (TypeError, ValueError):
        return str(iso or "")


def email_bodies(content: dict, links: dict | None = None) -> tuple[str, str]:
    """The plain-text and HTML bodies for one recipient (``links``: their one-time Approve
    and Deny links, when they may decide the item from the e-mail)."""
    context = {
        "content": content,
        "title": content["title"],
        "headline": headline(content) if "kind" in content else content.get("prompt", ""),
        "arguments": arguments_text(content),
        # A model's summary, labelled, and the check's plain warning (notifications.content).
        "model_summary": model_summary_lines(content),
        "links": links or {},
        "follow_up": content.get("event") in FOLLOW_UPS,
        "expires": when_text(content.get("expiresAt", "")),
        # A prompt of several lines (the title holds its first): the whole of it.
        "prompt": content.get("prompt", "")
        if "\n" in str(content.get("prompt", "")).strip()
        else "",
    }
    text = render_to_string("integrations/email/notification.txt", context)
    html = render_to_string("integrations/email/notification.html", context)
    return text, html
