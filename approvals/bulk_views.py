"""Bulk triage: approve or deny many open approvals with one reason, each decided on its own
by the one decision flow (channel ``bulk``: its own transaction, audit entry and race). What
bulk triage leaves out (questions, ``bulk: false``, two people, who may not decide, a step-up
not made) is the flow's to say; this view lists each item's outcome."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from approvals.decision_views import decider_of
from approvals.inbox_views import inbox_filters_from
from runtime.agents.agent_selectors import agents_for_tenant
from runtime.decisions.decision_selectors import interactions_for_bulk
from runtime.decisions.flow import BULK, Decision, decision_take
from runtime.decisions.inbox import inbox_interactions
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
    decision = Decision(approved=choice == "approve", reason=reason)
    found = interactions_for_bulk(tenant=tenant, public_ids=ids)
    decider = decider_of(request)
    results = [
        _bulk_outcome(
            item_id, found.get(item_id), tenant=tenant, decider=decider, decision=decision
        )
        for item_id in ids
    ]
    summary = {}
    for result in results:
        summary[result["outcome"]] = summary.get(result["outcome"], 0) + 1
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


def _bulk_outcome(item_id: str, interaction, *, tenant, decider, decision: Decision) -> dict:
    """Decide one item on its own (its own transaction, audit entry and race)."""
    row = {"public_id": item_id, "prompt": interaction.prompt if interaction else ""}
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
    except (ChannelRefused, DeciderRefused) as exc:
        return {**row, "outcome": "left_out", "text": f"Left out: {exc.message}"}
    except StepUpRequired:
        return {
            **row,
            "outcome": "left_out",
            "text": "Left out: the tool is marked risk: high and needs a recent "
            "re-authentication (decide it on its own page).",
        }
    except AlreadyDecided as exc:
        who = exc.interaction.answered_by or "someone"
        return {**row, "outcome": "already", "text": f"Already decided by {who}."}
    except (InvalidParams, TaskNotFound) as exc:
        return {**row, "outcome": "error", "text": str(getattr(exc, "description", exc))}
    return {**row, "outcome": "decided", "text": "Approved." if decision.approved else "Denied."}
