"""Celery tasks: thin, they take ids and call one service; each is safe to run twice.

This module sits above the services it runs: nothing imports it. Services queue its tasks by
name (config.celery.task_enqueue), and the worker finds it by autodiscovery.
"""

import logging
import os
import socket

from celery import shared_task

from config.celery import queue
from config.metrics import CALL_SUMMARIES
from runtime.decisions.call_summaries import held_call_summarise
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel.audit_prune import audit_prune_due
from runtime.kernel.push.push_delivery import (
    MAX_COUNTDOWN,
    configs_due,
    configs_missing_deliveries,
    push_deliver,
)
from runtime.llm.actions import ModelError
from runtime.turn.claim import turns_to_sweep, worker_id_of
from runtime.turn.runner import turn_run

logger = logging.getLogger(__name__)
# How often a held call's summary is asked again after its model failed, and how long after
# the first failure (doubled each time).
SUMMARY_RETRIES = 3
SUMMARY_RETRY_SECONDS = 30


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


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=SUMMARY_RETRIES)
def summarise_held_call(self, interaction_pk: int) -> None:
    """A held call's AI summary (runtime.decisions.call_summaries); a model that does not
    answer is asked again a bounded number of times, then given up: the item is as it was."""
    try:
        summary = held_call_summarise(interaction_pk=interaction_pk)
    except ModelError as exc:
        # Run eagerly (tests) a retry would run at once, inline: given up instead.
        countdown = None if self.request.is_eager else summary_retry_in(self.request.retries)
        if countdown is None:
            logger.warning("gave up the summary of interaction %s: %s", interaction_pk, exc)
            CALL_SUMMARIES.labels("gave_up").inc()
            return
        logger.info("the summary of interaction %s failed (%s); trying again", interaction_pk, exc)
        CALL_SUMMARIES.labels("failed").inc()
        raise self.retry(countdown=countdown, queue=queue()) from None
    if summary is not None:
        CALL_SUMMARIES.labels("flagged" if summary.problems else "written").inc()


def summary_retry_in(retries: int) -> int | None:
    """Seconds until a failed summary is asked again after ``retries`` retries, or None:
    given up."""
    if retries >= SUMMARY_RETRIES:
        return None
    return SUMMARY_RETRY_SECONDS * 2**retries
