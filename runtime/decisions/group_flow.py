"""Deciding an approval group at once (runtime.decisions.approval_groups): the one decision
flow (runtime.decisions.flow) taken for each of the group's open calls, in one transaction
under the task's row lock, so that every check a decision makes is made for every call (who
decides, step-up, quorum and stages, the arguments shown) and every call gets its own audit
row and receipt; the first refusal of any call changes nothing. Deciding one call of a group
is a decision like any other (``decision_take`` on its interaction, from any channel).

What a surface shows of a group (each call with the facts its decision page shows) is
``group_facts``; reads only.
"""

from dataclasses import dataclass

from django.db import transaction

from runtime.decisions.approval_groups import group_members, group_pause_set
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.decision_selectors import held_call_known, interaction_locked
from runtime.decisions.facts import DecisionFacts, decision_facts
from runtime.decisions.flow import Decision, decision_take_locked
from runtime.kernel.errors import AlreadyDecided, DecisionMisfit, InvalidParams, TaskNotFound


@dataclass(frozen=True)
class GroupDecided:
    """What a decision on a group came to: each of its calls as the decision left it (in the
    reply's order), and the ids of those it decided or recorded an approval of."""

    group_id: str
    calls: list[Interaction]
    decided: tuple[str, ...]

    @property
    def waiting(self) -> list[Interaction]:
        """The calls still open: another person's approval (a quorum), or none."""
        return [c for c in self.calls if c.state == Interaction.State.OPEN]


def group_decision_take(
    *,
    tenant,
    group_id: str,
    decider: Decider,
    decision: Decision,
    channel: str,
    shown: dict[str, str | None] | None = None,
) -> GroupDecided:
    """Take ``decider``'s one decision (approve or deny, with a reason) on every call of the
    tenant's group still open, through ``channel``: all of them or, at the first refusal of
    any, none (see the module).

    ``shown``: the calls the decider was shown, {interaction id: SHA-256 of the arguments
    shown, or None}: the decision binds exactly those. A call shown that someone decided since
    is AlreadyDecided, an open call not shown is InvalidParams, and each call's arguments must
    still be those shown. Raises TaskNotFound (another tenant's group as a missing one),
    DecisionMisfit, AlreadyDecided (nothing open), and any call's refusal (DeciderRefused,
    StepUpRequired, ChannelRefused, UnsupportedOperation, InvalidParams)."""
    _group_decision_fit(decision)
    lead = (
        Interaction.objects.filter(tenant=tenant, group_id=group_id)
        .order_by("group_position")
        .values_list("public_id", flat=True)
        .first()
        if group_id
        else None
    )
    if lead is None:
        raise TaskNotFound("No such group.", groupId=group_id)
    with transaction.atomic(durable=True):
        with interaction_locked(tenant=tenant, interaction_id=lead) as (task, _):
            calls = group_members(task=task, group_id=group_id)
            effects = Effect.objects.filter(
                tenant_id=task.tenant_id, task=task, public_id__in=[c.public_id for c in calls]
            )
            held = {effect.public_id: effect for effect in effects}
            for call in calls:
                effect = held.get(call.public_id)
                if effect is not None:
                    effect.task = task
                held_call_known(call, effect)
            waiting = _shown_check(calls, shown)
            group_decisions_take_locked(
                task=task,
                group_id=group_id,
                calls=calls,
                decisions={
                    call.public_id: Decision(
                        approved=decision.approved,
                        reason=decision.reason,
                        shown_hash=(shown or {}).get(call.public_id),
                    )
                    for call in waiting
                },
                decider=decider,
                channel=channel,
            )
    return GroupDecided(group_id=group_id, calls=calls, decided=tuple(c.public_id for c in waiting))


def group_decisions_take_locked(
    *,
    task,
    group_id: str,
    calls: list[Interaction],
    decisions: dict[str, Decision],
    decider: Decider,
    channel: str,
    message: dict | None = None,
) -> None:
    """Take each of ``decisions`` ({interaction id: its decision}) on the group's open
    ``calls`` (read under the task's row lock, in the caller's transaction), one after the
    other through the one decision flow: the first refusal raises, and the caller's
    transaction then changes nothing. The operators' "approve all" (group_decision_take) and
    a caller's one answer for a group (runtime.turn.intake: interactions/v1 ``answers`` or
    ``all``) both decide here. ``message``: the caller's message that carried the answers,
    kept once in the task's history."""
    # The calls' closes leave the task's status to the end: one status says what the
    # decision came to (interaction_close resumes the turn on the last call's).
    task.group_deciding = True
    try:
        for call in calls:
            if call.public_id in decisions:
                decision_take_locked(
                    task=task,
                    interaction=call,
                    decider=decider,
                    decision=decisions[call.public_id],
                    channel=channel,
                )
    finally:
        task.group_deciding = False
    if any(c.state == Interaction.State.OPEN for c in calls):
        # Some calls closed or recorded an approval, others wait for another person's
        # approval (a quorum): the task says what it waits for now.
        group_pause_set(
            task,
            group_id=group_id,
            members=calls,
            also=("transcript",),
            **({"history_append": message} if message is not None else {}),
        )


def _group_decision_fit(decision: Decision) -> None:
    """A group is approved or denied as its calls stand: one decision, one reason."""
    if decision.value is not None:
        raise DecisionMisfit("value", "A group of approvals takes approved (and a reason).")
    if decision.approved is None:
        raise DecisionMisfit("approved", "Required for an approval: true or false.")
    if decision.arguments is not None:
        raise DecisionMisfit(
            "arguments", "A group is decided as its calls stand: edit a call on its own page."
        )
    if decision.allow_similar is not None:
        raise DecisionMisfit(
            "allowSimilar", "A rule is made from one call's approval, on its own page."
        )


def _shown_check(calls: list[Interaction], shown: dict | None) -> list[Interaction]:
    """The open calls the decision takes: every one, and (``shown``) exactly those shown."""
    waiting = [c for c in calls if c.state == Interaction.State.OPEN]
    if shown is not None:
        ids = {c.public_id: c for c in calls}
        for public_id in shown:
            call = ids.get(public_id)
            if call is None:
                raise InvalidParams("argumentsHashes", f"{public_id} is not a call of this group")
            if call.state != Interaction.State.OPEN:
                raise AlreadyDecided(call)
        unseen = [c.public_id for c in waiting if c.public_id not in shown]
        if unseen:
            raise InvalidParams(
                "argumentsHashes",
                f"{', '.join(unseen)} of this group {'was' if len(unseen) == 1 else 'were'} "
                "not shown: look at the group again",
            )
    if not waiting:
        decided = max(calls, key=lambda c: (c.answered_at is not None, c.answered_at or 0))
        raise AlreadyDecided(decided)
    return waiting


@dataclass(frozen=True)
class GroupFacts:
    """What a surface shows of a group for one decider: each call with its decision facts
    (runtime.decisions.facts, as its own page shows them), in the reply's order, and whether
    the decider may decide, and approve, all its open calls at once (else why not)."""

    group_id: str
    calls: list[DecisionFacts]

    @property
    def waiting(self) -> list[DecisionFacts]:
        return [f for f in self.calls if f.is_open]

    @property
    def refusal(self) -> str | None:
        """Why the decider may not decide every open call (the first call's reason)."""
        for facts in self.waiting:
            if facts.refusal:
                return f"{_call_name(facts)}: {facts.refusal}"
        return None

    @property
    def approve_refusal(self) -> str | None:
        for facts in self.waiting:
            if not facts.may_approve:
                why = facts.approve_refusal or facts.refusal or "you approved it already"
                return f"{_call_name(facts)}: {why}"
        return None

    @property
    def may_decide(self) -> bool:
        return bool(self.waiting) and self.refusal is None

    @property
    def may_approve(self) -> bool:
        return self.may_decide and self.approve_refusal is None

    @property
    def step_up_needed(self) -> bool:
        return any(f.step_up_needed for f in self.waiting)


def _call_name(facts: DecisionFacts) -> str:
    held = facts.held_call
    position = facts.interaction.group_position + 1
    return f"call {position} ({held.server} / {held.tool})" if held else f"call {position}"


def group_facts(*, tenant, group_id: str, decider: Decider) -> GroupFacts | None:
    """The tenant's group, each call with what ``decider`` is shown of it; None when the
    tenant has no such group."""
    calls = list(
        Interaction.objects.filter(tenant=tenant, group_id=group_id)
        .select_related("task", "task__agent")
        .order_by("group_position")
        if group_id
        else ()
    )
    if not calls:
        return None
    return GroupFacts(
        group_id=group_id,
        calls=[
            decision_facts(interaction=call, decider=decider, with_receipts=False) for call in calls
        ],
    )
