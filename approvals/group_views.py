"""An approval group on the operator pages (runtime.decisions.approval_groups): the held calls
of one model reply, shown together on the page of each of them (every call with its
arguments, their hash, and where it stands), decided call by call (each call's own form, as
any approval) or at once: one reason, Approve all or Deny all, bound to the arguments of every
call the page showed (runtime.decisions.group_flow.group_decision_take, which takes the one
decision flow for each call).
"""

from approvals.presenting import pretty
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction
from runtime.decisions.flow import PAGE, Decision
from runtime.decisions.group_flow import GroupDecided, group_decision_take, group_facts
from runtime.decisions.receipts import decision_word
from runtime.decisions.summaries import held_call_view
from runtime.kernel.errors import DecisionMisfit

# The buttons of the group's form (decision_views reads them).
GROUP_CHOICES = ("approve_group", "deny_group")
REASON_MAX = 1000


def group_context(*, interaction: Interaction, decider: Decider) -> dict | None:
    """What a call's page shows of its group, for ``decider``; None for a call on its own."""
    if not interaction.group_id:
        return None
    facts = group_facts(tenant=interaction.tenant, group_id=interaction.group_id, decider=decider)
    if facts is None:
        return None
    return {"facts": facts, "calls": [_call_row(f, current=interaction) for f in facts.calls]}


def _call_row(facts, *, current: Interaction) -> dict:
    call = facts.interaction
    held = facts.held_call
    # The decision page of each call of the group: it shows exactly what is sent.
    view = held_call_view(call, reveal=True, arguments=held.arguments) if held else None
    return {
        "interaction": call,
        "position": call.group_position + 1,
        "current": call.pk == current.pk,
        "held_call": held,
        "summary": view["summary"] if view else "",
        "impact": view["impact"] if view else "",
        "arguments": pretty(held.arguments) if held else "",
        "is_open": facts.is_open,
        "outcome": ""
        if facts.is_open
        else "canceled"
        if call.state == Interaction.State.CANCELED
        else decision_word(call),
        "facts": facts,
    }


def group_decision_post(data, *, interaction: Interaction, decider: Decider) -> GroupDecided:
    """The group form's POST, taken by the group flow: Approve all or Deny all, with one
    reason, bound to every call the page showed (``shown-<id>``: its arguments' hash).
    Raises what the flow raises."""
    choice = data.get("decision", "")
    if choice not in GROUP_CHOICES:
        raise DecisionMisfit("decision", "Choose Approve all or Deny all.")
    reason = str(data.get("reason", "")).replace("\x00", "").strip()
    if len(reason) > REASON_MAX:
        raise DecisionMisfit("reason", f"At most {REASON_MAX} characters.")
    # What the page showed: each open call's arguments hash (a hash that is not the call's
    # is refused by the flow, as the call's own form's is).
    shown = {
        key.removeprefix("shown-"): str(value)[:64] or None
        for key, value in data.items()
        if key.startswith("shown-") and "\x00" not in key
    }
    return group_decision_take(
        tenant=interaction.tenant,
        group_id=interaction.group_id,
        decider=decider,
        decision=Decision(approved=choice == "approve_group", reason=reason),
        channel=PAGE,
        shown=shown,
    )


def group_decided_text(decided: GroupDecided, *, approved: bool) -> str:
    """What the person is told once the group's decision was taken."""
    done = len(decided.decided)
    calls = f"{done} call{'s' if done != 1 else ''}"
    if not approved:
        return f"Denied {calls} of the group."
    waiting = decided.waiting
    if waiting:
        return (
            f"Approved {calls} of the group; {len(waiting)} still "
            f"need{'s' if len(waiting) == 1 else ''} another person's approval."
        )
    return f"Approved {calls} of the group: they are sent in the reply's order."
