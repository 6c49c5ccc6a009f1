"""Who may decide and standing rules on the operator pages: what the decision page shows
of them, "approve and allow similar calls", and the rules page (list, revoke).

Views are thin: the rules themselves (who may decide, what a rule matches, when it may be
made) are the core's (runtime.decisions.approvers, runtime.decisions.rules)."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from approvals.forms import AllowSimilarForm
from runtime.agents.tools import tool_spec
from runtime.decisions.approvers import (
    Decider,
    approvals_progress,
    approvers_text,
    decider_refusal,
    effective_approvers,
)
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import held_call_for, rules_for_tenant
from runtime.decisions.rules import (
    DURATION_LABELS,
    conditions_text,
    rule_check,
    rule_create,
    rule_refusal,
    rule_revoke,
)
from runtime.kernel.errors import DeciderRefused, InvalidParams, NotAllowed, TaskNotFound
from tenants.access import member_required, require_decider


def decider_of(request) -> Decider:
    return Decider.of_member(request.membership, request.user)


def allow_similar_form(request, interaction: Interaction, *, data=None, held_call=None):
    """The "allow similar calls" form for an open approval, or None when no rule may be made
    for its tool (not a held call, risk: high, required: 2, not approve)."""
    held_call = held_call or held_call_for(interaction=interaction)
    if held_call is None:
        return None
    agent = interaction.task.agent
    if rule_refusal(agent, held_call.server, held_call.tool):
        return None
    spec = tool_spec(agent, held_call.server, held_call.tool) or {}
    return AllowSimilarForm(
        data,
        schema=spec.get("schema"),
        arguments=held_call.arguments or {},
        is_admin=request.membership.role == "admin",
        prefix="rule",
    )


def approvers_context(request, interaction: Interaction, held_call, *, form=None) -> dict:
    """What the decision page shows of who may decide, the approvals so far and the rule form."""
    is_open = interaction.state == Interaction.State.OPEN
    decider = decider_of(request)
    refusal = decider_refusal(interaction, decider) if is_open else None
    approved_already = any(
        entry.get("by") == decider.subject for entry in interaction.approvals or ()
    )
    named = bool(interaction.approvers or interaction.widened_to)
    rule_form = None
    rule_why_not = ""
    if is_open and refusal is None and interaction.kind == Interaction.Kind.APPROVAL and held_call:
        rule_why_not = rule_refusal(interaction.task.agent, held_call.server, held_call.tool) or ""
        if not rule_why_not:
            rule_form = form or allow_similar_form(request, interaction, held_call=held_call)
    return {
        "approvers_named": approvers_text(effective_approvers(interaction)) if named else "",
        "widened_to": interaction.widened_to or [],
        "progress": approvals_progress(interaction),
        "approvals_so_far": interaction.approvals or [],
        "decide_refusal": refusal,
        "approved_already": approved_already,
        "rule_form": rule_form,
        "rule_why_not": rule_why_not,
    }


def bulk_refusal(interaction: Interaction, decider: Decider | None) -> str | None:
    """Why bulk triage leaves an approval out for this decider, or None."""
    if interaction.approvals_required > 1:
        return "two people must approve it (required: 2); decide it on its own page."
    if decider is not None:
        refusal = decider_refusal(interaction, decider)
        if refusal:
            return refusal
    return None


def rule_precheck(request, interaction: Interaction, form) -> str | None:
    """Why the rule of this form cannot be made (checked before approving), or None."""
    try:
        rule_check(
            interaction=interaction,
            decider=decider_of(request),
            conditions=form.cleaned_data["conditions"],
            duration=form.cleaned_data["duration"],
        )
    except (DeciderRefused, NotAllowed, InvalidParams, TaskNotFound) as exc:
        return exc.message
    return None


def rule_after_approval(request, interaction: Interaction, form) -> str | None:
    """Make the rule of "approve and allow similar calls" once the approval stands; the
    message for the person (None: the plain "Approved.")."""
    try:
        rule = rule_create(
            tenant=request.membership.tenant,
            interaction_id=interaction.public_id,
            decider=decider_of(request),
            caller_only=form.cleaned_data["caller_only"],
            conditions=form.cleaned_data["conditions"],
            duration=form.cleaned_data["duration"],
        )
    except (DeciderRefused, NotAllowed, InvalidParams, TaskNotFound) as exc:
        # The approval stands (its own transaction); only the rule was not made.
        messages.error(request, f"Approved, but no rule was made: {exc.message}")
        return None
    return (
        f"Approved, and similar calls are allowed by rule {rule.public_id} "
        f"({conditions_text(rule.conditions)})."
    )


# --- the rules page ------------------------------------------------------------------------


@require_GET
@member_required
def rules(request):
    now = timezone.now()
    rows = []
    for rule in rules_for_tenant(tenant=request.membership.tenant):
        if rule.revoked_at is not None:
            state = "revoked"
        elif rule.expires_at is not None and rule.expires_at <= now:
            state = "expired"
        else:
            state = "active"
        rows.append({"rule": rule, "state": state, "conditions": conditions_text(rule.conditions)})
    return render(
        request,
        "approvals/rules.html",
        {
            "nav": "rules",
            "rows": rows,
            "can_decide": request.membership.can_decide,
            "durations": DURATION_LABELS,
        },
    )


@require_POST
@member_required
def rule_revoke_view(request, public_id: str):
    require_decider(request.membership)
    try:
        rule = rule_revoke(
            tenant=request.membership.tenant, rule_id=public_id, by=request.user.subject
        )
    except TaskNotFound as exc:
        raise Http404("No such rule.") from exc
    except NotAllowed as exc:
        messages.error(request, exc.message)
        return redirect("approvals:rules")
    messages.success(request, f"Rule {rule.public_id} revoked: its calls are held again.")
    return redirect("approvals:rules")
