"""Notifications: who hears of an open interaction, how, and when again.

- An interaction opens inside the turn's transaction (runtime.kernel.signals.interaction_opened);
  the receiver only asks, after the commit, for ``notifications_fan_out``: nothing here can
  slow or undo a turn or a decision.
- The fan-out writes one Delivery per enabled channel whose filters match (a unique
  constraint: each channel hears once of each event), and schedules each after the commit.
- ``delivery_send`` claims a due delivery (a conditional update), sends it with no row lock
  held, records the Attempt and either finishes it or schedules the next try with
  exponential backoff and jitter; after NOTIFY_MAX_ATTEMPTS it is given up, with the reason.
- Ladders (reminders, escalation) are advanced by beat (``ladders_advance(now=...)``): each
  step is a LadderStep row, an audit entry and a fan-out of its own, in one transaction.
- A held call's summary and arguments go with every notification unless the channel omits
  them (``omit_arguments``), with the fields its policy redacts as "•••" (what a
  notification says is notifications.content's; each medium escapes it for itself and sends
  it through its transport, notifications.transports).
- An opening (opened, reminder, escalation) of an item decided before it was sent is not
  sent: it would ask for a decision already taken. What became of an item a channel told of
  follows it (notifications.follow_ups).
"""

import json
import logging
import random
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from config.celery import task_enqueue
from notifications.content import OPENINGS, notification_content, tool_of
from notifications.ladders import rule_ladder, steps_clean, steps_stored
from notifications.models import (
    Attempt,
    Channel,
    Delivery,
    FanOut,
    Ladder,
    LadderStep,
    Preference,
)
from notifications.observe import attempt_observed
from notifications.routing import channels_routed, uncovered_escalate
from notifications.transports import SendFailed, transport_for
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.decisions.interaction_state import interaction_widen
from runtime.kernel.audit import audit_record
from runtime.policy.ladders import steps_parse
from tenants.models import Membership

logger = logging.getLogger(__name__)

# A retry further away than this is left to the sweep (no message sits in the broker long).
MAX_COUNTDOWN = 300
# How long a claimed delivery is another worker's to finish before it is due again.
CLAIM_SECONDS = 120


# --- after an interaction opens -------------------------------------------------------------


def interaction_opened_received(sender, *, interaction: Interaction, **kwargs) -> None:
    """Ask for the fan-out once the turn's transaction commits; never fail the turn."""
    pk = interaction.pk

    def enqueue() -> None:
        try:
            task_enqueue("notifications.tasks.notify_interaction", (pk,))
        except Exception:  # noqa: BLE001 - a broker hiccup must not fail the committed turn
            logger.warning("could not queue notifications for interaction %s", pk, exc_info=True)

    transaction.on_commit(enqueue)


def channel_matches(channel: Channel, interaction: Interaction) -> bool:
    """The channel's filters (kinds, agents, tools; empty: any) let the interaction through."""
    if channel.kinds and interaction.kind not in channel.kinds:
        return False
    if channel.agents and interaction.task.agent.slug not in channel.agents:
        return False
    if channel.tools:
        tool = tool_of(interaction)
        server = tool.partition("/")[0]
        if not tool or not ({tool, server} & set(channel.tools)):
            return False
    return True


def delivery_schedule(pks: list[int]) -> None:
    """Queue each delivery once the transaction that wrote it commits (the sweep delivers
    any that could not be queued)."""

    def enqueue() -> None:
        for pk in pks:
            try:
                task_enqueue("notifications.tasks.deliver_notification", (pk,))
            except Exception:  # noqa: BLE001 - the sweep delivers what could not be queued
                logger.warning("could not queue notification delivery %s", pk, exc_info=True)

    if pks:
        transaction.on_commit(enqueue)


def _fan_out(interaction: Interaction, *, event: str, step: int = 0, roles=()) -> list[int]:
    channels = [
        c
        for c in Channel.objects.filter(tenant_id=interaction.tenant_id, enabled=True)
        if channel_matches(c, interaction)
    ]
    # A member's own channel while they are away: their delegate's instead (one rule for
    # every medium: notifications.routing).
    channels = channels_routed(channels, tenant_id=interaction.tenant_id, now=timezone.now())
    if not channels:
        return []
    Delivery.objects.bulk_create(
        [
            Delivery(
                tenant_id=interaction.tenant_id,
                channel=c,
                interaction=interaction,
                event=event,
                step=step,
                roles=list(roles),
                webhook_id=f"msg_{uuid.uuid4().hex}",
            )
            for c in channels
        ],
        ignore_conflicts=True,
    )
    pks = list(
        Delivery.objects.filter(
            interaction=interaction, event=event, step=step, state=Delivery.State.PENDING
        ).values_list("pk", flat=True)
    )
    delivery_schedule(pks)
    return pks


@transaction.atomic
def notifications_fan_out(*, interaction_pk: int, swept: bool = False) -> int:
    """One delivery per matching channel for an open interaction, once (safe to run twice,
    or concurrently: the first message and the sweep's copy of it)."""
    interaction = (
        Interaction.objects.select_related("task__agent").filter(pk=interaction_pk).first()
    )
    if interaction is None or interaction.state != Interaction.State.OPEN:
        return 0
    try:
        # The marker first: a concurrent copy waits on its unique index until this commits,
        # then fails here and sends nothing; if this rolls back, that copy goes on instead.
        with transaction.atomic():
            marker = FanOut.objects.create(
                tenant_id=interaction.tenant_id, interaction=interaction, swept=swept
            )
    except IntegrityError:
        # The sweep's copy of a late first message, or the late message itself.
        logger.info("interaction %s was fanned out already: nothing sent again", interaction_pk)
        return 0
    pks = _fan_out(interaction, event=Delivery.Event.OPENED)
    FanOut.objects.filter(pk=marker.pk).update(deliveries=len(pks))
    # Nobody who may decide it is here: it goes to the admins (once), the audit says why.
    uncovered_escalate(interaction, now=timezone.now(), fan_out=_fan_out)
    return len(pks)


def fan_outs_missing(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Open interactions older than NOTIFY_FAN_OUT_GRACE_SECONDS whose fan-out never ran."""
    now = now or timezone.now()
    before = now - timedelta(seconds=settings.NOTIFY_FAN_OUT_GRACE_SECONDS)
    return list(
        Interaction.objects.filter(state=Interaction.State.OPEN, created_at__lte=before)
        .filter(~Exists(FanOut.objects.filter(interaction_id=OuterRef("pk"))))
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )


@transaction.atomic
def channel_test(*, channel: Channel) -> Delivery:
    """A test notification through the channel (the settings page's test button)."""
    delivery = Delivery.objects.create(
        tenant_id=channel.tenant_id,
        channel=channel,
        event=Delivery.Event.TEST,
        webhook_id=f"msg_{uuid.uuid4().hex}",
    )
    delivery_schedule([delivery.pk])
    return delivery


# --- delivering ------------------------------------------------------------------------------


def _backoff(attempts: int) -> float:
    base = settings.NOTIFY_RETRY_BASE_SECONDS * 2 ** (attempts - 1)
    return base / 2 + random.uniform(0, base / 2)


def delivery_send(*, delivery_pk: int, now: datetime | None = None) -> float | None:
    """Try a due delivery once; return seconds until the next try, or None when done."""
    now = now or timezone.now()
    claimed = Delivery.objects.filter(
        pk=delivery_pk, state=Delivery.State.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=now + timedelta(seconds=CLAIM_SECONDS))
    if claimed != 1:
        return None
    delivery = Delivery.objects.select_related(
        "channel", "interaction__task__agent", "follow_up"
    ).get(pk=delivery_pk)
    if _closed_before_sent(delivery):
        Delivery.objects.filter(pk=delivery_pk).update(
            state=Delivery.State.SKIPPED, last_error="decided before it was sent"
        )
        return None
    number = delivery.attempts + 1
    error, status, final, kept = "", None, False, {}
    try:
        # Sent at the wall clock, not the claim's ``now``: a signed webhook's receivers
        # check its timestamp against theirs.
        transport = transport_for(delivery.channel.kind)
        kept = transport.send(delivery, notification_content(delivery), timezone.now())
    except SendFailed as exc:
        error, status, final = str(exc), exc.status, exc.final
    except Exception as exc:  # noqa: BLE001 - an unexpected error is an attempt retried too
        logger.exception("notification delivery %s failed", delivery_pk)
        error = f"error: {type(exc).__name__}"
    Attempt.objects.create(
        delivery=delivery, number=number, at=now, ok=not error, status_code=status, error=error
    )
    fields = {"attempts": number, "last_error": error[:300]}
    retry = None
    if not error:
        fields.update(state=Delivery.State.DELIVERED, delivered_at=now, **kept)
    elif final or number >= settings.NOTIFY_MAX_ATTEMPTS:
        fields.update(state=Delivery.State.FAILED)
    else:
        retry = _backoff(number)
        fields.update(next_attempt_at=now + timedelta(seconds=retry))
    Delivery.objects.filter(pk=delivery_pk).update(**fields)
    attempt_observed(
        kind=delivery.channel.kind, sent=not error, given_up=retry is None and bool(error)
    )
    return retry


def _closed_before_sent(delivery: Delivery) -> bool:
    interaction = delivery.interaction
    return (
        interaction is not None
        and delivery.follow_up_id is None
        and delivery.event in OPENINGS
        and interaction.state != Interaction.State.OPEN
    )


def deliveries_due(*, now: datetime | None = None) -> list[int]:
    now = now or timezone.now()
    return list(
        Delivery.objects.filter(state=Delivery.State.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:500]
    )


# --- ladders ---------------------------------------------------------------------------------


def ladder_for(interaction: Interaction, ladders: list[Ladder]) -> tuple[str, list[dict]] | None:
    """The ladder an open interaction climbs, whole: (where it was set, its parsed steps).

    The most specific scope wins: the agent and the tool, the agent, the tool, the tenant
    (a tool's ladder applies only to approvals of that tool). At the same scope, a ladder set
    in Django admin wins over the agent's AGENT.md ``ladder``: admins change it without a
    deploy, and deleting theirs brings the file's back. An AGENT.md ladder has the agent's
    scopes only (its ``tools`` entries: "server/tool", then "server"; its ``steps``). Most
    specific of all: the ladder of the policy rule that held the call (kept on the approval
    when it opened, runtime.decisions.approval_groups.approval_request)."""
    by_key = {(ladder.agent_id, ladder.tool): ladder for ladder in ladders}
    own = rule_ladder(interaction.kind, interaction.request)
    return _ladder_of(interaction.task.agent, tool_of(interaction), by_key, own)


def _ladder_of(agent: Agent, tool: str, by_key: dict, own=None) -> tuple[str, list[dict]] | None:
    if own:
        return "policy rule", steps_parse(own)
    file_ladder = agent.ladder or {}
    file_tools = file_ladder.get("tools") or {}
    candidates: list[tuple[str, object]] = []
    if tool:
        candidates += [
            ("admin", by_key.get((agent.pk, tool))),
            ("AGENT.md", file_tools.get(tool)),
            ("AGENT.md", file_tools.get(tool.partition("/")[0])),
        ]
    candidates += [("admin", by_key.get((agent.pk, ""))), ("AGENT.md", file_ladder.get("steps"))]
    if tool:
        candidates.append(("admin", by_key.get((None, tool))))
    candidates.append(("admin", by_key.get((None, ""))))
    for source, found in candidates:
        if isinstance(found, Ladder):
            return source, steps_clean(found.steps)
        if found:
            return source, steps_parse(found)
    return None


def ladders_advance(*, now: datetime | None = None) -> int:
    """Take every ladder step that is due (beat); each step in its own transaction.

    Expire steps are not taken here: the interaction's expiry was set from them when it
    opened (runtime.policy.ladders.expiry_seconds), and the expiry sweep closes it.

    The open items are read as plain values and each (agent, tool) ladder is found and
    parsed once per beat: a quiet beat over 10,000 open items is a few queries and little
    CPU; only an item with a step due is loaded whole."""
    now = now or timezone.now()
    tenants = set(Ladder.objects.values_list("tenant_id", flat=True))
    tenants |= set(Agent.objects.exclude(ladder={}).values_list("tenant_id", flat=True))
    # A policy rule's own ladder (its deadline's warnings among its steps) is the approval's.
    tenants |= set(
        Interaction.objects.filter(state=Interaction.State.OPEN, request__has_key="ladder")
        .values_list("tenant_id", flat=True)
        .distinct()
    )
    if not tenants:
        return 0
    by_tenant: dict[int, dict] = {}
    for ladder in Ladder.objects.filter(tenant_id__in=tenants):
        by_tenant.setdefault(ladder.tenant_id, {})[(ladder.agent_id, ladder.tool)] = ladder
    agents = {agent.pk: agent for agent in Agent.objects.filter(tenant_id__in=tenants)}
    # The steps already taken, in one read (not one per open item).
    taken_steps: dict[int, set[int]] = {}
    for interaction_id, number in LadderStep.objects.filter(
        tenant_id__in=tenants, interaction__state=Interaction.State.OPEN
    ).values_list("interaction_id", "step"):
        taken_steps.setdefault(interaction_id, set()).add(number)
    found_for: dict[tuple[int, str, str], tuple[str, list[dict]] | None] = {}
    due: list[tuple[int, int, dict, str]] = []
    rows = Interaction.objects.filter(tenant_id__in=tenants, state=Interaction.State.OPEN)
    for pk, tenant_id, kind, detail, request, created_at, expires_at, agent_id in rows.values_list(
        "pk", "tenant_id", "kind", "detail", "request", "created_at", "expires_at", "task__agent_id"
    ):
        tool = tool_of(Interaction(kind=kind, detail=detail))
        own = rule_ladder(kind, request)
        key = (agent_id, tool, json.dumps(own, sort_keys=True) if own else "")
        if key not in found_for:
            try:
                found_for[key] = _ladder_of(
                    agents[agent_id], tool, by_tenant.get(tenant_id, {}), own
                )
            except ValueError:
                # A ladder that no longer parses (stored around its checks) stops only the
                # items that climb it.
                logger.warning("the ladder of agent %s (%s) cannot be read", agent_id, tool)
                found_for[key] = None
        found = found_for[key]
        if found is None:
            continue
        source, steps = found
        done = taken_steps.get(pk, set())
        # A warning counts back from the deadline as it stands: a moved deadline (its round)
        # warns again, as steps of their own (the unique step row keeps each one once).
        moved = ((request or {}).get("deadline") or {}).get("round", 0)
        for number, step in enumerate(steps, start=1):
            if step["action"] == "warn":
                number += WARNING_ROUND * (1 + int(moved))
                at = expires_at - timedelta(seconds=step["seconds"])
                if number not in done and at <= now < expires_at:
                    due.append((pk, number, step, source))
                continue
            if step["action"] == "expire" or number in done:
                continue
            if created_at + timedelta(seconds=step["seconds"]) <= now:
                due.append((pk, number, step, source))
    taken = 0
    loaded: dict[int, Interaction] = {}
    for pk, number, step, source in due:
        if pk not in loaded:
            loaded[pk] = Interaction.objects.select_related("task__agent").get(pk=pk)
        taken += _ladder_step(loaded[pk], number, step, now, source)
    return taken


# What each ladder step is in the audit, and which notification it sends.
LADDER_AUDIT = {"remind": "reminded", "escalate": "escalated", "warn": "warned"}
LADDER_EVENTS = {
    "remind": Delivery.Event.REMINDER,
    "escalate": Delivery.Event.ESCALATION,
    "warn": Delivery.Event.EXPIRING,
}
# A warning's step number: its place in the ladder plus this for each round of the deadline
# (ladders have at most 10 steps).
WARNING_ROUND = 100


def _ladder_step(
    interaction: Interaction, number: int, step: dict, now: datetime, source: str
) -> int:
    try:
        with transaction.atomic():
            # A decision since the read above ends the ladder (the unique step row below
            # makes a second beat's copy of this step roll back).
            if not Interaction.objects.filter(
                pk=interaction.pk, state=Interaction.State.OPEN
            ).exists():
                return 0
            LadderStep.objects.create(
                tenant_id=interaction.tenant_id,
                interaction=interaction,
                step=number,
                action=step["action"],
                roles=step["roles"],
                at=now,
            )
            audit_record(
                tenant_id=interaction.tenant_id,
                actor="system:ladder",
                action=LADDER_AUDIT[step["action"]],
                via="ladder",
                interaction=interaction,
                task=interaction.task,
                detail={
                    "kind": interaction.kind,
                    "prompt": interaction.prompt,
                    "step": number,
                    "after": step["after"],
                    **({"before": step["before"]} if step.get("before") else {}),
                    "roles": step["roles"],
                    "ladder": source,
                    # Who may decide is widened by the approvers' rules (widen_to) when they
                    # read this; the ladder itself only carries the role.
                    **({"widen_to": step["widen_to"]} if step.get("widen_to") else {}),
                },
            )
            widen = step.get("widen_to")
            if widen:
                # One role (AGENT.md ladders' grammar) or a list of roles.
                interaction_widen(
                    interaction=interaction,
                    roles=[widen] if isinstance(widen, str) else list(widen),
                    by="system:ladder",
                    step=number,
                )
            event = LADDER_EVENTS[step["action"]]
            _fan_out(
                interaction,
                event=event,
                step=number,
                roles=step["roles"] if step["action"] == "escalate" else (),
            )
    except IntegrityError:
        return 0  # another beat took this step first
    return 1


# --- settings: ladders, preferences (channels: notifications.channel_settings) ----------------


def ladder_save(*, tenant, agent=None, tool: str = "", steps) -> Ladder:
    """Create or replace the ladder of an agent (or tool, or the whole tenant)."""
    if agent is not None and agent.tenant_id != tenant.pk:
        raise ValueError("the agent belongs to another tenant")
    stored = steps_stored(steps_clean(steps))
    ladder, _ = Ladder.objects.update_or_create(
        tenant=tenant, agent=agent, tool=tool, defaults={"steps": stored}
    )
    return ladder


def preference_set(
    *, membership: Membership, email_enabled: bool, digest_minutes: int
) -> Preference:
    if digest_minutes < 0 or digest_minutes > 7 * 24 * 60:
        raise ValueError("a digest comes every 0 to 10080 minutes")
    preference, _ = Preference.objects.update_or_create(
        membership=membership,
        defaults={"email_enabled": email_enabled, "digest_minutes": digest_minutes},
    )
    return preference
