"""Text for Slack's mrkdwn, which the Slack app's messages and a Slack-compatible incoming
webhook's share: the caller's and the model's text escaped (``&``, ``<``, ``>``, so that no
link, ``<!channel>`` or ``<@user>`` can be made of them, and ``@here``-style words kept from
reading as a mention), cut to Slack's limits, and an item's fields."""

import re
from datetime import datetime

from notifications.content import arguments_text

# Slack: a section's text is at most 3,000 characters, a field's 2,000.
SLACK_TEXT_MAX = 2900
_MENTION_WORD = re.compile(r"@(channel|here|everyone)\b", re.IGNORECASE)


def slack_escape(text) -> str:
    """Text for Slack's mrkdwn that makes no link and no mention: ``&``, ``<`` and ``>`` as
    Slack asks (every link and mention is written inside ``<...>``), and the words
    ``@channel``, ``@here``, ``@everyone`` kept from being read as one."""
    escaped = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MENTION_WORD.sub(lambda m: "@\u2060" + m.group(1), escaped)


def slack_code(text: str) -> str:
    """Escaped text inside a code block that it cannot close."""
    return "```" + slack_escape(text).replace("```", "`\u200b``") + "```"


def slack_cut(text: str, limit: int = SLACK_TEXT_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_when(moment: datetime) -> str:
    """A time Slack shows in each reader's own time zone (UTC where it cannot)."""
    return (
        f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}}|"
        f"{moment:%Y-%m-%d %H:%M} UTC>"
    )


def slack_fields(content: dict) -> list[dict]:
    try:
        expires = slack_when(datetime.fromisoformat(content["expiresAt"]))
    except (KeyError, TypeError, ValueError):
        expires = "-"
    fields = [
        f"*Agent:* {slack_escape(content.get('agentName', '-'))}",
        f"*Caller:* {slack_escape(content.get('caller', '-'))}",
        f"*Expires:* {expires}",
    ]
    if content.get("tool"):
        fields.append(f"*Tool:* {slack_escape(content['tool'])}")
    return [{"type": "mrkdwn", "text": slack_cut(f, 1900)} for f in fields]


def slack_arguments_block(content: dict) -> dict | None:
    if "arguments" not in content:
        return None
    text = arguments_text(content)
    return {"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(slack_code(text))}}
