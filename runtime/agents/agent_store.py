"""The agents' statements written by hand (runtime.kernel.store's kind: each behind a function
named in the domain's words, built once per database from the models' ``_meta``, run on
rowsql's cursor): what every hosted model's call and reply reads (its credential, its price)
and the demo tool servers' record of a call. Each was compiled by the ORM at every call
(bench/store_cost.py). Like the store, it imports nothing but models and sits under every
service of the core.
"""

import functools
from decimal import Decimal

from django.db import connections

from runtime.agents.agent_models import Credential, DemoRecord, ModelPrice
from runtime.kernel import rowsql
from runtime.kernel.rowsql import Columns


@functools.cache
def _credential_sql(using: str) -> str:
    connection = connections[using]
    q = connection.ops.quote_name
    tenant, name, secret = (
        rowsql.column(Credential, f, using) for f in ("tenant", "name", "secret_encrypted")
    )
    return (
        f"SELECT {secret} FROM {q(Credential._meta.db_table)} WHERE {tenant} = %s AND {name} = %s"
    )


def credential_secret_read(*, tenant, name: str, using: str = "default") -> str | None:
    """The tenant's credential ``name``, as stored (encrypted); None when it has none. A hosted
    model's every call asks it (the ORM compiled it each time); unique per tenant, a text
    column: one row at most, nothing to convert."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(_credential_sql(using), [tenant.pk, name])
        row = cursor.fetchone()
    return None if row is None else row[0]


_PRICE = Columns(ModelPrice, "p", ["id", "input_usd_per_million", "output_usd_per_million"])


@functools.cache
def _price_sql(using: str) -> str:
    connection = connections[using]
    q = connection.ops.quote_name
    return (
        f"SELECT {_PRICE.sql(using)} FROM {q(ModelPrice._meta.db_table)} {q('p')} "
        f"WHERE {q('p')}.{rowsql.column(ModelPrice, 'model', using)} = %s"
    )


def model_price_read(model: str, *, using: str = "default") -> tuple[Decimal, Decimal] | None:
    """(input, output) USD per million tokens set for ``model`` in admin, or None: every
    hosted model's reply asks it (the ORM compiled it each time)."""
    with rowsql.cursor(using) as cursor:
        cursor.execute(_price_sql(using), [model])
        row = cursor.fetchone()
    if row is None:
        return None
    price = _PRICE.build(row, using=using)  # model is unique: one row at most
    return price.input_usd_per_million, price.output_usd_per_million


@functools.cache
def _demo_record_sql(using: str) -> str:
    connection = connections[using]
    q = connection.ops.quote_name
    insert = rowsql.insert_of(DemoRecord, using=using)
    return (
        f"{insert.head}{insert.row} "
        f"ON CONFLICT ({rowsql.column(DemoRecord, 'effect_id', using)}) DO NOTHING "
        f"RETURNING {q(DemoRecord._meta.pk.column)}"
    )


def demo_record_insert(record: DemoRecord, *, using: str = "default") -> int | None:
    """INSERT the demo servers' record of a call unless one of its effect is there (ON
    CONFLICT DO NOTHING, both backends): its key, or None when it was there. One statement
    where get_or_create was a read, then a transaction of its own around the insert."""
    connection = connections[using]
    values = [
        f.get_db_prep_save(f.pre_save(record, True), connection)
        for f in rowsql.insert_of(DemoRecord, using=using).fields
    ]
    with rowsql.cursor(using) as cursor:
        cursor.execute(_demo_record_sql(using), values)
        row = cursor.fetchone()
    return None if row is None else row[0]
