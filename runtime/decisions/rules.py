"""Standing rules made from decisions: what may become a rule and what a rule matches
(README "Standing rules"), and their writes: made from an approval ("approve and allow
similar calls"), revoked, and used by the turn when a held tool's call matches.

A rule's conditions are the condition language of runtime.agents.conditions (the tool
policy's ``when`` is the same), on the fields the tool's schema declares, nested ones by path.
A call matches a rule when every condition holds and it has no field the schema does not
declare: what nobody described cannot pass as "similar".
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from runtime.agents.conditions import (
    conditions_hold,
    conditions_problem,
    conditions_text,
    undeclared_fields,
)
from runtime.agents.tools import policy_for, tool_spec
from runtime.decisions.approvers import Decider, Needs, approval_needs, decider_refusal
from runtime.decisions.decision_models import Effect, Interaction, Receipt, StandingRule
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.receipts import receipt_record, tool_trust
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import DeciderRefused, InvalidParams, NotAllowed, TaskNotFound
from runtime.kernel.task_models import Task

# How long a rule lasts; "forever" is an admin's choice only.
DURATIONS = {
    "1h": timedelta(hours=1),
    "8h": timedelta(hours=8),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
DURATION_LABELS = {
    "1h": "1 hour",
    "8h": "8 hours",
    "1d": "1 day",
    "7d": "7 days",
    "30d": "30 days",
    "forever": "until revoked (admins only)",
}
FOREVER = "forever"


def rule_refusal(agent, server: str, tool: str, arguments) -> str | None:
    """Why calls of this tool with these arguments may not be allowed by a standing rule (the
    policy rule that holds them now), or None."""
    policy = policy_for(agent, server, tool, arguments)
    if policy.action != "approve":
        return f"the policy for {server}/{tool} is {policy.action}, not approve"
    # ``risk: high`` may be said in the policy rule or on the tool itself (AGENT.md tools).
    if tool_trust(agent, server, tool, arguments).high_risk:
        return f"{server}/{tool} is risk: high: each call needs its own decision"
    if policy.required > 1:
        return f"{server}/{tool} needs {policy.required} people's approval (required)"
    return None


def _rule_detail(rule: StandingRule) -> dict:
    return {
        "rule": rule.public_id,
        "agent": rule.agent.slug,
        "server": rule.server,
        "tool": rule.tool,
        "caller": rule.caller,
        "conditions": rule.conditions,
        "expiresAt": rule.expires_at.isoformat() if rule.expires_at else None,
    }


def rule_check(
    *,
    interaction: Interaction,
    decider: Decider,
    conditions: list,
    duration: str,
    needs: Needs | None = None,
) -> tuple[Effect, datetime | None]:
    """Check that a rule can be made from this approval by this decider, before the approval
    is given (so that a wrong form approves nothing); (the held call, its expiry time).

    ``needs``: what the approval needs now (runtime.decisions.approvers.approval_needs), when
    the caller has it: a rule is never made from an approval that needs two people or a
    step-up, whether its policy said so when it opened or says so now."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        raise TaskNotFound("No such approval.", interactionId=interaction.public_id)
    needs = needs or approval_needs(interaction)
    refusal = decider_refusal(interaction, decider, needs)
    if refusal:
        raise DeciderRefused(refusal, interactionId=interaction.public_id)
    effect = held_call_of(interaction)
    if effect is None:
        raise TaskNotFound("The approval holds no tool call.", interactionId=interaction.public_id)
    agent = interaction.task.agent
    why_not = rule_refusal(agent, effect.server, effect.tool, effect.arguments) or needs_refusal(
        needs
    )
    if why_not:
        raise NotAllowed(f"No standing rule: {why_not}.", interactionId=interaction.public_id)
    if duration == FOREVER:
        if decider.role != "admin":
            raise DeciderRefused("Only an admin can make a rule without an expiry.")
        expires_at = None
    elif duration in DURATIONS:
        expires_at = timezone.now() + DURATIONS[duration]
    else:
        raise InvalidParams("duration", f"must be one of {', '.join(DURATIONS)}")
    spec = tool_spec(agent, effect.server, effect.tool) or {}
    problem = conditions_problem(conditions, spec.get("schema"))
    if problem:
        raise InvalidParams("conditions", problem)
    return effect, expires_at


def needs_refusal(needs: Needs) -> str | None:
    """Why no rule may come from an approval that needs this (as it opened, or now)."""
    where = f"{needs.server}/{needs.tool}"
    if needs.high_risk:
        return f"{where} is risk: high: each call needs its own decision"
    if needs.required > 1:
        return f"{where} needs {needs.required} people's approval (required)"
    return None


@transaction.atomic(durable=True)
def rule_create(
    *,
    tenant,
    interaction_id: str,
    decider: Decider,
    caller_only: bool,
    conditions: list,
    duration: str,
    via: str = "page",
) -> StandingRule:
    """Make a standing rule from an approval the decider just gave: the same agent and
    tool, optionally only for the same caller, with conditions on the arguments."""
    interaction = (
        Interaction.objects.filter(tenant=tenant, public_id=interaction_id)
        .select_related("task", "task__agent")
        .first()
    )
    if interaction is None:
        raise TaskNotFound("No such approval.", interactionId=interaction_id)
    # Made from the decider's own approval: nobody turns another's decision into a rule.
    if (
        interaction.state != Interaction.State.ANSWERED
        or (interaction.answer or {}).get("approved") is not True
        or interaction.answered_by != decider.subject
    ):
        raise NotAllowed(
            "A rule is made from your own approval of this call.", interactionId=interaction_id
        )
    effect, expires_at = rule_check(
        interaction=interaction, decider=decider, conditions=conditions, duration=duration
    )
    rule = StandingRule.objects.create(
        tenant=tenant,
        agent=interaction.task.agent,
        server=effect.server,
        tool=effect.tool,
        caller=interaction.task.subject if caller_only else "",
        conditions=conditions,
        created_by=decider.subject,
        created_from=interaction,
        expires_at=expires_at,
    )
    audit_record(
        tenant_id=tenant.pk,
        actor=decider.subject,
        action="rule_created",
        via=via,
        interaction=interaction,
        task=interaction.task,
        detail={**_rule_detail(rule), "prompt": conditions_text(conditions)},
    )
    return rule


@transaction.atomic(durable=True)
def rule_revoke(*, tenant, rule_id: str, by: str, via: str = "page") -> StandingRule:
    """Revoke a standing rule: from now on its calls are held again."""
    rule = (
        StandingRule.objects.select_for_update(of=("self",))
        .select_related("agent")
        .filter(tenant=tenant, public_id=rule_id)
        .first()
    )
    if rule is None:
        raise TaskNotFound("No such rule.", ruleId=rule_id)
    if rule.revoked_at is not None:
        raise NotAllowed(f"Rule {rule_id} was already revoked by {rule.revoked_by}.")
    rule.revoked_at = timezone.now()
    rule.revoked_by = by
    rule.save(update_fields=["revoked_at", "revoked_by"])
    audit_record(
        tenant_id=tenant.pk,
        actor=by,
        action="rule_revoked",
        via=via,
        detail=_rule_detail(rule),
    )
    return rule


def rule_for_call(*, task: Task, server: str, tool: str, arguments: dict) -> StandingRule | None:
    """The standing rule that allows this call now, or None (the turn holds it as before).

    The policy is read again at each call: a tool made ``risk: high`` or ``required: 2``
    since the rule was made is never allowed by it. A call with a field its tool's schema
    does not declare is never allowed by a rule.
    """
    if rule_refusal(task.agent, server, tool, arguments):
        return None
    now = timezone.now()
    candidates = StandingRule.objects.filter(
        tenant_id=task.tenant_id,
        agent_id=task.agent_id,
        server=server,
        tool=tool,
        revoked_at__isnull=True,
    ).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now), caller__in=("", task.subject))
    for rule in candidates.order_by("created_at", "pk"):
        if conditions_hold(rule.conditions, arguments):
            # Read only once a rule matches: for a tenant's server, its row.
            schema = (tool_spec(task.agent, server, tool) or {}).get("schema")
            if undeclared_fields(arguments, schema):
                return None
            return rule
    return None


def rule_use_record(*, rule: StandingRule, task: Task, effect: Effect) -> None:
    """A call allowed by ``rule``: counted on the rule and journalled with the rule as its
    decider (inside the turn's transaction, with the effect it allowed)."""
    now = timezone.now()
    StandingRule.objects.filter(pk=rule.pk).update(uses=F("uses") + 1, last_used_at=now)
    # The rule's decision is a receipt like a person's (channel "rule"): the call is sent only
    # while the arguments and the agent's policy still match it.
    receipt_record(
        effect=effect,
        agent=task.agent,
        decision=Receipt.Decision.APPROVED,
        decider=f"rule:{rule.public_id}",
        channel="rule",
        rule_id=rule.public_id,
    )
    audit_record(
        tenant_id=task.tenant_id,
        actor=f"rule:{rule.public_id}",
        action="allowed_by_rule",
        via="rule",
        task=task,
        detail={
            "rule": rule.public_id,
            "ruleCreatedBy": rule.created_by,
            "effect": effect.public_id,
            "server": effect.server,
            "tool": effect.tool,
            "argumentsHash": effect.arguments_hash,
            "prompt": f"{effect.server} / {effect.tool} allowed by rule {rule.public_id}",
        },
    )
