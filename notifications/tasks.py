"""Celery tasks of notifications: thin, they take ids and call one service; safe to run twice.

Nothing imports this module: the services queue its tasks by name (config.celery.task_enqueue).
"""

from celery import shared_task

from config.celery import queue
from config.tracing import span
from notifications.digests import digests_send
from notifications.follow_ups import follow_ups_missing, notifications_follow_up
from notifications.services import (
    MAX_COUNTDOWN,
    deliveries_due,
    delivery_send,
    fan_outs_missing,
    ladders_advance,
    notifications_fan_out,
)


@shared_task(acks_late=True, ignore_result=True)
def notify_interaction(interaction_pk: int, swept: bool = False) -> int:
    """Queue one delivery per matching channel for an interaction that just opened."""
    return notifications_fan_out(interaction_pk=interaction_pk, swept=swept)


@shared_task(ignore_result=True)
def sweep_fan_outs() -> int:
    """Open interactions whose fan-out never ran (its message was lost): ask for it again."""
    missing = fan_outs_missing()
    for pk in missing:
        notify_interaction.apply_async((pk,), {"swept": True}, queue=queue())
    return len(missing)


@shared_task(bind=True, acks_late=True, ignore_result=True)
def deliver_notification(self, delivery_pk: int) -> None:
    # In the trace of what queued it: the turn whose pause it tells (config.tracing).
    with span("notification send", **{"countersign.delivery": delivery_pk}):
        retry = delivery_send(delivery_pk=delivery_pk)
    # Run eagerly (tests) a retry would recurse at once; the sweep picks it up instead.
    if retry is not None and retry <= MAX_COUNTDOWN and not self.request.is_eager:
        deliver_notification.apply_async((delivery_pk,), countdown=retry, queue=queue())


@shared_task(ignore_result=True)
def sweep_notifications() -> int:
    """Deliveries that are due but have no message in the broker (lost, or a long retry)."""
    due = deliveries_due()
    for pk in due:
        deliver_notification.apply_async((pk,), queue=queue())
    return len(due)


@shared_task(ignore_result=True)
def advance_ladders() -> int:
    return ladders_advance()


@shared_task(ignore_result=True)
def send_digests() -> int:
    return digests_send()


@shared_task(acks_late=True, ignore_result=True)
def follow_up(audit_pk: int, interaction_pk: int, swept: bool = False) -> int:
    """Tell the channels that told of an item what became of it (one event), once."""
    return notifications_follow_up(audit_pk=audit_pk, interaction_pk=interaction_pk, swept=swept)


@shared_task(ignore_result=True)
def sweep_follow_ups() -> int:
    """Recent decisions, expiries, voids and cancels whose follow-up never ran: ask again."""
    missing = follow_ups_missing()
    for audit_pk, interaction_pk in missing:
        follow_up.apply_async((audit_pk, interaction_pk), {"swept": True}, queue=queue())
    return len(missing)
