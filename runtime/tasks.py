"""Celery tasks: thin, they take ids and call one service; each is safe to run twice."""

import os
import socket

from celery import shared_task

from config.celery import queue
from runtime import services, turns


def _worker_id(request) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{request.id or 'eager'}"


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_turn(self, task_pk: int) -> None:
    turns.turn_run(task_pk=task_pk, worker_id=_worker_id(self.request))


@shared_task(ignore_result=True)
def sweep_turns() -> int:
    """Give turns whose worker died (lease expired) or whose start was lost to a worker."""
    pks = services.turns_to_sweep()
    for pk in pks:
        run_turn.apply_async((pk,), queue=queue())
    return len(pks)


@shared_task(ignore_result=True)
def expire_interactions() -> int:
    return services.interactions_expire()
