"""A turn's lease: the worker that holds it runs the turn; when it runs out (the worker died)
the sweep gives the turn to another worker."""

import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from config.logging import log_context, log_fields
from runtime.decisions.decision_models import Effect
from runtime.kernel.store import task_claim_read, turn_earlier_open
from runtime.kernel.task_models import (
    TERMINAL_STATES,
    Task,
    TaskState,
    new_key,
)
from runtime.kernel.task_state import (
    LEASE_FIELDS,
    TurnBatch,
    task_save,
    task_status_set,
)

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another worker took the turn over, or it was canceled: stop quietly."""


def worker_id_of(request) -> str:
    """Who holds a turn's lease: host, process and the Celery message (``request.id``), so that
    the threads of one worker process, each running a turn, never share a worker id."""
    return f"{socket.gethostname()}:{os.getpid()}:{request.id or 'eager'}"


def lease_seconds() -> int:
    return getattr(settings, "TURN_LEASE_SECONDS", 60)


def lease_expiry() -> datetime:
    """When a lease taken or renewed now runs out."""
    return timezone.now() + timedelta(seconds=lease_seconds())


def new_run_id() -> str:
    return new_key("run_", 9)


def turn_claim(*, task_pk: int, worker_id: str) -> Task | None:
    """Take the turn's lease if it is free (or expired, or already this worker's) and start a
    new run phase, in one transaction: the row lock makes the check and the take one step."""
    with transaction.atomic():
        return claim_locked(task_pk=task_pk, worker_id=worker_id)


def claim_locked(*, task_pk: int, worker_id: str, batch: TurnBatch | None = None) -> Task | None:
    """``turn_claim`` inside the caller's transaction. With ``batch`` (the runner's, which goes
    on in the same transaction) the claimed task carries it: its save and its wake-up are made
    with the batch's, when the runner commits."""
    read = task_claim_read(task_pk)
    if read is None:
        return None
    task, waits_for_earlier = read
    if task.state not in (TaskState.SUBMITTED, TaskState.WORKING):
        return None
    now = timezone.now()
    free = (
        task.lease_expires_at is None
        or task.lease_expires_at < now
        or task.lease_owner == worker_id
    )
    # A turn that ends looks for its context's next queued turn (task_end) before
    # it commits. A message that commits behind it in that moment still sees it open, is
    # queued, and is not found by it: its own claim (intake publishes a queued turn too)
    # waits for that end to commit (turn_earlier_open), and goes on.
    if not free or (waits_for_earlier and turn_earlier_open(task)):
        return None
    previous = task.runs[-1]["runId"] if task.runs else None
    answered = [e for e in task.transcript if e["type"] == "answer"]
    task.lease_owner = worker_id
    task.lease_expires_at = now + timedelta(seconds=lease_seconds())
    task.attempts += 1
    task.run_id = new_run_id()
    task.runs.append(
        {
            "runId": task.run_id,
            "resumedFrom": previous,
            "interactionId": answered[-1]["interactionId"] if answered and previous else None,
            "startedAt": now.isoformat(),
            "worker": worker_id,
        }
    )
    if batch is not None:
        task.turn_batch = batch
    claimed = ("runs", "run_id", "attempts", *LEASE_FIELDS)
    if task.state == TaskState.SUBMITTED:
        task_status_set(task, TaskState.WORKING, also=claimed)
    else:
        task_save(task, claimed)
    return task


def lease_wait(*, task_pk: int, worker_id: str, seconds: float) -> None:
    """Sleep for a scripted pause, keeping the lease alive (and no database connection)."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        with db_released():
            time.sleep(min(remaining, max(1.0, lease_seconds() / 3)))
        renewed = Task.objects.filter(
            pk=task_pk, lease_owner=worker_id, state=TaskState.WORKING
        ).update(lease_expires_at=lease_expiry())
        if renewed != 1:
            raise LeaseLost()


@contextmanager
def db_released():
    """Give this thread's database connection back before network I/O (a model, a tool server,
    a url part): with psycopg's pool it returns to the pool for other turns' threads, so a
    worker holding 200 waiting turns needs a few connections, not 200.

    Inside a transaction it does nothing: nothing may be waited on while a lock is held (and
    tests run inside one). SQLite's connections are files, not server slots: they are kept.
    """
    db_give_back()
    yield


def db_give_back() -> None:
    """``db_released``'s release, for a read made while released (a credential looked up by a
    provider just before its call): the connection it took goes back to the pool at once
    instead of being held through the call."""
    if not connection.in_atomic_block and connection.vendor != "sqlite":
        connection.close()


@dataclass(eq=False)
class LeaseHold:
    task_pk: int
    worker_id: str
    since: float = field(default_factory=time.monotonic)
    warned: bool = False
    # The turn's log context (its task and tenant), for the renewer thread's lines about it.
    log: dict = field(default_factory=log_fields)


class LeaseRenewer:
    """One thread per worker process renews the leases of all its turns that wait on the
    network, in one UPDATE every lease/3: no thread per turn, one query per round.

    The thread starts with the first hold and sleeps while there is none. A hold older than
    ``TURN_HOLD_MAX_SECONDS`` is no longer renewed: the threads pool cannot enforce Celery's
    time limits, so this is what lets the sweep take back a turn whose call hangs for good
    (the effect is then seen as uncertain, as when a prefork child is killed at its limit).
    """

    BATCH = 200  # keys per UPDATE; SQLite bounds the depth of an OR chain

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # After a fork only the forking thread exists: start afresh (lock, holds, thread).
        self._lock = threading.Lock()
        self._holds: set[LeaseHold] = set()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, *, task_pk: int, worker_id: str) -> LeaseHold:
        hold = LeaseHold(task_pk, worker_id)
        with self._lock:
            self._holds.add(hold)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)
                self._thread.start()
            self._wake.set()
        return hold

    def drop(self, hold: LeaseHold) -> None:
        with self._lock:
            self._holds.discard(hold)

    def held(self) -> list[LeaseHold]:
        with self._lock:
            return list(self._holds)

    def _run(self) -> None:
        while True:
            if not self.held():
                self._wake.wait()  # idle until a turn holds a lease
                self._wake.clear()
                continue
            # A hold is leased when it starts (claimed or locked moments ago): renewing it
            # one interval later keeps it well within its lease.
            slept = time.monotonic()
            while time.monotonic() - slept < max(0.5, lease_seconds() / 3):
                time.sleep(0.25)  # in slices: a shorter lease (settings) takes effect at once
            if not self.held():
                continue
            try:
                self.renew()
            except Exception:  # the database may be away a moment: try again next round
                logger.exception("lease renewal failed")
            finally:
                connection.close()  # this thread's own connection, back to the pool

    def renew(self) -> int:
        """Renew every held lease that is still this worker's; return how many were."""
        limit = hold_max_seconds()
        now = time.monotonic()
        live = []
        for hold in self.held():
            if now - hold.since < limit:
                live.append(hold)
            elif not hold.warned:
                hold.warned = True
                with log_context(**hold.log):
                    logger.warning(
                        "task %s: held for over %ss, its lease is no longer renewed",
                        hold.task_pk,
                        limit,
                    )
        renewed = 0
        for i in range(0, len(live), self.BATCH):
            owned = Q()
            for hold in live[i : i + self.BATCH]:
                owned |= Q(pk=hold.task_pk, lease_owner=hold.worker_id)
            renewed += Task.objects.filter(owned).update(lease_expires_at=lease_expiry())
        return renewed


def hold_max_seconds() -> int:
    return getattr(settings, "TURN_HOLD_MAX_SECONDS", 600)


lease_renewer = LeaseRenewer()


@contextmanager
def lease_kept(*, task_pk: int, worker_id: str):
    """Keep the turn's lease while this thread waits on the network (a model, a tool server,
    a url part), and give its database connection back meanwhile (``db_released``).

    A call may take longer than the lease; without this the sweep would hand the turn to
    another worker, which would find the call sent but not closed and call it uncertain
    while it is still running here. The process-wide ``lease_renewer`` does the renewing.
    """
    hold = lease_renewer.hold(task_pk=task_pk, worker_id=worker_id)
    try:
        with db_released():
            yield
    finally:
        lease_renewer.drop(hold)


# --- the turn queue ---------------------------------------------------------------------------


def turn_may_start(task: Task) -> bool:
    """Turns of one context run one at a time, in order."""
    return not (
        Task.objects.filter(context=task.context, turn__lt=task.turn)
        .exclude(state__in=TERMINAL_STATES)
        .exists()
    )


def turns_to_sweep(
    *, now=None, stale_submitted_after: timedelta = timedelta(seconds=30)
) -> list[int]:
    """Turns whose worker died (lease ran out) or whose start message was lost."""
    now = now or timezone.now()
    working = (
        Task.objects.filter(state=TaskState.WORKING)
        .filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True))
        # A turn parked on an uncertain effect waits for an operator, not for the sweep.
        .exclude(effects__state=Effect.State.UNCERTAIN)
    )
    submitted = Task.objects.filter(
        state=TaskState.SUBMITTED,
        lease_expires_at__isnull=True,
        created_at__lt=now - stale_submitted_after,
    )
    pks = list(working.values_list("pk", flat=True)[:500])
    pks += [t.pk for t in submitted.select_related("context")[:500] if turn_may_start(t)]
    return pks
