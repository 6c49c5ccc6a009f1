"""Rows written and read by hot paths with their SQL built once per process, not per call.

Django compiles each ``save()``, ``objects.create()`` and queryset anew: for a turn, the
compiling costs more CPU than the statements themselves (bench/turn_cost.py, py-spy on the
worker). These helpers build the statement text of a model and a list of its fields once,
from the model's ``_meta`` (columns, quoting, ``pre_save`` and ``get_db_prep_save`` of each
field, the backend's converters), and then only prepare the values and execute.

What they do is what Django's ``save()`` and ``Model.from_db`` do for these rows, with two
exceptions callers must accept: no ``pre_save``/``post_save`` signals are sent, and model
``save()`` overrides are not called. Both backends run the same SQL (quoted names, ``%s``
parameters, ``RETURNING`` where the backend has it; an INSERT falls back to the ORM where not).
"""

from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from django.db import connections
from django.db.models import Field, Model

M = TypeVar("M", bound=Model)

_inserts: dict = {}
_updates: dict = {}
_moves: dict = {}


def cursor(using: str = "default"):
    """A cursor for hot statements. On PostgreSQL it sends the parameters apart from the
    statement (psycopg's server-side binding) instead of quoting each into the statement's
    text as Django's cursors do: a turn's parameters are mostly JSON (the task row's), and
    quoting them was a tenth of a turn's CPU. Wrapped as Django wraps its own cursors, so
    that query logging and execute wrappers (the statement counts of the tests and of
    bench/turn_cost.py) see these statements too. A statement a connection has run
    ``DATABASE_PREPARE_THRESHOLD`` times (5) is prepared on the server from then on: no parse,
    and mostly no plan (config/settings.py; Django's own cursors quote, and are never
    prepared)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return connection.cursor()
    # Django defines it only when psycopg 3 is installed, so its type stubs leave it out.
    from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]

    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        bound = ServerBindingCursor(connection.connection)
    if connection.queries_logged:
        return connection.make_debug_cursor(bound)
    return connection.make_cursor(bound)


def _quote(connection, name: str) -> str:
    return connection.ops.quote_name(name)


def _fields(model: type[Model], names: Iterable[str] | None) -> tuple:
    if names is None:
        return tuple(model._meta.concrete_fields)
    return tuple(model._meta.get_field(name) for name in names)


class Insert:
    """A model's INSERT (``sql_of(rows)``: of that many rows, returning their keys where the
    backend can), built once per process: row_insert's and rows_insert's, and the store's
    (runtime.kernel.store) where it writes rows in a statement of its own."""

    def __init__(self, model: type[Model], fields: tuple, connection) -> None:
        meta = model._meta
        self.pk = meta.pk
        self.fields = tuple(f for f in fields if f is not meta.pk)
        table = _quote(connection, meta.db_table)
        columns = ", ".join(_quote(connection, f.column) for f in self.fields)
        self.row = f"({', '.join(['%s'] * len(self.fields))})"
        self.head = f"INSERT INTO {table} ({columns}) VALUES "
        self.returning = connection.features.can_return_columns_from_insert
        self.tail = f" RETURNING {_quote(connection, self.pk.column)}" if self.returning else ""
        self.sql = self.head + self.row + self.tail
        self.sql_with_pk = (
            f"INSERT INTO {table} ({_quote(connection, self.pk.column)}, {columns}) "
            f"VALUES (%s, {self.row[1:]}"
        )
        self._many: dict[int, str] = {}

    def sql_of(self, rows: int) -> str:
        """The INSERT of ``rows`` rows, returning their keys."""
        found = self._many.get(rows)
        if found is None:
            found = self._many[rows] = self.head + ", ".join([self.row] * rows) + self.tail
        return found

    def values_of(self, obj: Model, connection) -> list | None:
        """``obj``'s values for this INSERT, as ``save()`` writes them; None when one is an
        expression (a ``db_default``, an ``F()``), which only the ORM writes."""
        return _prepared(obj, self.fields, connection, add=True)


def insert_of(model: type[Model], fields: Sequence[str] | None = None, using: str = "default"):
    """``model``'s Insert (of ``fields``, by default all its concrete ones), built once."""
    connection = connections[using]
    key = (model, None if fields is None else tuple(fields), connection.vendor)
    insert = _inserts.get(key)
    if insert is None:
        insert = _inserts[key] = Insert(model, _fields(model, fields), connection)
    return insert


class _Update:
    def __init__(self, model: type[Model], fields: tuple, connection) -> None:
        meta = model._meta
        self.fields = fields
        assignments = ", ".join(f"{_quote(connection, f.column)} = %s" for f in fields)
        self.sql = (
            f"UPDATE {_quote(connection, meta.db_table)} SET {assignments} "
            f"WHERE {_quote(connection, meta.pk.column)} = %s"
        )


def _prepared(obj: Model, fields: tuple, connection, *, add: bool) -> list | None:
    """The fields' values as ``save()`` writes them, or None when one is an expression (a
    ``db_default``, an ``F()``): those are left to the ORM."""
    values = []
    for field in fields:
        value = field.pre_save(obj, add)
        if hasattr(value, "resolve_expression"):
            return None
        values.append(field.get_db_prep_save(value, connection))
    return values


def saved(obj: Model, pk, using: str = "default") -> None:
    """Mark ``obj`` as written with key ``pk``, as ``save()`` leaves it: for each statement here
    (and the store's, the event store's) that inserts a row and reads its key back."""
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = using


def row_insert(obj: Model, fields: Sequence[str] | None = None, *, using: str = "default") -> None:
    """INSERT ``obj`` (its ``fields``, by default all its concrete ones; the others take their
    column defaults) and set its primary key, as ``save(force_insert=True)`` does."""
    connection = connections[using]
    insert = insert_of(type(obj), fields, using)
    values = insert.values_of(obj, connection)
    if values is None or (obj.pk is None and not insert.returning):
        obj.save(force_insert=True, using=using)
        return
    with cursor(using) as cur:
        if obj.pk is None:
            cur.execute(insert.sql, values)
            pk = cur.fetchone()[0]
        else:
            pk = obj.pk
            cur.execute(insert.sql_with_pk, [insert.pk.get_db_prep_save(pk, connection), *values])
    saved(obj, pk, using)


def rows_insert(objs: Sequence[Model], *, using: str = "default") -> None:
    """INSERT ``objs`` (of one model, without primary keys) in one statement and set their
    primary keys, as ``bulk_create`` does; one ``row_insert`` each where the backend cannot
    return the keys of a multi-row INSERT."""
    if not objs:
        return
    connection = connections[using]
    insert = insert_of(type(objs[0]), using=using)
    rows = None
    if (
        len(objs) > 1
        and connection.features.can_return_rows_from_bulk_insert
        and all(obj.pk is None for obj in objs)
    ):
        rows = [insert.values_of(obj, connection) for obj in objs]
    if rows is None or any(values is None for values in rows):
        for obj in objs:
            row_insert(obj, using=using)
        return
    with cursor(using) as cur:
        cur.execute(insert.sql_of(len(objs)), [v for values in rows for v in values])
        # In the order of VALUES, as Django's bulk_create relies on.
        keys = [row[0] for row in cur.fetchall()]
    for obj, pk in zip(objs, keys, strict=True):
        saved(obj, pk, using)


def row_update(
    obj: Model,
    fields: Iterable[str],
    *,
    notify: tuple[str, str] | None = None,
    using: str = "default",
) -> int:
    """UPDATE ``fields`` of ``obj``'s row; return how many rows were (0: it is gone). As
    ``save(update_fields=fields)`` writes them (``auto_now`` fields only when named).

    ``notify``: (channel, payload) of a PostgreSQL NOTIFY that the same statement sends when
    it updates the row (one round trip for the save and the announcement of it)."""
    connection = connections[using]
    model = type(obj)
    fields = tuple(fields)
    statement = update_of(obj, fields, using=using)
    if statement is None:
        update = _updates[(model, fields, connection.vendor)]
        updated = (
            model._base_manager.using(using)
            .filter(pk=obj.pk)
            .update(**{f.attname: getattr(obj, f.attname) for f in update.fields})
        )
        if updated and notify is not None:
            with cursor(using) as cur:
                cur.execute("SELECT pg_notify(%s, %s)", list(notify))
        return updated
    sql, params = statement
    with cursor(using) as cur:
        if notify is None:
            cur.execute(sql, params)
        else:
            # RETURNING runs once per updated row: the NOTIFY goes only with the update.
            cur.execute(f"{sql} RETURNING pg_notify(%s, %s)", [*params, *notify])
        return cur.rowcount


def update_of(obj: Model, fields: Iterable[str], *, using: str = "default") -> tuple | None:
    """``row_update``'s statement and its parameters, for a caller that sends it as part of a
    statement of its own (runtime.kernel.event_store); None when a field's value is an
    expression (the ORM's to write)."""
    connection = connections[using]
    model = type(obj)
    key = (model, tuple(fields), connection.vendor)
    update = _updates.get(key)
    if update is None:
        update = _updates[key] = _Update(model, _fields(model, key[1]), connection)
    values = _prepared(obj, update.fields, connection, add=False)
    if values is None:
        return None
    return update.sql, [*values, model._meta.pk.get_db_prep_save(obj.pk, connection)]


def column(model: type[Model], name: str, using: str = "default") -> str:
    """The quoted column of ``model``'s field ``name``, for hand-written SQL."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field):
        raise ValueError(f"{model.__name__}.{name} is not a column")
    return _quote(connections[using], field.column)


class Statements:
    """Hand-written SQL that a reader builds once per database vendor (``build``, from the
    models' ``_meta``) and then reuses (``sql``), as the helpers above do for theirs."""

    def __init__(self) -> None:
        self._sql: dict = {}

    def build(self, connection):
        raise NotImplementedError

    def sql(self, using: str = "default"):
        connection = connections[using]
        found = self._sql.get(connection.vendor)
        if found is None:
            found = self._sql[connection.vendor] = self.build(connection)
        return found


class Columns(Generic[M]):
    """A model's columns in a hand-written SELECT (``sql``, qualified by ``alias``) and the
    instance made from its part of a result row (``build``), converted as the ORM converts
    them: for reads that join or lock in ways a queryset would compile on every call."""

    def __init__(self, model: type[M], alias: str, fields: Sequence[str] | None = None):
        self.model = model
        self.alias = alias
        # In the model's order: Model.from_db maps a partial row onto its fields in that order.
        chosen = _fields(model, fields)
        self.fields = tuple(f for f in model._meta.concrete_fields if f in chosen)
        if model._meta.pk not in self.fields:
            raise ValueError("Columns needs the primary key")
        self.attnames = [f.attname for f in self.fields]
        self._converters: dict = {}

    def __len__(self) -> int:
        return len(self.fields)

    def sql(self, using: str = "default") -> str:
        connection = connections[using]
        alias = _quote(connection, self.alias)
        return ", ".join(f"{alias}.{_quote(connection, f.column)}" for f in self.fields)

    def converters(self, connection) -> list:
        found = self._converters.get(connection.vendor)
        if found is None:
            found = []
            for i, field in enumerate(self.fields):
                col = field.get_col(self.alias)
                # As SQLCompiler.get_converters: the backend's first, then the field's.
                chain = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
                if chain:
                    found.append((i, chain, col))
            self._converters[connection.vendor] = found
        return found

    def build(self, row: Sequence, start: int = 0, *, using: str = "default") -> M:
        """The instance of ``row[start:start + len(self)]``, as ``Model.from_db`` makes it."""
        connection = connections[using]
        values = list(row[start : start + len(self.fields)])
        for i, chain, col in self.converters(connection):
            value = values[i]
            for converter in chain:
                value = converter(value, col, connection)
            values[i] = value
        return self.model.from_db(using, self.attnames, values)


class _Move:
    def __init__(self, model: type[Model], fields: tuple, where: tuple, connection) -> None:
        meta = model._meta
        self.pk = meta.pk
        self.fields = fields
        self.where = where
        assignments = ", ".join(f"{_quote(connection, f.column)} = %s" for f in fields)
        conditions = "".join(f" AND {_quote(connection, f.column)} = %s" for f in where)
        self.sql = (
            f"UPDATE {_quote(connection, meta.db_table)} SET {assignments} "
            f"WHERE {_quote(connection, meta.pk.column)} = %s{conditions}"
        )


def row_move(model: type[Model], pk, *, where: dict, values: dict, using: str = "default") -> int:
    """``model.objects.filter(pk=pk, **where).update(**values)``: a conditional write (a
    claim: 1 when the row still was as ``where`` says, else 0) without compiling the UPDATE on
    every call. Plain values only, as the hot paths write them: no expressions, and ``where``
    compares each field for equality with a value that is not None."""
    sql, params = move_of(model, pk, where=where, values=values, using=using)
    return statement_run(sql, params, using=using)


def statement_run(sql: str, params: list, *, using: str = "default") -> int:
    """Run a statement built here (``move_of``'s) on the hot cursor: how many rows it wrote."""
    with cursor(using) as cur:
        cur.execute(sql, params)
        return cur.rowcount


def move_of(model: type[Model], pk, *, where: dict, values: dict, using: str = "default") -> tuple:
    """``row_move``'s statement and its parameters, for a caller that sends it as part of a
    statement of its own (runtime.kernel.event_store)."""
    connection = connections[using]
    key = (model, tuple(values), tuple(where), connection.vendor)
    move = _moves.get(key)
    if move is None:
        move = _moves[key] = _Move(
            model, _fields(model, key[1]), _fields(model, key[2]), connection
        )
    params = []
    for value, field in zip(values.values(), move.fields, strict=True):
        if hasattr(value, "resolve_expression"):
            raise TypeError(f"row_move writes plain values, not {value!r}")
        params.append(field.get_db_prep_save(value, connection))
    params.append(move.pk.get_db_prep_value(pk, connection))
    for value, field in zip(where.values(), move.where, strict=True):
        if value is None or hasattr(value, "resolve_expression"):
            raise TypeError(f"row_move compares with plain values, not {value!r}")
        params.append(field.get_db_prep_value(value, connection))
    return move.sql, params
