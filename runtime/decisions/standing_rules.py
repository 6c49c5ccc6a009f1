"""Standing rules made from decisions: what may become a rule and what a rule matches
(docs/how-to/policy.md, "Standing rules"), and their writes: made from an approval
("approve and allow similar calls"), revoked, and used by the turn when a held tool's call matches.

A rule's conditions are the condition language of runtime.policy.conditions (the tool
policy's ``when`` is the same), on the fields the tool's schema declares, nested ones by path.
A call matches a rule when every condition holds and it has no field the schema does not
declare: what nobody described cannot pass as "similar".

A rule stands for its maker's approval, so it never allows what its maker could not approve:
it matches only calls held by the policy rule it was made under (one rule of a conditional
entry is not another), and at each use it is asked again whether its maker, as they are now
(role, groups, still a member, a token still valid), could approve the call under that
policy rule as it is now (approvers, stages, ``required``, ``risk``). When not, the call is
held for people as any other, and the rule says why once (on the rule and in the audit).
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from runtime.decisions.approvers import Decider, approval_needs, decider_refusal
from runtime.decisions.decision_models import Effect, Interaction, Receipt, StandingRule
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.receipts import receipt_record
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import DeciderRefused, InvalidParams, NotAllowed, TaskNotFound
from runtime.kernel.task_models import Task
from runtime.policy.approver_syntax import CALLER, DEFAULT_APPROVERS, GROUP_PREFIX, ROLES
from runtime.policy.conditions import (
    conditions_hold,
    conditions_problem,
    conditions_text,
    undeclared_fields,
)
from runtime.policy.lookup import Policy, policy_for
from runtime.policy.needs import Needs, approvers_text
from runtime.policy.rules import PolicyRule, policy_entry
from runtime.tools.catalog import tool_spec
from tenants.models import ApiToken, ApproverGroup, Membership

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


def rule_refusal(
    agent, server: str, tool: str, arguments, policy: Policy | None = None
) -> str | None:
    """Why calls of this tool with these arguments may not be allowed by a standing rule (the
    policy rule that holds them now, ``policy`` when the caller has read it), or None."""
    policy = policy or policy_for(agent, server, tool, arguments)
    if policy.action != "approve":
        return f"the policy for {server}/{tool} is {policy.action}, not approve"
    # ``risk: high`` may be said in the policy rule or on the tool itself (AGENT.md tools).
    if policy.trust.high_risk:
        return f"{server}/{tool} is risk: high: each call needs its own decision"
    if len(policy.stages) > 1:
        return f"{server}/{tool} is approved in {len(policy.stages)} stages, by several people"
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
) -> tuple[Effect, datetime | None, dict]:
    """Check that a rule can be made from this approval by this decider, before the approval
    is given (so that a wrong form approves nothing); (the held call, its expiry time, what
    the rule records of the policy rule it is made under and of its maker).

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
    # The policy as the approval's needs read it (the held call, the agent's policy now).
    policy = needs.policy or policy_for(agent, effect.server, effect.tool, effect.arguments)
    why_not = rule_refusal(
        agent, effect.server, effect.tool, effect.arguments, policy
    ) or needs_refusal(needs)
    if why_not:
        raise NotAllowed(f"No standing rule: {why_not}.", interactionId=interaction.public_id)
    maker = _maker_fields(interaction.tenant_id, decider)
    if maker is None:
        raise NotAllowed(
            "No standing rule: a rule is made by a member signed in, or a program with an "
            "operator token, whose right to approve is checked again at each use.",
            interactionId=interaction.public_id,
        )
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
    # The policy rule that holds the call now (the decider was checked against it): the
    # rule matches only calls that this one holds.
    return effect, expires_at, {**maker, "policy_rule": policy.rule.stored() if policy.rule else {}}


def _maker_fields(tenant_id: int, decider: Decider) -> dict | None:
    """What a rule records of its maker, to ask at each use whether they may still approve:
    a member (``membership_id``, else the member of their subject), or a program's token;
    None for anyone else (the caller, a decider no member or token stands behind)."""
    if decider.kind == Decider.PROGRAM and decider.token_id is not None:
        return {"maker_kind": StandingRule.Maker.PROGRAM, "maker_token_id": decider.token_id}
    if decider.kind != Decider.PERSON:
        return None
    membership_id = decider.membership_id
    if membership_id is None and decider.subject.startswith("user:"):
        membership_id = (
            Membership.objects.filter(
                tenant_id=tenant_id, user__email=decider.subject[len("user:") :]
            )
            .values_list("pk", flat=True)
            .first()
        )
    if membership_id is None:
        return None
    return {"maker_kind": StandingRule.Maker.PERSON, "maker_membership_id": membership_id}


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
    effect, expires_at, made = rule_check(
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
        **made,
    )
    audit_record(
        tenant_id=tenant.pk,
        actor=decider.subject,
        action="rule_created",
        via=via,
        interaction=interaction,
        task=interaction.task,
        detail={
            **_rule_detail(rule),
            "policyRule": rule.policy_rule.get("label", ""),
            "prompt": conditions_text(conditions),
        },
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

    The policy is read again at each call, and the rule's maker as they are now: a rule
    matches only calls held by the policy rule it was made under, and allows one only while
    its maker could approve it under that rule now (rule_inapplicable_reason); one that no
    longer could is passed over, and says why once (on the rule and in the audit). A call with
    a field its tool's schema does not declare is never allowed by a rule.
    """
    policy = policy_for(task.agent, server, tool, arguments)
    if policy.action != "approve":
        return None
    now = timezone.now()
    candidates = (
        StandingRule.objects.filter(
            tenant_id=task.tenant_id,
            agent_id=task.agent_id,
            server=server,
            tool=tool,
            revoked_at__isnull=True,
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now), caller__in=("", task.subject))
        # Who made each rule, as they are now, read with it: no query per rule.
        .select_related("maker_membership__user", "maker_token")
    )
    # Why no rule may allow a call that this policy rule holds (risk: high, more than one
    # person): said by each rule made under it that the call matches.
    refusal = rule_refusal(task.agent, server, tool, arguments, policy)
    for rule in candidates.order_by("created_at", "pk"):
        if not conditions_hold(rule.conditions, arguments):
            continue
        if not rule_made_under(rule.policy_rule, policy.rule):
            if _made_under_gone(task.agent, server, tool, rule.policy_rule):
                label = rule.policy_rule.get("label") or "its entry"
                _rule_inapplicable(
                    rule,
                    task=task,
                    reason=f"the policy rule it was made under ({label}) is no longer in the "
                    f"policy of {server}/{tool}",
                )
            continue
        why = refusal or rule_inapplicable_reason(rule, policy, now=now)
        if why:
            _rule_inapplicable(rule, task=task, reason=why)
            continue
        # Read only once a rule matches: for a tenant's server, its row.
        schema = (tool_spec(task.agent, server, tool) or {}).get("schema")
        if undeclared_fields(arguments, schema):
            return None
        return rule
    return None


def rule_made_under(made: dict, holding: PolicyRule | None) -> bool:
    """Whether ``holding``, the policy rule that holds a call now, is the one a rule was made
    under (``made``, as StandingRule.policy_rule stores it): the same entry and, in a list of
    rules, the rule with the same conditions (its number may move when rules are added
    before it; what it asks is checked at each use, rule_inapplicable_reason)."""
    if holding is None:
        return False
    if not made:
        # Made before rules recorded their policy rule: the safe reading is that it was made
        # under an entry that is no list of rules, so that it never allows a call that one
        # rule of a conditional entry holds (that rule may be another than its maker's).
        return not holding.conditional
    source = made.get("source") or ("policy" if made.get("entry") else "default")
    if (made.get("entry") or "", source) != (holding.entry, holding.source):
        return False
    if holding.source == "annotations":
        # The tenant's default for one kind of tool: its version names the kind.
        return made.get("version") == holding.version
    return (made.get("rule") is None) == (holding.index is None) and list(
        made.get("when") or ()
    ) == list(holding.when)


def _made_under_gone(agent, server: str, tool: str, made: dict) -> bool:
    """The policy rule a rule was made under no longer holds any call of the tool: its entry
    is no longer the tool's, or is no longer a list of rules (or has become one), or no rule
    of it has those conditions. (Only a rule made under an entry can be told gone.)"""
    if not made or (made.get("source") or "policy") != "policy" or not made.get("entry"):
        return False
    key, written = policy_entry(agent, server, tool)
    if key != made["entry"]:
        return True
    if made.get("rule") is None:
        return isinstance(written, list)
    if not isinstance(written, list):
        return True
    when = list(made.get("when") or ())
    return not any(isinstance(r, dict) and list(r.get("when") or ()) == when for r in written)


def rule_inapplicable_reason(rule: StandingRule, policy: Policy, *, now=None) -> str | None:
    """Why ``rule``'s maker, as they are now, could not approve a call that ``policy`` (the
    rule of the tool policy that holds it now) holds, or None when they could: a member
    still deciding whose role or group is among its approvers, or a program (an operator in
    no group) whose token is still valid."""
    who = rule.created_by
    membership_id = None
    if rule.maker_kind == StandingRule.Maker.PERSON:
        membership = rule.maker_membership
        if membership is None:
            return f"its maker {who} is no longer a member"
        if not membership.user.is_active:
            return f"its maker {who} can no longer sign in (the account is deactivated)"
        if membership.role not in ROLES:
            return f"its maker {who} is now a {membership.role}, who decides nothing"
        role, membership_id = membership.role, membership.pk
    elif rule.maker_kind == StandingRule.Maker.PROGRAM:
        token = rule.maker_token
        now = now or timezone.now()
        if (
            token is None
            or token.kind != ApiToken.Kind.OPERATOR
            or token.revoked_at is not None
            or (token.expires_at is not None and token.expires_at <= now)
        ):
            return f"the operator token its maker {who} decided with is revoked, expired or gone"
        role = "operator"
    else:
        return (
            "who made it was not recorded (it was made before rules kept their maker): "
            "make it again"
        )
    approvers = tuple(policy.approvers) or DEFAULT_APPROVERS
    if role in approvers:
        return None
    groups = [a[len(GROUP_PREFIX) :] for a in approvers if a.startswith(GROUP_PREFIX)]
    # One read, only when a group could make the difference (a program is in none).
    if (
        groups
        and membership_id is not None
        and ApproverGroup.objects.filter(
            tenant_id=rule.tenant_id, slug__in=groups, members=membership_id
        ).exists()
    ):
        return None
    people = [a for a in approvers if a != CALLER] or list(approvers)
    held_by = policy.rule.label() if policy.rule else f"{rule.server}/{rule.tool}"
    return (
        f"its maker {who} ({role}) may not approve these calls now: only "
        f"{approvers_text(people)} may, under {held_by}"
    )


def _rule_inapplicable(rule: StandingRule, *, task: Task, reason: str) -> None:
    """Say that ``rule`` no longer allows the calls it matches, and why: on the rule (the rules
    page) and in the audit, when the reason changes, never at every call it passes over."""
    reason = reason[: StandingRule._meta.get_field("inapplicable_reason").max_length]
    if rule.inapplicable_reason == reason:
        return
    now = timezone.now()
    # Conditional: of two turns that find the same reason, one writes it and its audit row.
    changed = (
        StandingRule.objects.filter(pk=rule.pk)
        .exclude(inapplicable_reason=reason)
        .update(inapplicable_reason=reason, inapplicable_since=now)
    )
    rule.inapplicable_reason, rule.inapplicable_since = reason, now
    if changed != 1:
        return
    audit_record(
        tenant_id=task.tenant_id,
        actor=f"rule:{rule.public_id}",
        action="rule_inapplicable",
        via="rule",
        task=task,
        detail={
            "rule": rule.public_id,
            "ruleCreatedBy": rule.created_by,
            "agent": task.agent.slug,
            "server": rule.server,
            "tool": rule.tool,
            "reason": reason,
            # The audit page shows the reason beside the prompt.
            "prompt": f"rule {rule.public_id} no longer allows {rule.server} / {rule.tool}",
        },
    )


def rule_use_record(*, rule: StandingRule, task: Task, effect: Effect) -> None:
    """A call allowed by ``rule``: counted on the rule and journalled with the rule as its
    decider (inside the turn's transaction, with the effect it allowed)."""
    now = timezone.now()
    # A rule that allows a call again no longer says it does not.
    StandingRule.objects.filter(pk=rule.pk).update(
        uses=F("uses") + 1, last_used_at=now, inapplicable_reason="", inapplicable_since=None
    )
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
