"""Celery tasks: thin, they take ids and call one service; each is safe to run twice.

This module sits above the services it runs: nothing imports it. Services queue its tasks by
name (config.celery.task_enqueue), and the worker finds it by autodiscovery.
"""

import os
import socket

from celery import shared_task

from config.celery import queue
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel.audit_prune import audit_prune_due
from runtime.kernel.push.push_delivery import (
    MAX_COUNTDOWN,
    configs_due,
    configs_missing_deliveries,
    push_deliver,
)
from runtime.turn.claim import turns_to_sweep, worker_id_of
from runtime.turn.runner import turn_run


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_turn(self, task_pk: int) -> None:
    turn_run(task_pk=task_pk, worker_id=worker_id_of(self.request))


@shared_task(ignore_result=True)
def sweep_turns() -> int:
    """Give turns whose worker died (lease expired) or whose start was lost to a worker."""
    pks = turns_to_sweep()
    for pk in pks:
        run_turn.apply_async((pk,), queue=queue())
    return len(pks)


@shared_task(ignore_result=True)
def expire_interactions() -> int:
    return interactions_expire()


@shared_task(ignore_result=True)
def prune_audit() -> int:
    """Remove audit rows past each tenant's retention (runtime.kernel.audit_prune)."""
    return audit_prune_due()


@shared_task(bind=True, acks_late=True, ignore_result=True)
def deliver_push(self, config_pk: int) -> None:
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{self.request.id or 'eager'}"
    retry = push_deliver(config_pk=config_pk, worker_id=worker_id)
    # Run eagerly (tests, CELERY_TASK_ALWAYS_EAGER) a retry would recurse at once; the sweep
    # picks it up instead.
    if retry is not None and retry <= MAX_COUNTDOWN and not self.request.is_eager:
        deliver_push.apply_async((config_pk,), countdown=retry, queue=queue())


@shared_task(ignore_result=True)
def sweep_push() -> int:
    """Deliveries that are due but have no message in the broker (lost, or a long retry),
    and configs with an event that has no delivery (push_deliver queues it first)."""
    due = sorted(set(configs_due()) | set(configs_missing_deliveries()))
    for pk in due:
        deliver_push.apply_async((pk,), queue=queue())
    return len(due)
