"""The A2A endpoint's bridge from async views to the database, and its blocking wait.

A blocking SendMessage can wait for minutes. Django would run each request's database work
on a thread of the request's own (thread-sensitive), idle for the whole wait: a thousand
waiters, a thousand threads. A2A requests run theirs on a small shared pool instead (see
config/asgi.py), holding a thread only while a query runs, and a database connection only
for one call.
"""

import asyncio
import contextvars
import functools
import json
import re
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from operator import itemgetter
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from psycopg.conninfo import make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from config.metrics import A2A_WAITERS
from runtime.kernel.errors import TaskNotFound
from runtime.kernel.task_models import ANONYMOUS, SETTLED_STATES, TURN_RUNTIME_FIELDS, Task
from runtime.kernel.wakeups import Mark, wait_for_state


def release_connection() -> None:
    """Give the database connection back (to the pool) before a long wait."""
    # So that a thousand waiting callers do not hold a thousand connections.
    connection.close()


def _call_releasing(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    finally:
        # Hold a database connection for one call, not for the whole request: under ASGI
        # each request has a thread of its own, and a thousand requests in flight queued for
        # a pool of a few connections and timed out (bench/waiters.py). Inside an atomic
        # block (a test's transaction) the connection is the caller's to keep.
        if not connection.in_atomic_block:
            connection.close()


_DB_EXECUTOR = ThreadPoolExecutor(max_workers=settings.A2A_DB_THREADS, thread_name_prefix="a2a-db")


async def on_the_shared_pool(fn, *args, **kwargs):
    """Run ``fn`` on the shared database threads, with a connection for that call only."""
    # In a copy of the caller's context (its log fields, its span), as sync_to_async runs it,
    # without asgiref's bookkeeping around each call (half the hop's CPU on the event loop):
    # nothing a database call sets in its context is read back by the view. A caller that
    # goes away stops waiting; a call already running finishes (a send is not lost).
    return await asyncio.get_running_loop().run_in_executor(
        _DB_EXECUTOR,
        contextvars.copy_context().run,
        functools.partial(_call_releasing, fn, *args, **kwargs),
    )


async def on_the_callers_thread(fn, *args, **kwargs):
    """Run ``fn`` on the thread that called the view (Django's own way, thread-sensitive)."""
    return await sync_to_async(_call_releasing, thread_sensitive=True)(fn, *args, **kwargs)


# How db() runs a call: on the shared threads. A test that keeps its rows in its own open
# transaction sees them only from its own thread, and runs its calls there instead
# (tests/conftest.py puts on_the_callers_thread here): the one thing tests change.
call_runner: Callable[..., Awaitable] = on_the_shared_pool


async def db(fn, *args, **kwargs):
    """Run ``fn``, a synchronous database call, on the shared threads and await it."""
    return await call_runner(fn, *args, **kwargs)


def _read_state(pk: int) -> str | None:
    state = Task.objects.filter(pk=pk).values_list("state", flat=True).first()
    release_connection()
    return state


async def _wait_on_pool(task: Task, since: Mark | None) -> None:
    deadline = time.monotonic() + settings.A2A_WAIT_MS / 1000
    known = (since, task.state) if since is not None else None
    # Each db() call has given its connection back already; the reads below take one from the
    # async pool for one query each.
    with A2A_WAITERS.track_inprogress():
        await wait_for_state(task.pk, SETTLED_STATES, deadline, lambda: _state_read(task.pk), known)


async def wait_for_settled_stored(task: Task, *, since: Mark | None = None) -> "SettledTask":
    """wait_for_settled on the async pool (async_reads), the task read at the end as GetTask
    reads it: a SettledTask, the wire's columns with their JSON as stored (for
    wire.stored_task_wire)."""
    await _wait_on_pool(task, since)
    return await _settled_read(task.pk)


async def wait_for_settled(task: Task, *, since: Mark | None = None) -> Task:
    """A blocking send waits for a terminal or interrupted state, or A2A_WAIT_MS.

    ``since``: the listener's mark (runtime.kernel.wakeups.announcements_mark) taken before the send
    made or read ``task``; with it the wait need not read the task's state first."""
    if async_reads():
        await _wait_on_pool(task, since)
        return await _task_by_pk(task.pk)
    deadline = time.monotonic() + settings.A2A_WAIT_MS / 1000
    known = (since, task.state) if since is not None else None
    await db(release_connection)

    async def read_state():
        return await db(_read_state, task.pk)

    with A2A_WAITERS.track_inprogress():
        await wait_for_state(task.pk, SETTLED_STATES, deadline, read_state, known)
    return await db(Task.objects.get, pk=task.pk)


# --- GetTask's read without a thread (PostgreSQL) --------------------------------------------
#
# The hot path's one query, on psycopg's async pool and as a prepared statement: no hop to a
# thread, no ORM compilation. GetTask's (task_read, below) reads the same row as
# runtime.kernel.task_selectors.task_for_caller in ListTasks' shape (StoredTask), and so does a
# blocking send's last read (_settled_read, SettledTask); the 0.3 dialect's (_task_by_pk)
# builds a Task (Model.from_db; the turn runtime's columns deferred). SQLite, and tests whose rows are in their own transaction (Bridge), use
# task_for_caller itself.

# Every column but the turn runtime's own (never on the wire, and the largest): those stay
# deferred on the Task these reads make.
_TASK_FIELDS = [f for f in Task._meta.concrete_fields if f.name not in TURN_RUNTIME_FIELDS]
_TASK_COLUMNS = [f.column for f in _TASK_FIELDS]
_TASK_ATTNAMES = [f.attname for f in _TASK_FIELDS]
_TASK_TABLE = f'"{Task._meta.db_table}"'
_TASK_COLUMN_LIST = ", ".join(f'"{c}"' for c in _TASK_COLUMNS)
_TASK_STATE = f'SELECT "state" FROM {_TASK_TABLE} WHERE "id" = %s'
_TASK_BY_PK = f'SELECT {_TASK_COLUMN_LIST} FROM {_TASK_TABLE} WHERE "id" = %s'

_pools: dict = {}


def async_reads() -> bool:
    """Whether the endpoint reads tasks on the async pool: once the server has opened it on its
    event loop (PostgreSQL; pool_open, at the start of the ASGI process). Elsewhere (SQLite, a
    server run without ASGI's lifespan, Django's test client, which runs each request on an
    event loop of its own) tasks are read through the ORM."""
    try:
        return asyncio.get_running_loop() in _pools
    except RuntimeError:
        return False


# Options of Django's backend, not connection parameters (this pool prepares its reads itself).
_DJANGO_OPTIONS = frozenset(
    ("pool", "server_side_binding", "isolation_level", "assume_role", "prepare_threshold")
)


def _conninfo() -> str:
    db_settings = settings.DATABASES["default"]
    options: dict[str, Any] = {
        k: v
        for k, v in (db_settings.get("OPTIONS") or {}).items()
        if k not in _DJANGO_OPTIONS and isinstance(v, str | int)
    }
    # Timestamps come back in UTC, as Django's own connections read them.
    options["options"] = f"{options.get('options', '')} -c TimeZone=UTC".strip()
    return make_conninfo(
        dbname=db_settings["NAME"],
        user=db_settings.get("USER") or None,
        password=db_settings.get("PASSWORD") or None,
        host=db_settings.get("HOST") or None,
        port=str(db_settings["PORT"]) if db_settings.get("PORT") else None,
        **options,
    )


# orjson reads a number of 19 digits or more as a float (Python's json keeps the integer):
# such documents, and what orjson refuses, are read by the standard library.
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _json_loads(data: str | bytes):
    if isinstance(data, str):  # psycopg passes bytes; its loaders' type allows text too
        data = data.encode()
    if _LONG_NUMBER.search(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


async def _configure(conn) -> None:
    # A Task has seven JSON columns (GetTask, a blocking SendMessage's answer): read them with
    # orjson. ListTasks reads its page's as text (StoredTask).
    set_json_loads(_json_loads, conn)


async def _open_pool() -> AsyncConnectionPool:
    pool = AsyncConnectionPool(
        _conninfo(),
        min_size=1,
        max_size=settings.A2A_DB_ASYNC_POOL_SIZE,
        kwargs={"autocommit": True},
        configure=_configure,
        open=False,
    )
    await pool.open()
    return pool


async def pool_open() -> None:
    """Open the async pool on this event loop (config.asgi, as the server starts; PostgreSQL
    only): from then on the endpoint reads tasks on it (async_reads). Its connections are made
    in the background: a database that is not up yet delays the first read, not the start."""
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        await _reads()


class _Reads:
    """An event loop's async pool, and a gate of the pool's size in front of it.

    At a moment's burst (64 GetTasks at once against a pool of 10) the callers beyond the
    pool's size used to wait inside it: psycopg's pool makes each waiter an object with a
    condition and a timeout, a task of its own in all (8% of a GetTask's CPU). They wait at
    the gate instead, a semaphore of the pool's size (a future each), and past it the pool
    always has a connection to give."""

    __slots__ = ("gate", "pool")

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        self.gate = asyncio.Semaphore(pool.max_size)

    async def one(self, query: str, params) -> tuple | None:
        """The first row of ``query`` (a prepared statement), or None."""
        async with self.gate:
            conn = await self.pool.getconn()
            try:
                return await (await conn.execute(query, params, prepare=True)).fetchone()
            finally:
                await self.pool.putconn(conn)


async def _reads() -> _Reads:
    # One pool per event loop: the server's (uvicorn runs one), opened at its start; a direct
    # caller on a loop of its own (a test) gets one made on first use.
    loop = asyncio.get_running_loop()
    opening = _pools.get(loop)
    if opening is None:
        opening = _pools[loop] = asyncio.ensure_future(_reads_open())
    return await opening


async def _reads_open() -> _Reads:
    return _Reads(await _open_pool())


async def pool_close() -> None:
    """Close this event loop's pool (tests that run a loop of their own)."""
    opening = _pools.pop(asyncio.get_running_loop(), None)
    if opening is not None:
        await (await opening).pool.close()


async def _state_read(pk: int) -> str | None:
    row = await (await _reads()).one(_TASK_STATE, (pk,))
    return row[0] if row else None


async def _task_by_pk(pk: int) -> Task:
    row = await (await _reads()).one(_TASK_BY_PK, (pk,))
    if row is None:
        raise Task.DoesNotExist(pk)  # as Task.objects.get: the task was deleted meanwhile
    return Task.from_db("default", _TASK_ATTNAMES, row)


# --- ListTasks' read (PostgreSQL) -------------------------------------------------------------
#
# A page is up to a hundred tasks, and most of each task's bytes are JSON that the wire shows
# as stored (its status message, its history). ListTasks reads those columns as PostgreSQL's
# text of the jsonb and puts them on the wire unparsed (wire.stored_task_wire), and makes no
# model instances: parsing them and building Tasks was most of a ListTasks' CPU.


class StoredTask(tuple):
    """A task of a ListTasks page: a row of the columns its wire is made of, the JSON ones as
    their stored text (``*_text``). task_wire reads it as it reads a Task: each JSON attribute
    is parsed the first time it is read. A tuple, as the database's row: a page makes up to a
    hundred."""

    FIELDS = ("id", "public_id", "wire_context_id", "subject", "state", "status_timestamp")
    JSON_FIELDS = ("status_message", "status_ext", "history", "artifacts", "artifact_ext")

    pk = property(itemgetter(0))
    public_id = property(itemgetter(1))
    wire_context_id = property(itemgetter(2))
    subject = property(itemgetter(3))
    state = property(itemgetter(4))
    status_timestamp = property(itemgetter(5))
    status_message_text = property(itemgetter(6))
    status_ext_text = property(itemgetter(7))
    history_text = property(itemgetter(8))
    artifacts_text = property(itemgetter(9))
    artifact_ext_text = property(itemgetter(10))
    # The status timestamp as the wire writes it (runtime.kernel.shapes.now_iso), by PostgreSQL.
    status_timestamp_wire = property(itemgetter(11))

    status_message = cached_property(lambda self: _parsed(self.status_message_text))
    status_ext = cached_property(lambda self: _parsed(self.status_ext_text))
    history = cached_property(lambda self: _parsed(self.history_text))
    artifacts = cached_property(lambda self: _parsed(self.artifacts_text))
    artifact_ext = cached_property(lambda self: _parsed(self.artifact_ext_text))


def _parsed(text: str | None):
    return None if text is None else _json_loads(text.encode())


_COLUMN_OF = {field.name: field.column for field in Task._meta.concrete_fields}
_STORED_COLUMN_LIST = ", ".join(
    [f'"{_COLUMN_OF[name]}"' for name in StoredTask.FIELDS]
    + [f'"{_COLUMN_OF[name]}"::text' for name in StoredTask.JSON_FIELDS]
    # to_char's MS truncates to milliseconds, as now_iso does; YYYY has four digits at least.
    + [
        f"to_char(\"{Task._meta.get_field('status_timestamp').column}\" AT TIME ZONE 'UTC', "
        '\'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')'
    ]
)


_STORED_SELECT = (
    f"SELECT {_STORED_COLUMN_LIST} FROM {_TASK_TABLE} "
    'WHERE "tenant_id" = %s AND "agent_id" = %s AND "public_id" = %s AND NOT "direct"'
)
_STORED_OF_SUBJECT = _STORED_SELECT + ' AND "subject" = %s LIMIT 1'
# As task_for_caller's filter for callers without credentials (subject__startswith).
_STORED_OF_ANONYMOUS = _STORED_SELECT + ' AND ("subject" = %s OR "subject" LIKE %s) LIMIT 1'


class SettledTask(StoredTask):
    """A blocking send's task once its wait is over: a StoredTask and what send_message asks
    of it besides (whether it is a 0.x direct reply's, the turn's reply message)."""

    direct = property(itemgetter(12))
    reply_message_text = property(itemgetter(13))
    reply_message = cached_property(lambda self: _parsed(self.reply_message_text))


_SETTLED_BY_PK = (
    f'SELECT {_STORED_COLUMN_LIST}, "direct", "reply_message"::text '
    f'FROM {_TASK_TABLE} WHERE "id" = %s'
)


async def _settled_read(pk: int) -> SettledTask:
    row = await (await _reads()).one(_SETTLED_BY_PK, (pk,))
    if row is None:
        raise Task.DoesNotExist(pk)  # as Task.objects.get: the task was deleted meanwhile
    return SettledTask(row)


async def task_read(*, tenant, agent, subject: str, task_id: str) -> StoredTask:
    """task_for_caller (runtime.kernel.task_selectors) on the async pool, as GetTask shows it:
    the caller's task as a StoredTask (wire.stored_task_wire puts its JSON on the wire as
    stored), or TaskNotFound. Reading a Task instead (every column, each JSON one parsed,
    a model instance made, then written out again) was a third of GetTask's own CPU."""
    params: tuple[str, ...]
    if subject == ANONYMOUS:
        query, params = _STORED_OF_ANONYMOUS, (ANONYMOUS, f"{ANONYMOUS}:%")
    else:
        query, params = _STORED_OF_SUBJECT, (subject,)
    row = await (await _reads()).one(query, (tenant.pk, agent.pk, task_id, *params))
    if row is None:
        raise TaskNotFound(f"Task {task_id} was not found.", taskId=task_id)
    return StoredTask(row)


async def tasks_page_read(
    *,
    tenant,
    agent,
    subject: str,
    context_id: str | None,
    state: str | None,
    status_after,
    cursor,
    page_size: int,
) -> tuple[list[StoredTask], int, bool]:
    """tasks_page (runtime.kernel.task_selectors) on the async pool: (tasks, total, more)."""
    if subject == ANONYMOUS:
        # Anonymous callers are not one caller: listing would show each the others' tasks.
        return [], 0, False
    # NOT "direct": the partial index's own condition (runtime.kernel.task_models.Task, direct replies).
    where = ['"tenant_id" = %s', '"agent_id" = %s', '"subject" = %s', 'NOT "direct"']
    params: list = [tenant.pk, agent.pk, subject]
    if context_id:
        where.append('"wire_context_id" = %s')
        params.append(context_id)
    if state:
        where.append('"state" = %s')
        params.append(state)
    if status_after:
        where.append('"status_timestamp" >= %s')
        params.append(status_after)
    page_where, page_params = list(where), list(params)
    if cursor:
        ts, pk = cursor
        page_where.append('("status_timestamp" < %s OR ("status_timestamp" = %s AND "id" < %s))')
        page_params += [ts, ts, pk]
    count_query = f"SELECT COUNT(*) FROM {_TASK_TABLE} WHERE {' AND '.join(where)}"
    # The total rides on the page's rows (one statement, one round trip); an empty page has
    # no row to carry it, and asks for it on its own.
    page_query = (
        f"SELECT {_STORED_COLUMN_LIST}, ({count_query}) FROM {_TASK_TABLE} "
        f"WHERE {' AND '.join(page_where)} "
        'ORDER BY "status_timestamp" DESC, "id" DESC LIMIT %s'
    )
    reads = await _reads()
    async with reads.gate, reads.pool.connection() as conn:
        rows = await (
            await conn.execute(page_query, (*params, *page_params, page_size + 1), prepare=True)
        ).fetchall()
        if rows:
            total = rows[0][-1]
        else:
            count = await (await conn.execute(count_query, params, prepare=True)).fetchone()
            total = count[0] if count is not None else 0  # COUNT(*): always one row
    tasks = [StoredTask(row[:-1]) for row in rows[:page_size]]
    return tasks, total, len(rows) > page_size
