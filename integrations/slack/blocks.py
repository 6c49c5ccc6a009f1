"""What the tenant's Slack app posts: an item's message (Block Kit) as it stands now, and the
modals its buttons open (a denial's reason, a question's answer, "allow similar").

An open item's message has the buttons a decision in Slack may take: Approve (its value
carries the SHA-256 of the arguments the message shows, so that the decision binds them, and
the item's opening, so that it never decides the item opened again after a void),
Deny (a modal for the reason), "Approve and allow similar" where a standing rule may be made,
a question's choices; what must be done in the browser is a link to the item's page there
(``risk: high``: step-up is a browser act; editing the arguments). A decided item's message
says who decided, how and when, and has no buttons. Every text the caller or the model wrote
is escaped (integrations.slack.mrkdwn.slack_escape).
"""

import json

from integrations.slack.mrkdwn import (
    slack_arguments_block,
    slack_cut,
    slack_escape,
    slack_fields,
    slack_when,
)
from notifications.content import headline, model_summary_lines, person
from runtime.decisions.approvers import Decider
from runtime.decisions.deadlines import extend_choices
from runtime.decisions.decision_models import Interaction
from runtime.decisions.facts import DecisionFacts, decision_facts
from runtime.decisions.receipts import decision_word
from runtime.decisions.standing_rules import DURATION_LABELS, DURATIONS
from runtime.policy.conditions import schema_fields

APPROVE, DENY, SIMILAR, ANSWER, CHOICE, OPEN, EXTEND = (
    "cs_approve",
    "cs_deny",
    "cs_similar",
    "cs_answer",
    "cs_choice",
    "cs_open",
    "cs_extend",
)
# A question's choices are buttons up to this many; more (or a custom answer) open a modal.
CHOICE_BUTTONS = 5
# Slack's limits: an option's text, a modal's title, private_metadata.
OPTION_MAX, TITLE_MAX = 75, 24
REASON_MAX = 1000
ANSWER_MAX = 2000
RULE_DURATIONS = [d for d in DURATIONS if d != "forever"]


def surface_facts(interaction: Interaction) -> DecisionFacts:
    """What any decider may be offered in Slack: the buttons are the same for everyone in
    the channel, so these are the item's facts (the held call, what it needs, whether a rule
    may be made), read for no one in particular; the flow judges each click's decider."""
    return decision_facts(
        interaction=interaction, decider=Decider(subject="", role="admin"), with_receipts=False
    )


def _button(text: str, action_id: str, value: dict | None = None, **more) -> dict:
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action_id,
    }
    if value is not None:
        button["value"] = json.dumps(value, separators=(",", ":"))
    button.update(more)
    return button


def _state_text(interaction: Interaction) -> str:
    """What became of the item, or where it stands while open."""
    if interaction.state == Interaction.State.OPEN:
        detail = interaction.detail or {}
        lines = []
        if detail.get("voided"):
            lines.append(
                ":warning: The approval given before is void: "
                f"{slack_escape(detail.get('reason', ''))}. It needs a new decision."
            )
        for approval in interaction.approvals or ():
            lines.append(
                f":ballot_box_with_check: Approved by {slack_escape(person(approval.get('by', '')))}"
                f" via {slack_escape(approval.get('via', ''))}: "
                f"{len(interaction.approvals)} of {interaction.approvals_required}; another "
                "person must approve."
            )
        return "\n".join(lines)
    by = slack_escape(person(interaction.answered_by))
    via = slack_escape(interaction.answered_via)
    when = slack_when(interaction.answered_at) if interaction.answered_at else ""
    if interaction.state == Interaction.State.CANCELED:
        return f":no_entry_sign: Closed: its task was canceled by {by}, {when}."
    word = decision_word(interaction)
    if word == "expired":
        return f":hourglass: Expired without a decision, {when}."
    mark = {"approved": ":white_check_mark:", "denied": ":x:"}.get(word, ":speech_balloon:")
    text = f"{mark} {word.capitalize()} by {by} via {via}, {when}."
    reason = (interaction.answer or {}).get("reason")
    if reason and word == "denied":
        text += f"\n>{slack_escape(reason)[:500]}"
    if word == "answered":
        text += f"\n>{slack_escape(str((interaction.answer or {}).get('value', '')))[:500]}"
    return text


def _approval_actions(interaction: Interaction, facts: DecisionFacts, url: str) -> list[dict]:
    held, needs = facts.held_call, facts.needs
    # "o": the opening these buttons are for; once the approval is voided and the item opens
    # again, they decide nothing (the message is updated with the new opening's buttons).
    value = {
        "i": interaction.public_id,
        "h": held.arguments_hash if held else "",
        "o": interaction.opening,
    }
    elements = []
    if needs is not None and needs.high_risk:
        # Step-up is a browser act: the person re-authenticates there.
        elements.append(
            _button("Approve in Countersign", "cs_approve_browser", url=url, style="primary")
        )
    elif needs is None or needs.action != "deny":
        elements.append(_button("Approve", APPROVE, value, style="primary"))
    elements.append(_button("Deny…", DENY, value, style="danger"))
    # Whether a rule may be made is the tool's and the policy's, not the clicker's (the flow
    # checks who clicked: runtime.decisions.standing_rules.rule_check).
    if held is not None and not facts.rule_refusal and (needs is None or needs.action != "deny"):
        elements.append(_button("Approve and allow similar…", SIMILAR, value))
    if facts.editable and not (needs and needs.high_risk):
        elements.append(_button("Edit and approve in Countersign", "cs_edit", url=url))
    return elements


def _question_actions(interaction: Interaction) -> list[dict]:
    request = interaction.request or {}
    if isinstance(request.get("form"), dict):
        return []  # a tool server's form (MCP elicitation) is filled in on its page
    choices = [str(c) for c in request.get("choices") or []]
    custom = bool(request.get("allowCustom")) or not choices
    if choices and not custom and len(choices) <= CHOICE_BUTTONS:
        return [
            _button(slack_cut(choice, OPTION_MAX), f"{CHOICE}:{n}", {"i": interaction.public_id})
            for n, choice in enumerate(choices)
        ]
    return [_button("Answer…", ANSWER, {"i": interaction.public_id}, style="primary")]


def item_message(*, interaction: Interaction, content: dict) -> dict:
    """The message of an item, as it stands now: ``{"text", "blocks"}`` for chat.postMessage
    and chat.update. ``content``: the channel's notification content (its summary and
    arguments unless the channel omits them, redacted)."""
    title = slack_escape(f"[{content.get('agentName', '')}] {headline(content)}")
    blocks: list[dict] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(f"*{title}*")}},
    ]
    if content.get("impact"):
        # What approving does, in words, under the title (the policy rule's impact line).
        impact = slack_escape(content["impact"])
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": slack_cut(impact)}]}
        )
    blocks.append({"type": "section", "fields": slack_fields(content)})
    arguments = slack_arguments_block(content)
    if arguments:
        blocks.append(arguments)
    blocks.extend(_model_summary_blocks(content))
    state = _state_text(interaction)
    if state:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(state)}})
    url = content["url"]
    if interaction.state == Interaction.State.OPEN:
        if interaction.kind == Interaction.Kind.APPROVAL:
            elements = _approval_actions(interaction, surface_facts(interaction), url)
        elif interaction.kind == Interaction.Kind.QUESTION:
            elements = _question_actions(interaction)
        else:
            elements = []
        extend = (
            _extend_menu(interaction) if interaction.kind == Interaction.Kind.APPROVAL else None
        )
        if extend is not None:
            elements.append(extend)
        elements.append(_button("Open in Countersign", OPEN, url=url))
        blocks.append({"type": "actions", "block_id": "decide", "elements": elements})
    else:
        blocks.append(
            {"type": "actions", "elements": [_button("Open in Countersign", OPEN, url=url)]}
        )
    text = f"{title}: {_state_text(interaction) or 'waits for a decision'}"
    return {"text": slack_cut(text), "blocks": blocks}


def _model_summary_blocks(content: dict) -> list[dict]:
    """A model's summary, after the arguments (never in their place), labelled; a plain
    warning under it when the check flagged it."""
    line, warning = model_summary_lines(content)
    if not line:
        return []
    blocks: list[dict] = [
        {"type": "context", "elements": [{"type": "mrkdwn", "text": slack_cut(slack_escape(line))}]}
    ]
    if warning:
        text = slack_cut(f":warning: *{slack_escape(warning)}*")
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    return blocks


def _extend_menu(interaction: Interaction) -> dict | None:
    """A menu that extends the open item's deadline by one of the durations still within its
    bound (runtime.decisions.deadlines.extend_choices); None when none is left. Whoever picks
    one must be someone who may decide it (the service checks:
    integrations.slack.decide.slack_extend_take)."""
    choices = extend_choices(interaction)
    if not choices:
        return None
    return {
        "type": "static_select",
        "action_id": EXTEND,
        "placeholder": {"type": "plain_text", "text": "Extend by…"},
        "options": [
            {
                "text": {"type": "plain_text", "text": label},
                "value": json.dumps({"i": interaction.public_id, "by": by}, separators=(",", ":")),
            }
            for by, label in choices
        ],
    }


# --- modals ---------------------------------------------------------------------------------


def _modal(callback_id: str, title: str, submit: str, blocks: list, metadata: dict) -> dict:
    return {
        "type": "modal",
        "callback_id": callback_id,
        "title": {"type": "plain_text", "text": title[:TITLE_MAX]},
        "submit": {"type": "plain_text", "text": submit},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps(metadata, separators=(",", ":")),
        "blocks": blocks,
    }


def _what(interaction: Interaction, content: dict) -> dict:
    text = slack_escape(headline(content) if content else interaction.prompt)
    return {"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(f"*{text}*")}}


def deny_modal(*, interaction: Interaction, content: dict, metadata: dict) -> dict:
    return _modal(
        DENY,
        "Deny",
        "Deny",
        [
            _what(interaction, content),
            {
                "type": "input",
                "block_id": "reason",
                "optional": True,
                "label": {"type": "plain_text", "text": "Reason (the agent's model sees it)"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "reason",
                    "multiline": True,
                    "max_length": REASON_MAX,
                },
            },
        ],
        metadata,
    )


def answer_modal(*, interaction: Interaction, content: dict, metadata: dict) -> dict:
    request = interaction.request or {}
    choices = [str(c) for c in request.get("choices") or []][:100]
    custom = bool(request.get("allowCustom")) or not choices
    blocks = [_what(interaction, content)]
    if choices:
        blocks.append(
            {
                "type": "input",
                "block_id": "choice",
                "optional": custom,
                "label": {"type": "plain_text", "text": "Answer"},
                "element": {
                    "type": "static_select",
                    "action_id": "choice",
                    "options": [
                        {
                            "text": {"type": "plain_text", "text": slack_cut(c, OPTION_MAX)},
                            "value": str(n),
                        }
                        for n, c in enumerate(choices)
                    ],
                },
            }
        )
    if custom:
        blocks.append(
            {
                "type": "input",
                "block_id": "custom",
                "optional": bool(choices),
                "label": {"type": "plain_text", "text": "Another answer" if choices else "Answer"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "custom",
                    "multiline": True,
                    "max_length": ANSWER_MAX,
                },
            }
        )
    return _modal(ANSWER, "Answer", "Answer", blocks, metadata)


def rule_fields(interaction: Interaction, facts: DecisionFacts) -> dict:
    """The held call's top-level values a standing rule may require (``equals``)."""
    held = facts.held_call
    if held is None or not isinstance(held.arguments, dict):
        return {}
    names = schema_fields(facts.schema)
    return {
        k: v for k, v in held.arguments.items() if k in names and not isinstance(v, dict | list)
    }


def similar_modal(*, interaction: Interaction, content: dict, metadata: dict) -> dict:
    """ "Approve and allow similar": how long, only this caller, which values must match."""
    facts = surface_facts(interaction)
    shown = content.get("arguments") or {}
    options = [
        {
            "text": {
                "type": "plain_text",
                "text": slack_cut(f"{name} = {shown.get(name, '•••')}", OPTION_MAX),
            },
            "value": name,
        }
        for name in rule_fields(interaction, facts)
    ][:10]

    def duration(d):
        return {"text": {"type": "plain_text", "text": DURATION_LABELS[d]}, "value": d}

    blocks = [
        _what(interaction, content),
        {
            "type": "input",
            "block_id": "duration",
            "label": {"type": "plain_text", "text": "Allow similar calls for"},
            "element": {
                "type": "static_select",
                "action_id": "duration",
                "initial_option": duration("1d"),
                "options": [duration(d) for d in RULE_DURATIONS],
            },
        },
        {
            "type": "input",
            "block_id": "scope",
            "optional": True,
            "label": {"type": "plain_text", "text": "Caller"},
            "element": {
                "type": "checkboxes",
                "action_id": "scope",
                "initial_options": [_caller_only()],
                "options": [_caller_only()],
            },
        },
    ]
    if options:
        blocks.append(
            {
                "type": "input",
                "block_id": "conditions",
                "optional": True,
                "label": {"type": "plain_text", "text": "Only calls with these values"},
                "element": {
                    "type": "checkboxes",
                    "action_id": "conditions",
                    "initial_options": options,
                    "options": options,
                },
            }
        )
    return _modal(SIMILAR, "Allow similar calls", "Approve", blocks, metadata)


def _caller_only() -> dict:
    return {"text": {"type": "plain_text", "text": "Only for this caller"}, "value": "caller_only"}
