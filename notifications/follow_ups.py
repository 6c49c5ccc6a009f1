"""Closing the loop: after an item a channel told of is decided, expires, is voided, or its
task is canceled, or one approval of several is in, the channel hears of it.

- The core sends runtime.kernel.signals.interaction_changed inside the transaction of the
  change, with the audit row it wrote; the receiver only asks, after the commit, for
  ``notifications_follow_up``: a decision never waits on mail or HTTP.
- The follow-up writes its marker first (FollowUp: one per audit row and interaction), then
  one Delivery per channel that told of the item (an opening delivered or still on its
  way), each sent as every delivery is (retries, backoff, attempts kept). A second copy of
  the message finds the marker and sends nothing twice; a lost message is asked for again by
  the sweep (``follow_ups_missing``: the recent audit rows of such events with no marker).
- What each channel gets: a signed webhook the event (``interaction.decided`` with the
  outcome, who decided and how, the channel, the summary and the receipt; ``.expired``,
  ``.voided``, ``.canceled``, ``.approval_recorded``); a Slack-compatible or Teams webhook a
  follow-up message; e-mail a short message to those it mailed (those who may still decide a
  voided or two-person item get new links); the Slack app updates its messages.
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from config.celery import task_enqueue
from notifications.content import OPENINGS
from notifications.models import Channel, Delivery, FollowUp
from notifications.services import channel_matches, delivery_schedule
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.kernel.task_models import AuditEvent
from tenants.lookup_cache import MISSING, LookupCache

logger = logging.getLogger(__name__)

# The audit actions of the events followed up, and the event each one is.
EVENT_OF_ACTION = {
    "approved": Delivery.Event.DECIDED,
    "denied": Delivery.Event.DECIDED,
    "answered": Delivery.Event.DECIDED,
    "connected": Delivery.Event.DECIDED,
    "declined": Delivery.Event.DECIDED,
    "expired": Delivery.Event.EXPIRED,
    "approval_voided": Delivery.Event.VOIDED,
    "approval_recorded": Delivery.Event.RECORDED,
    "task_canceled": Delivery.Event.CANCELED,
    "extended": Delivery.Event.EXTENDED,
    "expiry_escalated": Delivery.Event.ESCALATED,
}
# Events that reach every channel the item matches, not only those that told of it: a new
# deadline and an escalation ask for a decision (an escalation of the roles it reaches).
EVERY_CHANNEL = (Delivery.Event.EXTENDED, Delivery.Event.ESCALATED)


# Tenant id -> whether it has an enabled channel, kept per process for at most
# LOOKUP_CACHE_SECONDS (tenants.lookup_cache); a channel saved or deleted in this process
# clears it at once (notifications.apps).
channels_cache = LookupCache()


def tenant_has_channels(tenant_id: int) -> bool:
    found = channels_cache.get(tenant_id)
    if found is MISSING:
        found = channels_cache.load(
            tenant_id, Channel.objects.filter(tenant_id=tenant_id, enabled=True).exists
        )
    return bool(found)


def interaction_changed_received(sender, *, interaction, event, audit, **kwargs) -> None:
    """Ask for the follow-up once the change commits; never fail the decision.

    A tenant without an enabled channel asks for none: only a channel that told of the item
    hears of a decision, a void, a vote or a cancel, and a disabled one hears nothing, so the
    follow-up would write its marker and tell no one. It was a worker task of ten statements
    after every decision, as costly as the resumed turn it ran beside (bench/README.md,
    2026-12-04). A channel enabled within LOOKUP_CACHE_SECONDS in another process, after it
    told of the item, is caught by the sweep (follow_ups_missing: items some channel told of,
    with no marker). An extension or an escalation reaches every channel the item matches,
    whenever it was made: those always ask."""
    args = (audit.pk, interaction.pk)
    every_channel = EVENT_OF_ACTION.get(audit.action) in EVERY_CHANNEL

    def enqueue() -> None:
        try:
            if not every_channel and not tenant_has_channels(interaction.tenant_id):
                return
            task_enqueue("notifications.tasks.follow_up", args)
        except Exception:  # noqa: BLE001 - the sweep asks again for what was not queued
            logger.warning(
                "could not queue the follow-up of interaction %s", args[1], exc_info=True
            )

    transaction.on_commit(enqueue)


def _decider_kind(audit: AuditEvent) -> str:
    if audit.actor.startswith("system:") or audit.actor.startswith("rule:"):
        return "system"
    if audit.via == "inband":
        return "caller"
    return str((audit.detail or {}).get("deciderKind") or "person")


def follow_up_facts(audit: AuditEvent, interaction: Interaction) -> dict:
    """What the event said, as every channel tells it: who, how, when, what it came to."""
    detail = audit.detail or {}
    event = EVENT_OF_ACTION[audit.action]
    facts = {
        "decidedBy": audit.actor,
        "decidedVia": audit.via,
        "decidedAt": audit.created_at.isoformat(),
        "decider": {"kind": _decider_kind(audit), "name": audit.actor},
        "channel": audit.via,
    }
    if detail.get("channelUser"):
        facts["channelUser"] = detail["channelUser"]
    if event == Delivery.Event.DECIDED:
        facts["outcome"] = audit.action
        reason = (detail.get("answer") or {}).get("reason")
        if reason:
            facts["reason"] = str(reason)
    elif event == Delivery.Event.VOIDED:
        facts["outcome"] = "voided"
        facts["reason"] = str(detail.get("reason", ""))
    elif event == Delivery.Event.RECORDED:
        facts["outcome"] = "recorded"
        facts["approvals"] = detail.get("approvals", 1)
        facts["approvalsRequired"] = detail.get("required", 2)
        if detail.get("stages"):
            facts.update(stage=detail.get("stage", 1), stages=detail["stages"])
        if isinstance(detail.get("nextStage"), dict):
            facts["nextStage"] = detail["nextStage"]
    elif event in EVERY_CHANNEL:
        facts["outcome"] = event
        facts["expiresAt"] = str(detail.get("expiresAt", ""))
        if detail.get("by"):
            facts["by"] = str(detail["by"])
        if detail.get("roles"):
            facts["roles"] = list(detail["roles"])
    else:
        facts["outcome"] = event
    receipt = (
        # An approval's id is its held call's: the receipts' (tenant, effect) index.
        Receipt.objects.filter(
            tenant_id=interaction.tenant_id,
            effect_public_id=interaction.public_id,
            decider=audit.actor,
            created_at__gte=audit.created_at - timedelta(seconds=5),
        )
        .order_by("-created_at", "-id")
        .first()
        if interaction.kind == Interaction.Kind.APPROVAL
        else None
    )
    if receipt is not None:
        facts["receiptId"] = receipt.public_id
    return facts


@transaction.atomic
def notifications_follow_up(*, audit_pk: int, interaction_pk: int, swept: bool = False) -> int:
    """One delivery per channel that told of the item, once per event (safe to run twice,
    or concurrently)."""
    audit = AuditEvent.objects.filter(pk=audit_pk).first()
    interaction = (
        Interaction.objects.select_related("task__agent").filter(pk=interaction_pk).first()
    )
    if audit is None or interaction is None or audit.action not in EVENT_OF_ACTION:
        return 0
    if audit.tenant_id != interaction.tenant_id:
        return 0
    try:
        # The marker first, as the opening's fan-out does (notifications.services).
        with transaction.atomic():
            marker = FollowUp.objects.create(
                tenant_id=interaction.tenant_id,
                interaction=interaction,
                audit_event_id=audit.pk,
                event=EVENT_OF_ACTION[audit.action],
                facts=follow_up_facts(audit, interaction),
                swept=swept,
            )
    except IntegrityError:
        logger.info("follow-up of audit row %s was sent already: nothing again", audit_pk)
        return 0
    told = set(
        Delivery.objects.filter(
            interaction=interaction,
            follow_up__isnull=True,
            event__in=OPENINGS,
            state__in=(Delivery.State.DELIVERED, Delivery.State.PENDING),
        ).values_list("channel_id", flat=True)
    )
    channels = list(Channel.objects.filter(pk__in=told, enabled=True))
    roles: list = []
    if marker.event in EVERY_CHANNEL:
        channels = [
            c
            for c in Channel.objects.filter(tenant_id=interaction.tenant_id, enabled=True)
            if c.pk in told or channel_matches(c, interaction)
        ]
        roles = list((audit.detail or {}).get("roles") or ())
    Delivery.objects.bulk_create(
        [
            Delivery(
                tenant_id=interaction.tenant_id,
                channel=channel,
                interaction=interaction,
                follow_up=marker,
                event=marker.event,
                roles=roles,
                webhook_id=f"msg_{marker.pk}_{channel.pk}",
            )
            for channel in channels
        ],
        ignore_conflicts=True,
    )
    pks = list(Delivery.objects.filter(follow_up=marker).values_list("pk", flat=True))
    FollowUp.objects.filter(pk=marker.pk).update(deliveries=len(pks))
    delivery_schedule(pks)
    return len(pks)


def follow_ups_missing(*, now: datetime | None = None, limit: int = 500) -> list[tuple[int, int]]:
    """(audit row, interaction) of the recent events of tenants with channels whose follow-up
    never ran: older than NOTIFY_FAN_OUT_GRACE_SECONDS, newer than NOTIFY_FOLLOW_UP_SWEEP_HOURS.
    Read through the audit's (tenant, created_at) index, per tenant with a channel."""
    now = now or timezone.now()
    before = now - timedelta(seconds=settings.NOTIFY_FAN_OUT_GRACE_SECONDS)
    after = now - timedelta(hours=settings.NOTIFY_FOLLOW_UP_SWEEP_HOURS)
    tenants = list(Channel.objects.filter(enabled=True).values_list("tenant_id", flat=True))
    if not tenants:
        return []
    told = Delivery.objects.filter(
        interaction_id=OuterRef("interaction_id"), follow_up__isnull=True
    )
    told_task = Delivery.objects.filter(
        interaction__task_id=OuterRef("task_id"), follow_up__isnull=True
    )
    rows = (
        AuditEvent.objects.filter(
            tenant_id__in=set(tenants),
            created_at__gt=after,
            created_at__lte=before,
            action__in=list(EVENT_OF_ACTION),
        )
        # Only items some channel told of (the others have no one to tell), and only events
        # no follow-up ran for.
        .filter(Q(Exists(told)) | Q(Exists(told_task), action="task_canceled"))
        .filter(~Exists(FollowUp.objects.filter(audit_event_id=OuterRef("pk"))))
        .order_by("created_at")
        .values_list("pk", "action", "interaction_id", "task_id")[:limit]
    )
    missing = []
    for pk, action, interaction_id, task_id in rows:
        ids: Iterable[int]
        if action == "task_canceled":
            ids = Interaction.objects.filter(
                task_id=task_id, state=Interaction.State.CANCELED
            ).values_list("pk", flat=True)
        else:
            ids = [interaction_id] if interaction_id else []
        missing += [(pk, i) for i in ids]
    return missing
