"""Celery tasks of push delivery: thin, they take ids and call one service; safe to run twice.

The services are imported inside the task bodies: a2a_endpoint.push_delivery imports these
tasks to schedule them, so a top-level import here would be a cycle.
"""

import os
import socket

from celery import shared_task

from config.celery import queue


@shared_task(bind=True, acks_late=True, ignore_result=True)
def deliver_push(self, config_pk: int) -> None:
    from a2a_endpoint.push_delivery import MAX_COUNTDOWN, push_deliver

    worker_id = f"{socket.gethostname()}:{os.getpid()}:{self.request.id or 'eager'}"
    retry = push_deliver(config_pk=config_pk, worker_id=worker_id)
    # Run eagerly (tests, CELERY_TASK_ALWAYS_EAGER) a retry would recurse at once; the sweep
    # picks it up instead.
    if retry is not None and retry <= MAX_COUNTDOWN and not self.request.is_eager:
        deliver_push.apply_async((config_pk,), countdown=retry, queue=queue())


@shared_task(ignore_result=True)
def sweep_push() -> int:
    """Deliveries that are due but have no message in the broker (lost, or a long retry)."""
    from a2a_endpoint.push_delivery import configs_due

    due = configs_due()
    for pk in due:
        deliver_push.apply_async((pk,), queue=queue())
    return len(due)
