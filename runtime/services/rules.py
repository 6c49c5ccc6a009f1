"""Standing rules: made from an approval ("approve and allow similar calls"), revoked, and
used by the turn when a held tool's call matches (README "Standing rules")."""

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from runtime.approvers import Decider, decider_refusal
from runtime.audit import audit_record
from runtime.errors import DeciderRefused, InvalidParams, NotAllowed, TaskNotFound
from runtime.models import Effect, Interaction, Receipt, StandingRule, Task
from runtime.receipts import receipt_record
from runtime.rules import (
    DURATIONS,
    FOREVER,
    conditions_hold,
    conditions_problem,
    conditions_text,
    rule_refusal,
)
from runtime.tools import tool_spec


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
    *, interaction: Interaction, decider: Decider, conditions: list, duration: str
) -> tuple[Effect, object]:
    """Check that a rule can be made from this approval by this decider, before the approval
    is given (so that a wrong form approves nothing); (the held call, its expiry time)."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        raise TaskNotFound("No such approval.", interactionId=interaction.public_id)
    refusal = decider_refusal(interaction, decider)
    if refusal:
        raise DeciderRefused(refusal, interactionId=interaction.public_id)
    effect = Effect.objects.filter(
        tenant_id=interaction.tenant_id, public_id=interaction.public_id
    ).first()
    if effect is None:
        raise TaskNotFound("The approval holds no tool call.", interactionId=interaction.public_id)
    agent = interaction.task.agent
    why_not = rule_refusal(agent, effect.server, effect.tool)
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
    since the rule was made is never allowed by it.
    """
    if rule_refusal(task.agent, server, tool):
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
