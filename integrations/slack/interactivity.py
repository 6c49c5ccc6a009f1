"""What the tenant's Slack app is told by Slack when someone clicks a button or submits a
modal (an interactive payload), whichever way it came: signed over HTTP to the Request URL
(integrations.slack.views) or over a Socket Mode connection (integrations.slack.socket_mode).

Slack waits 3 seconds for the answer, so the decision itself is a Celery task
(integrations.tasks.slack_decide): the answer is given at once, and the clicker is told in
Slack if the flow refused them. A modal opens within the answer's time (its trigger lasts 3
seconds), bounded by SLACK_MODAL_TIMEOUT_SECONDS.
"""

import json
import logging
import re

from django.conf import settings

from config.celery import task_enqueue
from integrations.slack import blocks
from integrations.slack.api import SlackFailed, slack_call
from integrations.slack.decide import NO_SUCH_ITEM, already_text
from integrations.slack.models import SlackApp
from integrations.slack.mrkdwn import slack_escape
from notifications.content import notification_content
from notifications.models import Delivery
from runtime.decisions.answers import text_problem
from runtime.decisions.deadlines import EXTEND_CHOICES
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import held_call_of
from runtime.kernel.errors import ItemChanged

logger = logging.getLogger(__name__)


def payload_parse(text) -> dict:
    """The JSON object ``text`` holds (a payload, a button's value, a modal's metadata); {}
    for anything else."""
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _id(value) -> str:
    # Slack's ids and ours are printable text: a NUL (which PostgreSQL refuses, a
    # DataError) or a lone surrogate (which psycopg cannot encode) names nothing.
    return value if isinstance(value, str) and 0 < len(value) <= 80 and value.isprintable() else ""


# Slack's own ids: a user (U0…), a channel (C0…), a message's ts (1700000000.000100).
SLACK_REF = re.compile(r"[A-Za-z0-9.]{1,80}")


def _ref(value) -> str:
    return value if isinstance(value, str) and SLACK_REF.fullmatch(value) else ""


def _choice(number: str, choices: list) -> int | None:
    """The index a button's or an option's number names among ``choices``, or None (only
    ASCII digits: "²" is a digit to str.isdigit, and not to int)."""
    if not re.fullmatch(r"[0-9]{1,4}", number) or int(number) >= len(choices):
        return None
    return int(number)


def slack_payload_take(app: SlackApp, payload: dict) -> dict | None:
    """Act on an interactive payload of the tenant's app (its authenticity checked by the
    caller); the body of Slack's answer (a modal's ``response_action: errors``), or None for
    an empty one. Raises SlackUnqueued when the decision could not be queued."""
    kind = payload.get("type")
    if kind == "block_actions":
        _block_actions(app, payload)
    elif kind == "view_submission":
        return _view_submission(app, payload)
    return None


class SlackUnqueued(Exception):
    """The broker did not take the decision: Slack shows the click failed, nothing is lost."""


def _queue(app: SlackApp, click: dict) -> None:
    try:
        task_enqueue("integrations.tasks.slack_decide", (app.tenant_id, click))
    except Exception as exc:  # noqa: BLE001 - a broker down: Slack tells the clicker
        logger.warning("could not queue a Slack decision", exc_info=True)
        raise SlackUnqueued from exc


def _reply(app: SlackApp, channel_id: str, user_id: str, text: str) -> None:
    try:
        task_enqueue("integrations.tasks.slack_reply", (app.tenant_id, channel_id, user_id, text))
    except Exception:  # noqa: BLE001 - a courtesy message only
        logger.warning("could not queue a Slack reply", exc_info=True)


def _interaction(app: SlackApp, public_id: str) -> Interaction | None:
    if not public_id:
        return None
    return (
        Interaction.objects.select_related("task__agent")
        .filter(tenant_id=app.tenant_id, public_id=public_id)
        .first()
    )


def _content(app: SlackApp, interaction: Interaction, channel_id: str, ts: str) -> dict:
    """What the message clicked showed (its channel's settings), for the modal to show."""
    delivery = (
        Delivery.objects.select_related("channel")
        .filter(tenant_id=app.tenant_id, interaction=interaction, message_ref=f"{channel_id}:{ts}")
        .first()
    )
    if delivery is None:
        return {"prompt": interaction.prompt}
    delivery.interaction = interaction
    return notification_content(delivery)


def _block_actions(app: SlackApp, payload: dict) -> None:
    user_id = _ref(_dict(payload.get("user")).get("id"))
    channel_id = _ref(_dict(payload.get("channel")).get("id"))
    ts = _ref(_dict(payload.get("container")).get("message_ts"))
    actions = payload.get("actions")
    action = _dict(actions[0] if isinstance(actions, list) and actions else {})
    action_id = str(action.get("action_id", ""))
    value = payload_parse(action.get("value"))
    interaction_id = _id(value.get("i"))
    click = {"user": user_id, "channel": channel_id, "interaction": interaction_id}
    # An approval's buttons name the opening they were posted for (integrations.slack.blocks);
    # those posted before openings were counted are the first's.
    opening = value.get("o", 1)
    if action_id == blocks.APPROVE:
        decision = {"approved": True, "shownHash": value.get("h"), "opening": opening}
        _queue(app, {**click, "decision": decision})
    elif action_id.startswith(blocks.CHOICE + ":"):
        interaction = _interaction(app, interaction_id)
        if interaction is None:
            _reply(app, channel_id, user_id, NO_SUCH_ITEM)
            return
        choices = (interaction.request or {}).get("choices") or []
        number = _choice(action_id.partition(":")[2], choices)
        if number is not None:
            _queue(app, {**click, "decision": {"value": choices[number]}})
        else:
            _reply(
                app, channel_id, user_id, "Nothing was decided: the question has no such choice."
            )
    elif action_id == blocks.EXTEND:
        # A pick of the Extend menu: its option names the item and the duration.
        picked = payload_parse(_dict(action.get("selected_option")).get("value"))
        by = picked.get("by")
        if _id(picked.get("i")) and by in dict(EXTEND_CHOICES):
            _queue(app, {**click, "interaction": _id(picked.get("i")), "extend": by})
        else:
            _reply(app, channel_id, user_id, "Nothing was extended: pick one of the durations.")
    elif action_id in (blocks.DENY, blocks.ANSWER, blocks.SIMILAR):
        _modal_open(app, payload, action_id, click, value.get("h"), ts, opening)
    # Link buttons (Open in Countersign, step-up, edit) reach here too: nothing to do.


def _modal_open(app, payload, action_id, click, shown_hash, ts, opening) -> None:
    interaction = _interaction(app, click["interaction"])
    if interaction is None:
        # A forged or mangled id (another tenant's too): the clicker hears it, nothing opens.
        _reply(app, click["channel"], click["user"], NO_SUCH_ITEM)
        return
    if interaction.state != Interaction.State.OPEN:
        text = f"Nothing to decide: {already_text(interaction)}"
        _reply(app, click["channel"], click["user"], slack_escape(text))
        return
    metadata = {"i": interaction.public_id, "h": shown_hash or "", "c": click["channel"]}
    if interaction.kind == Interaction.Kind.APPROVAL:
        if opening != interaction.opening:
            # The button of an earlier opening: no modal that would decide the new one.
            text = f"Nothing to decide here: {ItemChanged(interaction).message}"
            _reply(app, click["channel"], click["user"], slack_escape(text))
            return
        metadata["o"] = opening
    content = _content(app, interaction, click["channel"], ts)
    build = {
        blocks.DENY: blocks.deny_modal,
        blocks.ANSWER: blocks.answer_modal,
        blocks.SIMILAR: blocks.similar_modal,
    }[action_id]
    view = build(interaction=interaction, content=content, metadata=metadata)
    try:
        slack_call(
            app,
            "views_open",
            timeout=settings.SLACK_MODAL_TIMEOUT_SECONDS,
            trigger_id=str(payload.get("trigger_id", "")),
            view=view,
        )
    except SlackFailed:
        logger.warning("could not open a Slack modal", exc_info=True)


def _selected(values: dict, block: str) -> list[str]:
    element = _dict(_dict(values.get(block)).get(block))
    if "selected_option" in element:
        option = _dict(element.get("selected_option"))
        return [str(option.get("value", ""))] if option else []
    options = element.get("selected_options")
    return (
        [str(_dict(o).get("value", "")) for o in options if o] if isinstance(options, list) else []
    )


def _text(values: dict, block: str) -> str:
    element = _dict(_dict(values.get(block)).get(block))
    value = element.get("value")
    return value.strip() if isinstance(value, str) else ""


class _Refused(Exception):
    """A modal's values that decide nothing: Slack shows ``errors`` beside its fields."""

    def __init__(self, **errors: str):
        super().__init__(errors)
        self.errors = errors


def _errors(**errors: str) -> dict:
    return {"response_action": "errors", "errors": errors}


def _view_submission(app: SlackApp, payload: dict) -> dict | None:
    view = _dict(payload.get("view"))
    metadata = payload_parse(view.get("private_metadata"))
    values = _dict(_dict(view.get("state")).get("values"))
    click = {
        "user": _ref(_dict(payload.get("user")).get("id")),
        "channel": _ref(metadata.get("c")),
        "interaction": _id(metadata.get("i")),
    }
    callback = view.get("callback_id")
    if callback == blocks.DENY:
        reason = _text(values, "reason")
        if len(reason) > blocks.REASON_MAX:
            return _errors(reason=f"At most {blocks.REASON_MAX} characters.")
        problem = text_problem(reason)
        if problem:
            return _errors(reason=f"The reason {problem}.")
        decision = {"approved": False, "reason": reason, "opening": metadata.get("o", 1)}
    elif callback == blocks.ANSWER:
        interaction = _interaction(app, click["interaction"])
        choices = (interaction.request or {}).get("choices") or [] if interaction else []
        picked, custom = _selected(values, "choice"), _text(values, "custom")
        if picked and custom:
            return _errors(custom="Pick a choice or write another answer, not both.")
        problem = text_problem(custom)
        if problem:
            return _errors(custom=f"The answer {problem}.")
        if picked:
            number = _choice(picked[0], choices)
            if number is None:
                return _errors(choice="Pick one of the choices.")
            decision = {"value": choices[number]}
        elif custom and len(custom) <= blocks.ANSWER_MAX:
            decision = {"value": custom}
        else:
            return (
                _errors(custom="Write an answer.")
                if "custom" in values
                else _errors(choice="Pick one of the choices.")
            )
    elif callback == blocks.SIMILAR:
        try:
            decision = _similar(app, click, values, metadata)
        except _Refused as refused:
            return _errors(**refused.errors)
    else:
        return None
    _queue(app, {**click, "decision": decision})
    return None


def _similar(app: SlackApp, click: dict, values: dict, metadata: dict) -> dict:
    duration = (_selected(values, "duration") or [""])[0]
    if duration not in blocks.RULE_DURATIONS:
        raise _Refused(duration="Choose how long.")
    interaction = _interaction(app, click["interaction"])
    held = held_call_of(interaction) if interaction else None
    arguments = held.arguments if held is not None and isinstance(held.arguments, dict) else {}
    fields = [f for f in _selected(values, "conditions") if f in arguments]
    return {
        "approved": True,
        "shownHash": metadata.get("h"),
        "opening": metadata.get("o", 1),
        "allowSimilar": {
            "duration": duration,
            "callerOnly": "caller_only" in _selected(values, "scope"),
            "conditions": [{"field": f, "op": "equals", "value": arguments[f]} for f in fields],
        },
    }
