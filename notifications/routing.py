"""Who is told of an item while people are away: one rule for every
medium. An away member is told nothing; their delegate (a member who may decide, not away
themselves) is told in their place; without one, the others are (those the channel reaches
anyway). E-mail reaches people by role (integrations.email.transport: ``people_told``); a
member's own channel of any medium (their Slack DM, their Teams chat: Channel.member) is
skipped while they are away and their delegate's own channels of the same kind are told
instead (``channels_routed``, in the fan-out of openings, reminders, warnings and
escalations alike).

When nobody who may decide an item is here (each away, with no delegate here who may decide
it), the item escalates to the tenant's admins as a ladder's escalate step does, once, and
the audit says why (``uncovered_escalate``)."""

from collections.abc import Iterable
from datetime import datetime

from django.db import IntegrityError, transaction

from notifications.models import Channel, LadderStep
from runtime.decisions.approvers import Decider, approval_needs, decider_refusal
from runtime.decisions.decision_models import Interaction
from runtime.decisions.interaction_state import interaction_widen
from runtime.kernel.audit import audit_record
from tenants.models import Membership

# The ladder step number of an escalation because nobody is here (ladders have at most 10
# steps; warnings count from 100).
UNCOVERED_STEP = 99


def stand_in(member: Membership, *, everyone: dict[int, Membership], now) -> Membership | None:
    """Who is told in ``member``'s place now: themselves when here; their delegate when they
    are away and the delegate is here and may decide; None (nobody in their place)."""
    if not member.away_at(now):
        return member
    delegate = everyone.get(member.delegate_id) if member.delegate_id else None
    if delegate is None or delegate.away_at(now) or not delegate.can_decide:
        return None
    return delegate


def people_told(
    members: Iterable[Membership], *, everyone: dict[int, Membership], now
) -> list[Membership]:
    """The people to tell of what is meant for ``members``: each one here, and in each away
    one's place their delegate (once each, in order). ``everyone``: the tenant's members by
    id (a delegate is looked up there)."""
    told: list[Membership] = []
    for member in members:
        person = stand_in(member, everyone=everyone, now=now)
        if person is not None and person not in told:
            told.append(person)
    return told


def tenant_members(tenant_id: int) -> dict[int, Membership]:
    """The tenant's active members by id, with their users, in one read."""
    return {
        m.pk: m
        for m in Membership.objects.filter(
            tenant_id=tenant_id, user__is_active=True
        ).select_related("user")
    }


def channels_routed(channels: list[Channel], *, tenant_id: int, now) -> list[Channel]:
    """``channels`` (those an item's notification matches) as the away rule leaves them: a
    member's own channel while they are away is left out, and their delegate's own channels of
    the same kind are told in its place (whatever their filters: the delegate stands in for
    the member). The team's channels are as they are."""
    owned = [c for c in channels if c.member_id]
    if not owned:
        return channels
    everyone = tenant_members(tenant_id)
    owners = [everyone[c.member_id] for c in owned if c.member_id in everyone]
    told = {m.pk for m in people_told(owners, everyone=everyone, now=now)}
    kept = [c for c in channels if not c.member_id or c.member_id in told]
    standing_in = told - {c.member_id for c in kept if c.member_id}
    if standing_in:
        kinds = {c.kind for c in owned}
        kept += list(
            Channel.objects.filter(
                tenant_id=tenant_id, enabled=True, member_id__in=standing_in, kind__in=kinds
            ).exclude(pk__in=[c.pk for c in kept])
        )
    return kept


def _deciders(interaction: Interaction, everyone: dict[int, Membership]) -> list[Membership]:
    """The tenant's members who may decide the open approval now (the policy read once)."""
    needs = approval_needs(interaction)
    return [
        m
        for m in everyone.values()
        if m.can_decide and decider_refusal(interaction, Decider.of_member(m), needs) is None
    ]


def uncovered_escalate(interaction: Interaction, *, now: datetime, fan_out) -> bool:
    """Escalate the open approval ``interaction`` to the admins when nobody who may decide it
    is here (each away, with no delegate here who may decide it): once (its ladder step row),
    audited with the reason; ``fan_out(interaction, event, step, roles)`` tells the admins as
    an escalate step does. False when someone is here, or nobody may decide it at all."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return False
    everyone = tenant_members(interaction.tenant_id)
    if not any(m.away_at(now) for m in everyone.values()):
        return False  # nobody away: the policy is not read at all
    deciders = _deciders(interaction, everyone)
    if not deciders or any(not m.away_at(now) for m in deciders):
        return False
    delegates = [stand_in(m, everyone=everyone, now=now) for m in deciders]
    covering = [d for d in delegates if d is not None]
    if any(d in deciders for d in covering):
        return False  # a delegate here who may decide it themselves
    away = sorted(m.user.email for m in deciders)
    reason = (
        f"Nobody who may decide it is here: {', '.join(away)} "
        f"{'is' if len(away) == 1 else 'are'} away, with no delegate here who may decide it."
    )
    try:
        with transaction.atomic():
            LadderStep.objects.create(
                tenant_id=interaction.tenant_id,
                interaction=interaction,
                step=UNCOVERED_STEP,
                action="escalate",
                roles=["admin"],
                at=now,
            )
            audit_record(
                tenant_id=interaction.tenant_id,
                actor="system:away",
                action="escalated",
                via="ladder",
                interaction=interaction,
                task=interaction.task,
                detail={
                    "kind": interaction.kind,
                    "prompt": interaction.prompt,
                    "step": UNCOVERED_STEP,
                    "roles": ["admin"],
                    "reason": reason,
                    "away": away,
                },
            )
            interaction_widen(
                interaction=interaction, roles=["admin"], by="system:away", step=UNCOVERED_STEP
            )
            fan_out(interaction, event="escalation", step=UNCOVERED_STEP, roles=["admin"])
    except IntegrityError:
        return False  # escalated already
    return True
