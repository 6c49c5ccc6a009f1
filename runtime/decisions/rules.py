"""Standing rules made from decisions: what may become a rule and what a rule matches
(README "Standing rules"), and their writes: made from an approval ("approve and allow
similar calls"), revoked, and used by the turn when a held tool's call matches.

A condition is ``{"field", "op", "value"}`` on a top-level field of the call's arguments:
``equals`` (the same JSON value), ``in`` (one of a list) or ``prefix`` (a string that starts
with the value). A call matches a rule when every condition holds; a field the call lacks
never matches.
"""

from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from runtime.agents.tools import policy_rule, tool_spec
from runtime.decisions.approvers import Decider, Needs, approval_needs, decider_refusal
from runtime.decisions.decision_models import Effect, Interaction, Receipt, StandingRule
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.receipts import receipt_record, tool_trust
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import DeciderRefused, InvalidParams, NotAllowed, TaskNotFound
from runtime.kernel.task_models import Task

OPS = ("equals", "in", "prefix")
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
MAX_CONDITIONS = 20
SCALAR_TYPES = ("string", "integer", "number", "boolean")


def rule_refusal(agent, server: str, tool: str) -> str | None:
    """Why calls of this tool may not be allowed by a standing rule (its policy now), or None."""
    rule = policy_rule(agent, server, tool)
    action = rule.get("action", "approve") if isinstance(rule, dict) else rule
    if action != "approve":
        return f"the policy for {server}/{tool} is {action}, not approve"
    # ``risk: high`` may be said in the policy entry or on the tool itself (AGENT.md tools).
    if tool_trust(agent, server, tool).high_risk:
        return f"{server}/{tool} is risk: high: each call needs its own decision"
    if isinstance(rule, dict):
        if rule.get("required") == 2:
            return f"{server}/{tool} needs two people's approval (required: 2)"
    return None


def schema_fields(schema: dict | None) -> dict[str, str]:
    """The top-level fields a condition can name: {name: JSON type} of the scalar ones."""
    properties = (schema or {}).get("properties") or {}
    fields = {}
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(kind, list):
            kind = next((k for k in kind if k in SCALAR_TYPES), None)
        if kind in SCALAR_TYPES:
            fields[str(name)] = kind
        elif isinstance(spec, dict) and "enum" in spec and kind is None:
            fields[str(name)] = "string"
    return fields


def _storable(text: str) -> bool:
    # PostgreSQL's jsonb refuses NUL and lone surrogates (a DataError mid-transaction).
    return (
        len(text) <= 1000
        and "\x00" not in text
        and not any("\ud800" <= char <= "\udfff" for char in text)
    )


def _typed(value, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str) and _storable(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)


def conditions_problem(conditions, schema: dict | None) -> str | None:
    """Why ``conditions`` cannot be a rule's for a tool of this schema, or None."""
    if not isinstance(conditions, list):
        return "conditions must be a list"
    if len(conditions) > MAX_CONDITIONS:
        return f"at most {MAX_CONDITIONS} conditions"
    fields = schema_fields(schema)
    seen = set()
    for condition in conditions:
        if not isinstance(condition, dict) or set(condition) != {"field", "op", "value"}:
            return "each condition is {field, op, value}"
        name, op, value = condition["field"], condition["op"], condition["value"]
        if name not in fields:
            return f"{name!r} is not a top-level field of the tool's arguments"
        if name in seen:
            return f"{name}: one condition per field"
        seen.add(name)
        if op not in OPS:
            return f"{name}: op must be one of {', '.join(OPS)}"
        kind = fields[name]
        if op == "prefix":
            if kind != "string" or not isinstance(value, str) or not value or not _storable(value):
                return f"{name}: prefix takes a non-empty text, on a text field"
        elif op == "in":
            if not isinstance(value, list) or not value or len(value) > 50:
                return f"{name}: in takes a list of 1 to 50 values"
            if not all(_typed(v, kind) for v in value):
                return f"{name}: every value must be a {kind}"
        elif not _typed(value, kind):
            return f"{name}: the value must be a {kind}"
    return None


def condition_holds(condition: dict, arguments: dict) -> bool:
    name = condition["field"]
    if name not in arguments:
        return False
    actual, op, value = arguments[name], condition["op"], condition["value"]
    if op == "prefix":
        return isinstance(actual, str) and actual.startswith(value)
    if op == "in":
        return any(_same(actual, v) for v in value)
    return _same(actual, value)


def _same(actual, expected) -> bool:
    # JSON equality: true is not 1, 1 is 1.0.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    return actual == expected


def conditions_hold(conditions: list, arguments: dict) -> bool:
    return all(condition_holds(c, arguments) for c in conditions or ())


def conditions_text(conditions: list) -> str:
    """The conditions as the rules page shows them."""
    parts = []
    for c in conditions or ():
        if c["op"] == "in":
            parts.append(f"{c['field']} in {', '.join(map(str, c['value']))}")
        elif c["op"] == "prefix":
            parts.append(f"{c['field']} starts with {c['value']}")
        else:
            parts.append(f"{c['field']} = {c['value']}")
    return "; ".join(parts) or "any arguments"


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
) -> tuple[Effect, object]:
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
    why_not = rule_refusal(agent, effect.server, effect.tool) or needs_refusal(needs)
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
        return f"{where} needs two people's approval (required: {needs.required})"
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
