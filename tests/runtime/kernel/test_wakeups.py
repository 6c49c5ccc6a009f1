"""Wake-ups of waiting callers (runtime.kernel.wakeups): what the listener remembers, and that a
waiter that trusts it instead of reading the task misses no change."""

import asyncio
import time
from types import SimpleNamespace

import pytest
from django.db import connection

from runtime.kernel import wakeups as notify
from runtime.kernel.task_models import SETTLED_STATES, TaskState

# Tasks that exist only in announcements: the wait never reads the database unless told to.
TASK_PK = 987_654_321


def test_announcements_give_the_last_state_after_a_mark():
    heard = notify.Announcements(size=10)
    heard.record(1, TaskState.WORKING)
    mark = heard.seq
    assert heard.since(1, mark) == ""
    heard.record(2, TaskState.WORKING)
    heard.record(1, TaskState.WORKING)
    heard.record(1, TaskState.INPUT_REQUIRED)
    assert heard.since(1, mark) == TaskState.INPUT_REQUIRED
    assert heard.since(2, mark) == TaskState.WORKING
    assert heard.since(3, mark) == ""


def test_announcements_stay_bounded_and_say_when_they_have_forgotten():
    heard = notify.Announcements(size=3)
    heard.record(1, TaskState.WORKING)
    mark = heard.seq
    heard.record(2, TaskState.WORKING)
    heard.record(3, TaskState.WORKING)
    heard.record(4, TaskState.WORKING)
    assert heard.since(2, mark) == TaskState.WORKING  # nothing after the mark dropped yet
    heard.record(5, TaskState.INPUT_REQUIRED)  # drops task 2's announcement
    assert len(heard.last) == len(heard.order) == 3
    # Task 2 may have changed after the mark, and that is forgotten: the waiter must read.
    assert heard.since(2, mark) is None
    assert heard.since(6, mark) is None
    assert heard.since(5, heard.seq - 1) == TaskState.INPUT_REQUIRED


def _announce(state: str) -> None:
    """The worker's NOTIFY (task_changed), committed on a connection of its own."""
    try:
        notify.task_changed(SimpleNamespace(pk=TASK_PK, state=state, event_seq=2))
    finally:
        connection.close()


async def _until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the listener did not get there")
        await asyncio.sleep(0.01)


async def _listening() -> "notify._Listener":
    notify.listen_start()
    listener = notify._listener()
    await asyncio.wait_for(listener.ready.wait(), 10)
    return listener


def _no_read():
    raise AssertionError("the wait read the task's state")


@pytest.mark.postgres
def test_a_change_announced_before_the_waiter_registers_wakes_it_without_a_read(
    postgres_only, transactional_db
):
    async def scenario():
        listener = await _listening()
        mark = notify.announcements_mark()
        assert mark is not None
        # The turn runs and settles before its caller gets to wait (a busy event loop).
        await asyncio.to_thread(_announce, TaskState.WORKING)
        await asyncio.to_thread(_announce, TaskState.INPUT_REQUIRED)
        await _until(lambda: listener.announcements.seq >= mark.seq + 2)
        return await notify.wait_for_state(
            TASK_PK,
            SETTLED_STATES,
            time.monotonic() + 30,
            _no_read,
            (mark, TaskState.SUBMITTED),
        )

    assert asyncio.run(scenario()) == TaskState.INPUT_REQUIRED


@pytest.mark.postgres
def test_a_waiter_with_a_mark_and_nothing_announced_yet_waits_for_the_change(
    postgres_only, transactional_db
):
    async def scenario():
        listener = await _listening()
        mark = notify.announcements_mark()
        waiting = asyncio.create_task(
            notify.wait_for_state(
                TASK_PK,
                SETTLED_STATES,
                time.monotonic() + 30,
                _no_read,
                (mark, TaskState.SUBMITTED),
            )
        )
        await _until(lambda: TASK_PK in listener.waiters)
        assert not waiting.done()
        await asyncio.to_thread(_announce, TaskState.INPUT_REQUIRED)
        return await asyncio.wait_for(waiting, 30)

    assert asyncio.run(scenario()) == TaskState.INPUT_REQUIRED


@pytest.mark.postgres
def test_a_mark_taken_before_the_listener_reconnected_is_not_trusted(
    postgres_only, transactional_db
):
    """What was announced while the listener was not connected is heard by nobody: a waiter
    whose mark comes from before reads the task."""

    def listener_dropped():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE %s",
                [f"LISTEN {notify.CHANNEL}%"],
            )
            dropped = cursor.rowcount
        connection.close()
        return dropped

    async def scenario():
        listener = await _listening()
        mark = notify.announcements_mark()
        heard = listener.announcements
        # This test's listener among them (others, of earlier tests' event loops, may be left).
        assert await asyncio.to_thread(listener_dropped) >= 1
        await _until(lambda: listener.announcements not in (None, heard))
        reads = []

        async def read_state():
            reads.append(TASK_PK)
            return TaskState.INPUT_REQUIRED

        state = await notify.wait_for_state(
            TASK_PK, SETTLED_STATES, time.monotonic() + 30, read_state, (mark, TaskState.SUBMITTED)
        )
        return state, reads

    assert asyncio.run(scenario()) == (TaskState.INPUT_REQUIRED, [TASK_PK])


def test_no_mark_without_a_listener():
    async def scenario():
        return notify.announcements_mark()

    # SQLite has no announcements; on PostgreSQL this new event loop has no listener yet.
    assert asyncio.run(scenario()) is None


@pytest.mark.postgres
def test_a_status_change_and_a_turn_announce_each_commit_once_with_the_state_saved(
    postgres_only, transactional_db, agents, make_agent
):
    """The NOTIFY goes with the task's save, in its statement: a decision-like change outside
    a turn, and a turn's batch, each announce once, with the state they committed."""
    import psycopg
    from django.db import transaction

    from runtime.kernel.task_models import Task
    from runtime.kernel.task_state import task_status_set
    from runtime.turn.runner import turn_run
    from tests.core import send

    make_agent("greeter", [{"reply": "Hello."}])
    task = send(agents.a, "greeter", "hi")
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"],
        dbname=settings["NAME"],
        autocommit=True,
    ) as listening:
        listening.execute(f"LISTEN {notify.CHANNEL}")

        def heard() -> list[str]:
            return [n.payload for n in listening.notifies(timeout=1, stop_after=1)]

        with transaction.atomic():
            locked = Task.objects.select_for_update().get(pk=task.pk)
            task_status_set(locked, TaskState.WORKING)
        # The state and the seq of the last event it committed (a stream reads up to it).
        assert heard() == [f"{task.pk}:{TaskState.WORKING}:2"]
        Task.objects.filter(pk=task.pk).update(state=TaskState.SUBMITTED)

        turn_run(task_pk=task.pk, worker_id="w1")
        # The claim and the reply commit together: one announcement, of the end.
        assert heard() == [f"{task.pk}:{TaskState.COMPLETED}:4"]
        assert heard() == []
