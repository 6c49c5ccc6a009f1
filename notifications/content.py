"""What a notification says, whatever its medium: the facts of an item (with the held call's
summary, impact line and arguments unless the channel omits them, redacted as its policy
says), its title
(an opening's, a follow-up's), and the links to its page.

The prompt, the arguments, a reason and the caller's subject are the caller's or the model's
text: each medium escapes them for itself (integrations/<medium>/: HTML by Django's
templates, Slack's mrkdwn, a Teams card's TextRuns, an e-mail subject of one line).
"""

import json
from typing import Any

from django.urls import reverse

from config.site import site_url
from notifications.models import Delivery, LadderStep
from runtime.decisions.call_summaries import call_summary_shown
from runtime.decisions.decision_models import Interaction
from runtime.decisions.summaries import held_call_view
from runtime.policy.needs import approvers_text

# The longest a line of ``one_line`` is by default (an e-mail's subject, a digest's title).
SUBJECT_MAX = 150
# The openings of an item (whose recipients its follow-ups tell), and its follow-ups.
OPENINGS = (
    Delivery.Event.OPENED,
    Delivery.Event.REMINDER,
    Delivery.Event.ESCALATION,
    Delivery.Event.EXPIRING,
    Delivery.Event.ESCALATED,
)
FOLLOW_UPS = (
    Delivery.Event.DECIDED,
    Delivery.Event.EXPIRED,
    Delivery.Event.VOIDED,
    Delivery.Event.CANCELED,
    Delivery.Event.RECORDED,
    Delivery.Event.EXTENDED,
)


def base_url() -> str:
    """Where a notification's links point (config.site: one host for every link)."""
    return site_url()


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
    if event == Delivery.Event.EXTENDED:
        return f"Deadline extended by {content.get('by', '')} ({by} via {via}): {what}"
    if event == Delivery.Event.ESCALATED:
        return f"Nobody decided in time, escalated to {approvers_text(content.get('roles') or ())}: {what}"
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
    if delivery.event in (Delivery.Event.ESCALATION, Delivery.Event.ESCALATED):
        content["roles"] = list(delivery.roles)
    if delivery.event == Delivery.Event.EXPIRING:
        # Counted from when the beat took the warning (its step's time), not the send's.
        warned = LadderStep.objects.filter(
            interaction_id=interaction.pk, step=delivery.step
        ).values_list("at", flat=True)
        content["expiresIn"] = expires_in(
            interaction.expires_at, warned.first() or delivery.created_at
        )
    if not delivery.channel.omit_arguments:
        view = held_call_view(interaction)
        if view is not None:
            content["summary"] = view["summary"]
            if view["impact"]:
                content["impact"] = view["impact"]
            content["arguments"] = view["arguments"]
            # A model's summary (the tenant's AI summaries), once written: every medium
            # labels it as a model's, and warns when the check flagged it.
            written = call_summary_shown(interaction)
            if written is not None:
                content["modelSummary"] = written.wire()
    if delivery.follow_up is not None:
        content.update(delivery.follow_up.facts)
        content["title"] = f"[{task.agent.name}] {_follow_up_title(content)}"
        return content
    verb = {
        "opened": "waits for",
        "reminder": "still waits for",
        "escalation": "escalated:",
    }
    content["title"] = (
        f"[{task.agent.name}] {verb.get(delivery.event, '')} a decision: {headline(content)}"
    ).replace("escalated: a decision", "escalated, a decision waits")
    if delivery.event == Delivery.Event.EXPIRING:
        content["title"] = (
            f"[{task.agent.name}] Expires in {content['expiresIn']}, a decision waits: "
            f"{headline(content)}"
        )
    return content


def expires_in(at, now) -> str:
    """How long until ``at``, as people say it: "30 min", "2 h 5 min", "under a minute"."""
    minutes = int((at - now).total_seconds() // 60)
    if minutes < 1:
        return "under a minute"
    hours, minutes = divmod(minutes, 60)
    return " ".join(
        part
        for part in (f"{hours} h" if hours else "", f"{minutes} min" if minutes else "")
        if part
    )


def model_summary_lines(content: dict) -> tuple[str, str]:
    """A model's summary as a text medium says it: its labelled line, and the plain warning
    when the check flagged it ("" when it did not; both "" without a summary)."""
    found = content.get("modelSummary")
    if not isinstance(found, dict) or not found.get("text"):
        return "", ""
    line = f"Summary written by a model ({found.get('model', '')}): {found['text']}"
    warning = ""
    if found.get("flagged"):
        named = ", ".join(str(v) for v in found.get("problems") or [])
        warning = (
            f"Warning: this summary may be wrong. It names {named}, which the arguments do "
            "not hold. Check the arguments."
        )
    return line, warning


def arguments_text(content: dict) -> str:
    """The held call's arguments as indented JSON ("" when the channel omits them)."""
    if "arguments" not in content:
        return ""
    return json.dumps(content["arguments"], indent=2, sort_keys=True, ensure_ascii=False)
