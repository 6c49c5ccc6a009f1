"""The core's statements written by hand, each behind a function named in the domain's words.

Everything else reads and writes through the ORM, or through runtime.kernel.rowsql's saves
compiled once. A statement is here because the ORM cannot say it (rows of several tables in
one statement, a lock of one table of a join, FOR SHARE) or because a benchmark shows what
compiling it on every call costs (bench/turn_cost.py, bench/decisions.py, bench/store_cost.py;
the statement counts are pinned in tests/runtime/turn/test_turn_queries.py and
tests/approvals/test_answer_cost.py). Each is built once per database from the models'
``_meta`` (quoted names, ``%s`` parameters) and runs on rowsql's cursor; a read's rows are
made into model instances as the ORM makes them (rowsql.Columns).

Here are a turn's (its claim, its batches' locks, its start, a call's journal) and a
decision's; a task's events with their push deliveries are runtime.kernel.event_store's, and
what a hosted model's calls read and the demo servers write, runtime.agents.agent_store's.

The store sits with the models under every service of the core (tests/test_architecture.py):
its statements join tables of several domains (a task with its agent, an effect with its
interaction), so it belongs to no one domain's package, and it imports nothing but models.
"""

import functools

from django.db import connections

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.kernel import rowsql
from runtime.kernel.event_store import next_turn_sql
from runtime.kernel.rowsql import Columns
from runtime.kernel.task_models import (
    TERMINAL_STATES,
    AuditChainHead,
    Context,
    Task,
    TaskEvent,
    TaskState,
)
from tenants.models import Tenant


def _q(connection):
    return connection.ops.quote_name


def _col(model, name: str, connection) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _lock(connection, alias: str) -> str:
    """FOR UPDATE of ``alias`` only (the task: locking a joined tenant's or agent's row too
    serialised every turn of a tenant, and deadlocked with the foreign-key checks of new
    tasks, bench/waiters.py); SQLite locks the whole database."""
    return (
        f" FOR UPDATE OF {_q(connection)(alias)}"
        if connection.features.has_select_for_update
        else ""
    )


_TERMINAL = sorted(TERMINAL_STATES)
_TASK_TENANT = Task._meta.get_field("tenant")
_TASK_AGENT = Task._meta.get_field("agent")


# --- a turn's claim and its batches (runtime.turn) ------------------------------------------

_CLAIM_TASK = Columns(Task, "t")
_CLAIM_TENANT = Columns(Tenant, "n")
_CLAIM_AGENT = Columns(Agent, "a")


def _earlier_open_where(connection, alias: str, context: str, turn: str) -> str:
    """Rows of ``alias`` (quoted) that are turns of ``context`` before ``turn`` (SQL for them)
    and not ended; the terminal states are the statement's parameters (_TERMINAL)."""
    column = {name: _col(Task, name, connection) for name in ("context", "turn", "state")}
    states = ", ".join(["%s"] * len(_TERMINAL))
    return (
        f"{alias}.{column['context']} = {context} AND {alias}.{column['turn']} < {turn} "
        f"AND NOT ({alias}.{column['state']} IN ({states}))"
    )


@functools.cache
def _claim_sql(using: str) -> str:
    connection = connections[using]
    q = _q(connection)
    t, n, a, e = q("t"), q("n"), q("a"), q("e")
    table = q(Task._meta.db_table)
    earlier = _earlier_open_where(
        connection,
        e,
        f"{t}.{_col(Task, 'context', connection)}",
        f"{t}.{_col(Task, 'turn', connection)}",
    )
    return (
        f"SELECT {_CLAIM_TASK.sql(using)}, {_CLAIM_TENANT.sql(using)}, {_CLAIM_AGENT.sql(using)}, "
        f"EXISTS (SELECT 1 FROM {table} {e} WHERE {earlier}) FROM {table} {t} "
        f"INNER JOIN {q(Tenant._meta.db_table)} {n} "
        f"ON {n}.{q(Tenant._meta.pk.column)} = {t}.{_col(Task, 'tenant', connection)} "
        f"INNER JOIN {q(Agent._meta.db_table)} {a} "
        f"ON {a}.{q(Agent._meta.pk.column)} = {t}.{_col(Task, 'agent', connection)} "
        f"WHERE {t}.{q(Task._meta.pk.column)} = %s{_lock(connection, 't')}"
    )


def task_claim_read(task_pk: int, *, using: str = "default") -> tuple[Task, bool] | None:
    """The task, its row locked, with its tenant and agent (the run needs both), and whether
    an earlier turn of its context is still open (turns of a context run one at a time, in
    order: asked in this statement, not in one more); None when there is no such task.

    As a queryset (select_for_update, select_related, an Exists annotation) Django compiled
    it anew for every turn: more of the worker's CPU than the statement itself."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(_claim_sql(using), [*_TERMINAL, task_pk])
        row = cursor.fetchone()
    if row is None:
        return None
    task = _CLAIM_TASK.build(row, using=using)
    at = len(_CLAIM_TASK)
    _TASK_TENANT.set_cached_value(task, _CLAIM_TENANT.build(row, at, using=using))
    at += len(_CLAIM_TENANT)
    _TASK_AGENT.set_cached_value(task, _CLAIM_AGENT.build(row, at, using=using))
    return task, bool(row[at + len(_CLAIM_AGENT)])


@functools.cache
def _earlier_open_sql(using: str) -> str:
    connection = connections[using]
    table = _q(connection)(Task._meta.db_table)
    return (
        f"SELECT 1 FROM {table} WHERE {_earlier_open_where(connection, table, '%s', '%s')} "
        "FOR SHARE"
    )


def turn_earlier_open(task: Task, *, using: str = "default") -> bool:
    """Whether an earlier turn of the task's context is still open, asked once the
    transactions that hold those turns' rows have ended: FOR SHARE (which the ORM cannot
    say) waits for a transaction that holds such a row (a turn's end, a cancel) and then
    reads the row as it committed (PostgreSQL's READ COMMITTED), so an ended turn drops out.
    SQLite has one writer at a time and nothing in flight to wait for: True."""
    if not connections[using].features.has_select_for_update:
        return True
    with rowsql.cursor(using) as cursor:
        cursor.execute(_earlier_open_sql(using), [task.context_id, task.turn, *_TERMINAL])
        return cursor.fetchone() is not None


_POLICY = Columns(Agent, "a", ["id", "tool_policy"])


@functools.cache
def _run_lock_sql(using: str) -> str:
    connection = connections[using]
    q = _q(connection)
    t, a = q("t"), q("a")
    where = " AND ".join(
        f"{t}.{_col(Task, name, connection)} = %s"
        for name in ("id", "run_id", "lease_owner", "state")
    )
    return (
        f"SELECT {_POLICY.sql(using)} FROM {q(Task._meta.db_table)} {t} "
        f"INNER JOIN {q(Agent._meta.db_table)} {a} "
        f"ON {a}.{q(Agent._meta.pk.column)} = {t}.{_col(Task, 'agent', connection)} "
        f"WHERE {where}{_lock(connection, 't')}"
    )


def task_lock_for_run(
    *, task_pk: int, run_id: str, worker_id: str, using: str = "default"
) -> dict | None:
    """Lock the task's row on condition that it is still this run's (its run id and lease
    owner, and working); return its agent's tool policy as it is now (the run may have waited
    while an admin changed it), or None when the row is not the run's any more. Only the lock
    and the check: the run keeps the row itself in memory (runtime.turn.batch)."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(_run_lock_sql(using), [task_pk, run_id, worker_id, TaskState.WORKING])
        row = cursor.fetchone()
    return None if row is None else _POLICY.build(row, using=using).tool_policy


def context_next_turn(task: Task, *, using: str = "default") -> int | None:
    """The key of the task's context's next queued turn (SUBMITTED, after this one), if any."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(next_turn_sql(using), [task.context_id, task.turn, TaskState.SUBMITTED])
        row = cursor.fetchone()
    return None if row is None else row[0]


# --- a turn's start (runtime.turn.intake) ----------------------------------------------------

# The rows a turn's start writes, each with the foreign key (``link``) to the row before it.
_TURN_ROWS = ((Context, None), (Task, "context"), (TaskEvent, "task"))
_LINKS = {model: link for model, link in _TURN_ROWS if link is not None}


def _insert_fields(model) -> tuple:
    """The columns an INSERT of ``model`` writes: all but the primary key (the database's)."""
    return tuple(f for f in model._meta.concrete_fields if not f.primary_key)


@functools.cache
def _turn_rows_sql(with_context: bool, using: str) -> str:
    connection = connections[using]
    q = _q(connection)
    rows = _TURN_ROWS if with_context else _TURN_ROWS[1:]
    inserts, before = [], None
    for model, link in rows:
        fields = _insert_fields(model)
        values = ", ".join(
            f"(SELECT {q(before._meta.pk.column)} FROM {q(before._meta.model_name)})"
            if before is not None and f.name == link
            else "%s"
            for f in fields
        )
        inserts.append(
            f"{q(model._meta.model_name)} AS (INSERT INTO {q(model._meta.db_table)} "
            f"({', '.join(q(f.column) for f in fields)}) VALUES ({values}) "
            f"RETURNING {q(model._meta.pk.column)})"
        )
        before = model
    ids = ", ".join(f"{q(m._meta.model_name)}.{q(m._meta.pk.column)}" for m, _ in rows)
    names = ", ".join(q(m._meta.model_name) for m, _ in rows)
    return f"WITH {', '.join(inserts)} SELECT {ids} FROM {names}"


def turn_rows_insert(
    context: Context | None, task: Task, event: TaskEvent, *, using: str = "default"
) -> None:
    """Insert a new ``context`` (None: the task's context is there already), the task and its
    first event, and give each object its id, in the caller's transaction.

    On PostgreSQL one statement whose rows each take the id the row before it got: the ORM
    compiled an INSERT per row on every send, and each was a round trip of its own. Elsewhere
    one INSERT per row (rowsql), each object linked to the one before."""
    connection = connections[using]
    objs = [obj for obj in (context, task, event) if obj is not None]
    if connection.vendor != "postgresql":
        for before, obj in zip([None, *objs], objs, strict=False):
            if before is not None:
                setattr(obj, _LINKS[type(obj)], before)
            rowsql.row_insert(obj, using=using)
        return
    values = []
    for i, obj in enumerate(objs):
        # The first row's foreign keys are all values; the others' link comes from the SQL.
        link = _LINKS[type(obj)] if i else None
        values += [
            f.get_db_prep_save(f.pre_save(obj, True), connection)
            for f in _insert_fields(type(obj))
            if f.name != link
        ]
    # rowsql's cursor sends the parameters apart from the statement (the task's JSON is not
    # quoted into its text).
    with rowsql.cursor(using) as cursor:
        cursor.execute(_turn_rows_sql(context is not None, using), values)
        ids = cursor.fetchone()
    for before, obj, pk in zip([None, *objs], objs, ids, strict=False):
        if before is not None:
            setattr(obj, _LINKS[type(obj)], before)
        rowsql.saved(obj, pk, using)


# --- a tool call's journal (runtime.turn.calls) ---------------------------------------------

_JOURNAL_EFFECT = Columns(Effect, "e")
_JOURNAL_INTERACTION = Columns(Interaction, "i")
_JOURNAL_RECEIPT = Columns(Receipt, "r")


@functools.cache
def _journal_sql(using: str) -> str:
    connection = connections[using]
    q = _q(connection)

    def col(model, name):
        return _col(model, name, connection)

    e, i, r, latest = q("e"), q("i"), q("r"), q("latest")
    receipts, receipt_pk = q(Receipt._meta.db_table), q(Receipt._meta.pk.column)
    # The latest receipt as receipt_binding orders them (Receipt.Meta.ordering).
    return (
        f"SELECT {_JOURNAL_EFFECT.sql(using)}, {_JOURNAL_INTERACTION.sql(using)}, "
        f"{_JOURNAL_RECEIPT.sql(using)} FROM {q(Effect._meta.db_table)} {e} "
        f"LEFT JOIN {q(Interaction._meta.db_table)} {i} "
        f"ON {i}.{col(Interaction, 'tenant')} = {e}.{col(Effect, 'tenant')} "
        f"AND {i}.{col(Interaction, 'public_id')} = {e}.{col(Effect, 'public_id')} "
        f"LEFT JOIN {receipts} {r} ON {r}.{receipt_pk} = ("
        f"SELECT {latest}.{receipt_pk} FROM {receipts} {latest} "
        f"WHERE {latest}.{col(Receipt, 'tenant')} = {e}.{col(Effect, 'tenant')} "
        f"AND {latest}.{col(Receipt, 'effect_public_id')} = {e}.{col(Effect, 'public_id')} "
        f"ORDER BY {latest}.{col(Receipt, 'created_at')} DESC, {latest}.{receipt_pk} DESC "
        f"LIMIT 1) "
        f"WHERE {e}.{col(Effect, 'task')} = %s AND {e}.{col(Effect, 'step')} = %s"
    )


def call_journal_read(
    *, task: Task, step: int, using: str = "default"
) -> tuple[Effect | None, Interaction | None, Receipt | None]:
    """The step's effect, the interaction that holds it (an approval's id is its effect's)
    and the effect's latest receipt (what its sending must still match), in one statement:
    as querysets they were three, each compiled anew, a third of the worker's CPU for a turn
    resumed by an approval (bench/decisions.py, py-spy)."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(_journal_sql(using), [task.pk, step])
        row = cursor.fetchone()
    if row is None:
        return None, None, None
    effect = _JOURNAL_EFFECT.build(row, using=using)
    effect.task = task
    at = len(_JOURNAL_EFFECT)
    interaction = _JOURNAL_INTERACTION.build(row, at, using=using) if row[at] is not None else None
    at += len(_JOURNAL_INTERACTION)
    receipt = _JOURNAL_RECEIPT.build(row, at, using=using) if row[at] is not None else None
    return effect, interaction, receipt


# --- a decision's reads (runtime.decisions.interaction_state) -------------------------------

_DECISION_TASK = Columns(Task, "t")
_DECISION_AGENT = Columns(Agent, "a")
_DECISION_INTERACTION = Columns(Interaction, "i")
_DECISION_EFFECT = Columns(Effect, "e")


@functools.cache
def _decision_task_sql(using: str) -> str:
    connection = connections[using]
    q = _q(connection)
    t, a, i = q("t"), q("a"), q("i")
    return (
        f"SELECT {_DECISION_TASK.sql(using)}, {_DECISION_AGENT.sql(using)} "
        f"FROM {q(Task._meta.db_table)} {t} "
        f"INNER JOIN {q(Agent._meta.db_table)} {a} "
        f"ON {a}.{q(Agent._meta.pk.column)} = {t}.{_col(Task, 'agent', connection)} "
        f"WHERE {t}.{_col(Task, 'tenant', connection)} = %s "
        f"AND {t}.{q(Task._meta.pk.column)} = "
        f"(SELECT {i}.{_col(Interaction, 'task', connection)} "
        f"FROM {q(Interaction._meta.db_table)} {i} "
        f"WHERE {i}.{_col(Interaction, 'tenant', connection)} = %s "
        f"AND {i}.{_col(Interaction, 'public_id', connection)} = %s){_lock(connection, 't')}"
    )


def decision_task_lock(*, tenant, interaction_id: str, using: str = "default") -> Task | None:
    """The task of the tenant's interaction, its row locked (the same lock as in-band answers
    and the turn take), found through the interaction, with its agent; None when the tenant
    has no such interaction."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(_decision_task_sql(using), [tenant.pk, tenant.pk, interaction_id])
        row = cursor.fetchone()
    if row is None:
        return None
    task = _DECISION_TASK.build(row, using=using)
    _TASK_AGENT.set_cached_value(task, _DECISION_AGENT.build(row, len(_DECISION_TASK), using=using))
    return task


@functools.cache
def _decision_interaction_sql(using: str) -> str:
    connection = connections[using]
    q = _q(connection)

    def col(model, name):
        return _col(model, name, connection)

    i, e = q("i"), q("e")
    # The held call as decision_selectors.held_call_for finds it (the approval's id is its
    # effect's); none for the other kinds.
    return (
        f"SELECT {_DECISION_INTERACTION.sql(using)}, {_DECISION_EFFECT.sql(using)} "
        f"FROM {q(Interaction._meta.db_table)} {i} "
        f"LEFT JOIN {q(Effect._meta.db_table)} {e} "
        f"ON {e}.{col(Effect, 'tenant')} = {i}.{col(Interaction, 'tenant')} "
        f"AND {e}.{col(Effect, 'task')} = {i}.{col(Interaction, 'task')} "
        f"AND {e}.{col(Effect, 'public_id')} = {i}.{col(Interaction, 'public_id')} "
        f"AND {i}.{col(Interaction, 'kind')} = %s "
        f"WHERE {i}.{col(Interaction, 'tenant')} = %s "
        f"AND {i}.{col(Interaction, 'public_id')} = %s"
    )


def decision_interaction_read(
    *, task: Task, interaction_id: str, using: str = "default"
) -> tuple[Interaction, Effect | None] | None:
    """The interaction (of the locked ``task``'s tenant) and the call it holds, an approval's
    effect, in one statement (the ORM needed one more); both with ``task`` cached."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(
            _decision_interaction_sql(using),
            [Interaction.Kind.APPROVAL, task.tenant_id, interaction_id],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    interaction = _DECISION_INTERACTION.build(row, using=using)
    interaction.task = task
    at = len(_DECISION_INTERACTION)
    effect = _DECISION_EFFECT.build(row, at, using=using) if row[at] is not None else None
    if effect is not None:
        effect.task = task
    return interaction, effect


# --- the audit chain (runtime.kernel.audit, runtime.kernel.audit_chain) ---------------------


def audit_chain_advance(
    *, tenant_id: int, content_hash: str, link, using: str = "default"
) -> tuple[int, str, str]:
    """Where a new audit row of the tenant goes on SQLite: (place, previous hash, chain hash),
    the head moved on. The head's row is written first, so that this transaction holds the
    database's one write lock before it reads the head (no two writers read the same end).
    ``link``: runtime.kernel.audit_hash.link_hash."""
    connection = connections[using]
    head = _q(connection)(AuditChainHead._meta.db_table)
    with rowsql.cursor(using) as cur:
        cur.execute(
            f"INSERT INTO {head} (tenant_id, seq, hash) VALUES (%s, 0, '') "
            "ON CONFLICT (tenant_id) DO UPDATE SET seq = seq",
            [tenant_id],
        )
        cur.execute(f"SELECT seq, hash FROM {head} WHERE tenant_id = %s", [tenant_id])
        seq, previous = cur.fetchone()
        linked = link(previous, content_hash)
        cur.execute(
            f"UPDATE {head} SET seq = %s, hash = %s WHERE tenant_id = %s",
            [seq + 1, linked, tenant_id],
        )
    return seq + 1, previous, linked


def audit_links_made(*, using: str = "default") -> None:
    """Run now, on PostgreSQL, the deferred links of the audit rows this transaction wrote
    (migration runtime 0034's trigger), and defer those of later rows again."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS runtime_audit_chain_link IMMEDIATE")
        cur.execute("SET CONSTRAINTS runtime_audit_chain_link DEFERRED")
