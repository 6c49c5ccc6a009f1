"""What a notification says, in each medium: the facts of an item (with the held call's
summary and arguments unless the channel omits them, redacted as its policy says), the
e-mail's subject and bodies, a Slack-compatible webhook's message and a Teams card.

The prompt, the arguments, a reason and the caller's subject are the caller's or the model's
text: each medium gets them escaped for it. HTML by Django's templates; Slack's mrkdwn by
``slack_escape`` (``&``, ``<``, ``>``, so that no link, ``<!channel>`` or ``<@user>`` can be
made of them); a Teams card as TextRuns, which read no Markdown; an e-mail subject from one
line (a header holds no line break: one in a prompt would forge headers).
"""

import json
import re
from datetime import datetime
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string
from django.urls import reverse

from notifications.models import Delivery
from runtime.decisions.decision_models import Interaction
from runtime.decisions.summaries import held_call_view
from runtime.policy.needs import approvers_text

SUBJECT_MAX = 150
# Slack: a section's text is at most 3,000 characters, a field's 2,000.
SLACK_TEXT_MAX = 2900
FOLLOW_UPS = (
    Delivery.Event.DECIDED,
    Delivery.Event.EXPIRED,
    Delivery.Event.VOIDED,
    Delivery.Event.CANCELED,
    Delivery.Event.RECORDED,
)
# The webhook event's type for each follow-up (interaction.<type>).
WEBHOOK_TYPES = {Delivery.Event.RECORDED: "approval_recorded"}
_MENTION_WORD = re.compile(r"@(channel|here|everyone)\b", re.IGNORECASE)


def base_url() -> str:
    return settings.PUBLIC_BASE_URL or settings.NOTIFY_BASE_URL


def item_url(interaction: Interaction) -> str:
    return base_url() + reverse("approvals:interaction", args=[interaction.public_id])


def tool_of(interaction: Interaction) -> str:
    detail = interaction.detail or {}
    if interaction.kind == Interaction.Kind.APPROVAL and detail.get("server"):
        return f"{detail['server']}/{detail.get('tool', '')}"
    return ""


def one_line(text, limit: int = SUBJECT_MAX) -> str:
    """The first line of ``text`` with its white space collapsed, cut to ``limit``."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    line = " ".join((lines[0] if lines else "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def headline(content: dict) -> str:
    """What the item is, in one line: the prompt's first line and the held call's summary."""
    prompt = one_line(content.get("prompt", ""), 400)
    summary = one_line(content.get("summary", ""), 400)
    line = f"{prompt} {summary}".strip() if summary and summary not in prompt else prompt
    group = content.get("group")
    if group:
        # One call of an approval group: decided on its own here, or with the others on its
        # page (the turn resumes once every call of the reply has its decision).
        line += f" (call {group['position']} of {group['size']} of one reply)"
    return line


def person(subject: str) -> str:
    """A decider's subject as people read it: ``user:alice@acme.test`` is alice@acme.test."""
    return subject.removeprefix("user:")


def _follow_up_title(content: dict) -> str:
    event, what = content["event"], headline(content)
    by, via = person(content.get("decidedBy", "")), content.get("decidedVia", "")
    if event == Delivery.Event.DECIDED:
        outcome = str(content.get("outcome", "decided")).capitalize()
        return f"{outcome} by {by} via {via}: {what}"
    if event == Delivery.Event.EXPIRED:
        return f"Expired without a decision: {what}"
    if event == Delivery.Event.CANCELED:
        return f"Closed, its task was canceled by {by}: {what}"
    if event == Delivery.Event.VOIDED:
        return f"The approval is void and needs a new decision: {what}"
    following = content.get("nextStage")
    if isinstance(following, dict):
        title = f" ({following['title']})" if following.get("title") else ""
        return (
            f"Stage {content.get('stage', 1)} of {content.get('stages', 2)} approved ({by} via "
            f"{via}); stage {following.get('stage', 2)}{title} now waits for "
            f"{approvers_text(following.get('approvers') or ())}: {what}"
        )
    return (
        f"{content.get('approvals', 1)} of {content.get('approvalsRequired', 2)} approvals in "
        f"({by} via {via}), another person must approve: {what}"
    )


def notification_content(delivery: Delivery) -> dict:
    """The facts a notification carries; the held call's arguments unless the channel omits
    them (its summary too: it is made of them)."""
    interaction = delivery.interaction
    if interaction is None:
        return {
            "event": "test",
            "title": f"Test notification from Countersign ({delivery.channel.name})",
            "prompt": "This is a test: the channel works.",
            "url": base_url() + reverse("approvals:inbox"),
        }
    task = interaction.task
    content: dict[str, Any] = {
        "event": delivery.event,
        "interactionId": interaction.public_id,
        "taskId": task.public_id,
        "kind": interaction.kind,
        "prompt": interaction.prompt,
        "agent": task.agent.slug,
        "agentName": task.agent.name,
        "caller": interaction.subject,
        "expiresAt": interaction.expires_at.isoformat(),
        "url": item_url(interaction),
    }
    tool = tool_of(interaction)
    if tool:
        content["tool"] = tool
    if interaction.group_id:
        content["group"] = {
            "id": interaction.group_id,
            "position": interaction.group_position + 1,
            "size": Interaction.objects.filter(
                tenant_id=interaction.tenant_id, group_id=interaction.group_id
            ).count(),
        }
    if delivery.event == Delivery.Event.ESCALATION:
        content["roles"] = list(delivery.roles)
    if not delivery.channel.omit_arguments:
        view = held_call_view(interaction)
        if view is not None:
            content["summary"] = view["summary"]
            content["arguments"] = view["arguments"]
    if delivery.follow_up is not None:
        content.update(delivery.follow_up.facts)
        content["title"] = f"[{task.agent.name}] {_follow_up_title(content)}"
        return content
    verb = {"opened": "waits for", "reminder": "still waits for", "escalation": "escalated:"}
    content["title"] = (
        f"[{task.agent.name}] {verb.get(delivery.event, '')} a decision: {headline(content)}"
    ).replace("escalated: a decision", "escalated, a decision waits")
    return content


def webhook_event(content: dict, now) -> dict:
    """The JSON event a signed webhook receives: ``interaction.<event>``."""
    event = content["event"]
    data = {k: v for k, v in content.items() if k not in ("event", "title")}
    return {
        "type": f"interaction.{WEBHOOK_TYPES.get(event, event)}",
        "timestamp": now.isoformat(),
        "data": data,
    }


# --- e-mail ---------------------------------------------------------------------------------


def email_subject(content: dict) -> str:
    """One line, whatever the prompt holds (a header with a line break is refused)."""
    return one_line(content["title"], SUBJECT_MAX)


def _arguments_text(content: dict) -> str:
    if "arguments" not in content:
        return ""
    return json.dumps(content["arguments"], indent=2, sort_keys=True, ensure_ascii=False)


def email_bodies(content: dict, links: dict | None = None) -> tuple[str, str]:
    """The plain-text and HTML bodies for one recipient (``links``: their one-time Approve
    and Deny links, when they may decide the item from the e-mail)."""
    context = {
        "content": content,
        "title": content["title"],
        "headline": headline(content) if "kind" in content else content.get("prompt", ""),
        "arguments": _arguments_text(content),
        "links": links or {},
        "follow_up": content.get("event") in FOLLOW_UPS,
        "expires": when_text(content.get("expiresAt", "")),
        # A prompt of several lines (the title holds its first): the whole of it.
        "prompt": content.get("prompt", "")
        if "\n" in str(content.get("prompt", "")).strip()
        else "",
    }
    text = render_to_string("notifications/email/notification.txt", context)
    html = render_to_string("notifications/email/notification.html", context)
    return text, html


# --- Slack ----------------------------------------------------------------------------------


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


def when_text(iso: str) -> str:
    """An ISO time as people read it in mail: ``2026-12-02 14:08 UTC``."""
    try:
        return f"{datetime.fromisoformat(iso):%Y-%m-%d %H:%M} UTC"
    except (TypeError, ValueError):
        return str(iso or "")


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
    text = json.dumps(content["arguments"], indent=2, sort_keys=True, ensure_ascii=False)
    return {"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(slack_code(text))}}


def slack_webhook_message(content: dict) -> dict:
    """A Slack-compatible incoming webhook's message: the item, and a link button to its page
    (a webhook cannot take a click back: nothing is decided from it)."""
    title = slack_escape(content["title"])
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(f"*{title}*")}}
    ]
    if "kind" in content and content.get("event") not in FOLLOW_UPS:
        blocks.append({"type": "section", "fields": slack_fields(content)})
        arguments = slack_arguments_block(content)
        if arguments:
            blocks.append(arguments)
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Open in Countersign"},
                    "url": content["url"],
                }
            ],
        }
    )
    return {"text": slack_cut(f"{title} {content['url']}"), "blocks": blocks}


# --- Microsoft Teams ------------------------------------------------------------------------


def _runs(*texts: tuple[str, bool]) -> dict:
    # TextRuns read no Markdown: the caller's text cannot make a link or a heading.
    return {
        "type": "RichTextBlock",
        "inlines": [
            {"type": "TextRun", "text": text, **({"weight": "Bolder"} if bold else {})}
            for text, bold in texts
        ],
    }


def teams_card(content: dict) -> dict:
    """A Teams incoming webhook's (or Workflows') message: an Adaptive Card with the item and
    "Open in Countersign" (Teams cannot take a click back here either)."""
    body = [_runs((content["title"], True))]
    if "kind" in content and content.get("event") not in FOLLOW_UPS:
        for label, key in (
            ("Agent", "agentName"),
            ("Caller", "caller"),
            ("Tool", "tool"),
            ("Expires", "expiresAt"),
        ):
            if content.get(key):
                body.append(_runs((f"{label}: ", True), (str(content[key]), False)))
        if "arguments" in content:
            body.append(
                {
                    "type": "RichTextBlock",
                    "inlines": [
                        {
                            "type": "TextRun",
                            "text": _arguments_text(content),
                            "fontType": "Monospace",
                        }
                    ],
                }
            )
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": [
            {"type": "Action.OpenUrl", "title": "Open in Countersign", "url": content["url"]}
        ],
    }
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
        ],
    }
