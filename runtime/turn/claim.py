"""A turn's lease: the worker that holds it runs the turn; when it runs out (the worker died)
the sweep gives the turn to another worker."""

import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from runtime.models import Task, TaskState, new_key
from runtime.selectors import turn_may_start
from runtime.task_state import task_status_set


class LeaseLost(Exception):
    """Another worker took the turn over, or it was canceled: stop quietly."""


def lease_seconds() -> int:
    return getattr(settings, "TURN_LEASE_SECONDS", 60)


def lease_expiry() -> datetime:
    """When a lease taken or renewed now runs out."""
    return timezone.now() + timedelta(seconds=lease_seconds())


def new_run_id() -> str:
    return new_key("run_", 9)


def turn_claim(*, task_pk: int, worker_id: str) -> Task | None:
    """Take the turn's lease if it is free (or expired); start a new run phase."""
    task = Task.objects.select_related("context").filter(pk=task_pk).first()
    if (
        task is None
        or task.state not in (TaskState.SUBMITTED, TaskState.WORKING)
        or not turn_may_start(task)
    ):
        return None
    now = timezone.now()
    run_id = new_run_id()
    claimed = (
        Task.objects.filter(pk=task_pk, state__in=[TaskState.SUBMITTED, TaskState.WORKING])
        .filter(
            Q(lease_expires_at__isnull=True)
            | Q(lease_expires_at__lt=now)
            | Q(lease_owner=worker_id)
        )
        .update(
            lease_owner=worker_id,
            lease_expires_at=now + timedelta(seconds=lease_seconds()),
            attempts=F("attempts") + 1,
            run_id=run_id,
        )
    )
    if claimed != 1:
        return None
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task_pk)
        previous = task.runs[-1]["runId"] if task.runs else None
        answered = [e for e in task.transcript if e["type"] == "answer"]
        task.runs.append(
            {
                "runId": run_id,
                "resumedFrom": previous,
                "interactionId": answered[-1]["interactionId"] if answered and previous else None,
                "startedAt": now.isoformat(),
                "worker": worker_id,
            }
        )
        if task.state == TaskState.SUBMITTED:
            task_status_set(task, TaskState.WORKING, also=("runs",))
        else:
            task.save(update_fields=["runs"])
    return task


def lease_wait(*, task_pk: int, worker_id: str, seconds: float) -> None:
    """Sleep for a scripted pause, keeping the lease alive."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(remaining, max(1.0, lease_seconds() / 3)))
        renewed = Task.objects.filter(
            pk=task_pk, lease_owner=worker_id, state=TaskState.WORKING
        ).update(lease_expires_at=lease_expiry())
        if renewed != 1:
            raise LeaseLost()


@contextmanager
def lease_kept(*, task_pk: int, worker_id: str):
    """Renew the lease from a second thread while a tool call is out.

    A call may take longer than the lease; without this the sweep would hand the turn to
    another worker, which would find the call sent but not closed and call it uncertain
    while it is still running here.
    """
    stop = threading.Event()

    def beat():
        try:
            while not stop.wait(max(0.5, lease_seconds() / 3)):
                Task.objects.filter(pk=task_pk, lease_owner=worker_id).update(
                    lease_expires_at=lease_expiry()
                )
        finally:
            connection.close()  # this thread's own connection

    heart = threading.Thread(target=beat, name=f"lease-{task_pk}", daemon=True)
    heart.start()
    try:
        yield
    finally:
        stop.set()
        heart.join()
