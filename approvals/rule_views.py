"""The rules page: the tenant's standing rules (what each allows, under which rule of the
tool policy, who made it, when it expires, how often it was used, why it no longer applies),
and their revocation. A rule is made with an approval, by
the decision flow (runtime.decisions.flow)."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from runtime.decisions.decision_selectors import rules_for_tenant
from runtime.decisions.standing_rules import DURATION_LABELS, rule_revoke
from runtime.kernel.errors import NotAllowed, TaskNotFound
from runtime.policy.conditions import conditions_text
from tenants.access import member_required, require_decider


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
        elif rule.inapplicable_reason:
            # In force, but the last call it matched was held: its maker may no longer
            # approve such calls, or its policy rule is gone (runtime.decisions.standing_rules).
            state = "inapplicable"
        else:
            state = "active"
        rows.append(
            {
                "rule": rule,
                "state": state,
                "conditions": conditions_text(rule.conditions),
                "made_under": (rule.policy_rule or {}).get("label", ""),
            }
        )
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
