"""Bulk triage: approve or deny many open approvals with one reason, each decided on its own
by the one decision flow (channel ``bulk``: its own transaction, audit entry and race). What
bulk triage leaves out (questions, ``bulk: false``, two people, who may not decide, a step-up
not made) is the flow's to say; this view lists each item's outcome. An approval first
shows the summaries of what it would approve, and approves those, each bound to the hash of
the arguments summarised, after saying which of those selected the flow would leave out and
why (runtime.decisions.flow.decision_refusal, read before anything is decided)."""

import re

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from approvals.decision_views import decider_of
from approvals.inbox_views import inbox_filters_from
from runtime.agents.agent_selectors import agents_for_tenant
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import held_call_hashes, interactions_for_bulk
from runtime.decisions.flow import BULK, Decision, decision_refusal, decision_take
from runtime.decisions.group_flow import group_decision_take
from runtime.decisions.inbox import group_calls, inbox_interactions
from runtime.decisions.summaries import held_call_summary
from runtime.kernel.errors import (
    AlreadyDecided,
    ChannelRefused,
    DeciderRefused,
    InvalidParams,
    StepUpRequired,
    TaskNotFound,
)
from tenants.access import member_required, require_decider

BULK_MAX = 500


@require_POST
@member_required
def inbox_bulk(request):
    """Approve or deny many open approvals with one reason, each decided on its own."""
    require_decider(request.membership)
    tenant = request.membership.tenant
    choice = request.POST.get("decision", "")
    reason = request.POST.get("reason", "").replace("\x00", "").strip()[:1000]
    if choice not in ("approve", "deny"):
        messages.error(request, "Choose approve or deny.")
        return redirect("approvals:inbox")
    ids, problem = _bulk_ids(request, tenant)
    if problem:
        messages.error(request, problem)
        return redirect("approvals:inbox")
    found = interactions_for_bulk(tenant=tenant, public_ids=ids)
    if choice == "approve" and request.POST.get("confirmed") != "1":
        return _bulk_confirm(request, ids, found, reason=reason)
    decider = decider_of(request)
    groups = group_calls(tenant, [i.group_id for i in found.values() if i.group_id])
    results = [
        _bulk_group_outcome(
            found[item_id],
            groups.get(found[item_id].group_id, ()),
            tenant=tenant,
            decider=decider,
            approved=choice == "approve",
            reason=reason,
            post=request.POST,
        )
        if item_id in found and found[item_id].group_id
        else _bulk_outcome(
            item_id,
            found.get(item_id),
            tenant=tenant,
            decider=decider,
            # An approval binds the arguments whose summary the confirmation showed.
            decision=Decision(
                approved=choice == "approve",
                reason=reason,
                shown_hash=_shown_hash(request.POST.get(f"shown-{item_id}", "")),
            ),
        )
        for item_id in ids
    ]
    summary = outcome_counts(results, approved=choice == "approve")
    return render(
        request,
        "approvals/bulk_result.html",
        {
            "nav": "inbox",
            "decision": choice,
            "reason": reason,
            "results": results,
            "summary": summary,
        },
    )


def _shown_hash(raw: str) -> str | None:
    return raw if re.fullmatch(r"[0-9a-f]{64}", raw) else None


def _bulk_confirm(request, ids: list[str], found: dict, *, reason: str):
    """Before a bulk approval: the summary of every item it would approve (the ids resolved
    from a filter, so that what is approved is what was shown), each with the hash of its
    arguments, and first those it leaves out, saying why in words: the decision flow's own
    refusals for this person (runtime.decisions.flow.decision_refusal), so that the page
    promises only what the approval does."""
    tenant = request.membership.tenant
    decider = decider_of(request)
    approving = Decision(approved=True, reason=reason)
    groups = group_calls(tenant, [i.group_id for i in found.values() if i.group_id])
    # An approval group's item approves every call of it still open (at once: the group flow).
    calls = [c.public_id for g in groups.values() for c in g]
    hashes = held_call_hashes(tenant=tenant, public_ids=[*ids, *calls])
    # The open calls of the groups, read whole: the flow's checks read their policy.
    members = interactions_for_bulk(
        tenant=tenant,
        public_ids=[c.public_id for g in groups.values() for c in g if c.state == "open"],
    )
    rows, left_out = [], []
    for item_id in ids:
        interaction = found.get(item_id)
        if interaction is None:
            left_out.append({"public_id": item_id, "prompt": "", "text": "No such interaction."})
            continue
        row = {
            "public_id": item_id,
            "prompt": interaction.prompt,
            "summary": held_call_summary(interaction),
            "impact": interaction.impact,
            "url": reverse("approvals:interaction", args=[item_id]),
            "hash": hashes.get(item_id, ""),
        }
        if interaction.group_id and interaction.kind == Interaction.Kind.APPROVAL:
            group = groups.get(interaction.group_id, ())
            waiting = [members[c.public_id] for c in group if c.public_id in members]
            if not waiting:
                left_out.append({**row, "text": "Already decided."})
                continue
            prompt = f"Approve {len(waiting)} of the {len(group)} calls of one reply"
            refused = _group_refusal(waiting, decider=decider, decision=approving)
            if refused:
                left_out.append({**row, "prompt": prompt, "summary": "", "text": refused})
                continue
            shown = [
                {
                    "public_id": c.public_id,
                    "summary": c.summary,
                    "impact": c.impact,
                    "hash": hashes.get(c.public_id, ""),
                }
                for c in waiting
            ]
            rows.append({**row, "prompt": prompt, "summary": "", "group": shown})
            continue
        fault = decision_refusal(
            interaction=interaction, decider=decider, decision=approving, channel=BULK
        )
        if fault is not None:
            left_out.append({**row, "text": refusal_text(fault)})
        else:
            rows.append(row)
    return render(
        request,
        "approvals/bulk_confirm.html",
        {
            "nav": "inbox",
            "rows": rows,
            "calls": sum(len(r.get("group") or ()) or 1 for r in rows),
            "left_out": left_out,
            "selected": len(ids),
            "reason": reason,
        },
    )


def _group_refusal(waiting: list[Interaction], *, decider, decision: Decision) -> str:
    """Why a group's item is left out of a bulk decision: the first of its open calls the
    flow would refuse (the group is decided all at once, or not at all); "" for none."""
    for call in waiting:
        refused = decision_refusal(
            interaction=call, decider=decider, decision=decision, channel=BULK
        )
        if refused is not None:
            held = call.detail or {}
            name = f"call {call.group_position + 1} ({held.get('server')} / {held.get('tool')})"
            return f"Every call of the group: {name}: {refusal_text(refused)}"
    return ""


def refusal_text(refused) -> str:
    """Why the decision flow leaves an item out of a bulk decision, as a sentence."""
    if isinstance(refused, StepUpRequired):
        return (
            "The tool is marked risk: high and needs a recent re-authentication (decide it on "
            "its own page)."
        )
    if isinstance(refused, AlreadyDecided):
        decided = refused.interaction
        return f"Already {decided.get_state_display()} by {decided.answered_by or 'someone'}."
    text = refused.description if isinstance(refused, InvalidParams) else refused.message
    return text[:1].upper() + text[1:]


# What the result page calls each outcome (an approval's or a denial's "decided").
OUTCOME_WORDS = {
    "already": "Already decided by someone else",
    "left_out": "Left out",
    "missing": "Not found",
    "error": "Not applied",
}


def outcome_counts(results: list[dict], *, approved: bool) -> list[dict]:
    """How many items came to each outcome, in words, in the order first met."""
    counted: dict[str, int] = {}
    for result in results:
        counted[result["outcome"]] = counted.get(result["outcome"], 0) + 1
    decided = "Approved" if approved else "Denied"
    return [
        {"outcome": outcome, "label": OUTCOME_WORDS.get(outcome, decided), "count": count}
        for outcome, count in counted.items()
    ]


def _bulk_ids(request, tenant) -> tuple[list[str], str]:
    """The ids ticked, or those of "select all matching this filter"; or why there are none."""
    if request.POST.get("all") == "1":
        # "Select all matching this filter": the filters ride along as hidden fields.
        filters = inbox_filters_from(request.POST, agents=agents_for_tenant(tenant=tenant))
        if filters.state != "open":
            return [], "Only open items can be decided."
        args = filters.selector_args(now=timezone.now())
        args.pop("state")
        ids = list(
            inbox_interactions(tenant=tenant, state="open", **args)
            .order_by("-created_at", "-pk")
            .values_list("public_id", flat=True)[: BULK_MAX + 1]
        )
    else:
        ids = list(dict.fromkeys(i for i in request.POST.getlist("ids") if i and "\x00" not in i))
    if not ids:
        return [], "Select at least one item."
    if len(ids) > BULK_MAX:
        return [], f"At most {BULK_MAX} items at once: narrow the filter."
    return ids, ""


# The decision flow's refusals a bulk row reports: the item is left out, was decided by
# someone else meanwhile, or is in error; bulk triage goes on with the next item.
REFUSALS = (
    ChannelRefused,
    DeciderRefused,
    StepUpRequired,
    AlreadyDecided,
    InvalidParams,
    TaskNotFound,
)


def _refused_row(row: dict, exc: Exception, *, group: bool) -> dict:
    """The bulk row of an item the decision flow refused with ``exc``; ``group``: the item is
    an approval group's, decided all at once or not at all, so the row speaks of every call."""
    if isinstance(exc, ChannelRefused | DeciderRefused):
        return {
            **row,
            "outcome": "left_out",
            "text": f"Left out{' (every call)' if group else ''}: {exc.message}",
        }
    if isinstance(exc, StepUpRequired):
        text = (
            "Left out (every call): a call is marked risk: high and needs a recent "
            "re-authentication (decide the group on its page)."
            if group
            else "Left out: the tool is marked risk: high and needs a recent "
            "re-authentication (decide it on its own page)."
        )
        return {**row, "outcome": "left_out", "text": text}
    if isinstance(exc, AlreadyDecided):
        who = exc.interaction.answered_by or "someone"
        text = (
            f"Not applied: call {exc.interaction.group_position + 1} was decided by {who} since."
            if group
            else f"Already decided by {who}."
        )
        return {**row, "outcome": "already", "text": text}
    return {**row, "outcome": "error", "text": str(getattr(exc, "description", exc))}


def _bulk_group_outcome(
    listed, calls, *, tenant, decider, approved: bool, reason: str, post
) -> dict:
    """Decide an approval group's item: every call of it still open, at once (the group
    flow: all of them or none), an approval bound to the arguments the confirmation showed."""
    row = {
        "public_id": listed.public_id,
        "prompt": f"{len(calls)} calls of one reply",
        "summary": "; ".join(c.summary for c in calls),
        "url": reverse("approvals:interaction", args=[listed.public_id]),
    }
    shown = None
    if approved:
        shown = {
            c.public_id: _shown_hash(post.get(f"shown-{c.public_id}", ""))
            for c in calls
            if f"shown-{c.public_id}" in post
        }
    try:
        decided = group_decision_take(
            tenant=tenant,
            group_id=listed.group_id,
            decider=decider,
            decision=Decision(approved=approved, reason=reason),
            channel=BULK,
            shown=shown,
        )
    except REFUSALS as exc:
        return _refused_row(row, exc, group=True)
    done = len(decided.decided)
    word = "Approved" if approved else "Denied"
    return {**row, "outcome": "decided", "text": f"{word} {done} call{'s' if done != 1 else ''}."}


def _bulk_outcome(item_id: str, interaction, *, tenant, decider, decision: Decision) -> dict:
    """Decide one item on its own (its own transaction, audit entry and race)."""
    row = {
        "public_id": item_id,
        "prompt": interaction.prompt if interaction else "",
        "summary": held_call_summary(interaction) if interaction else "",
    }
    if interaction is None:
        return {**row, "outcome": "missing", "text": "No such interaction."}
    row["url"] = reverse("approvals:interaction", args=[interaction.public_id])
    try:
        decision_take(
            tenant=tenant,
            interaction_id=interaction.public_id,
            decider=decider,
            decision=decision,
            channel=BULK,
        )
    except REFUSALS as exc:
        return _refused_row(row, exc, group=False)
    return {**row, "outcome": "decided", "text": "Approved." if decision.approved else "Denied."}
