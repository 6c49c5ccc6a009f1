"""What a model's tokens cost: a per-model price table, which telemetry/v1's costUsd is
computed from. A row in Django admin ("Model prices", runtime.agents.agent_models.ModelPrice) overrides
settings.MODEL_PRICES (USD per million tokens); a model in neither costs nothing."""

import functools
from decimal import Decimal

from django.conf import settings
from django.db import connection

from runtime.agents.agent_models import ModelPrice
from runtime.kernel import rowsql
from runtime.kernel.rowsql import Columns

MILLION = Decimal(1_000_000)
_PRICE = Columns(ModelPrice, "p", ["id", "input_usd_per_million", "output_usd_per_million"])


@functools.cache
def _price_sql() -> str:
    """price_for's read, written once: every hosted model's reply asks it (the ORM compiled
    it each time)."""
    q = connection.ops.quote_name
    meta = ModelPrice._meta
    return (
        f"SELECT {_PRICE.sql()} FROM {q(meta.db_table)} {q('p')} "
        f"WHERE {q('p')}.{q(meta.get_field('model').column)} = %s"
    )


def price_for(model: str) -> tuple[Decimal, Decimal]:
    """(input, output) USD per million tokens for ``model``; unknown models cost nothing."""
    with rowsql.cursor() as cursor:
        cursor.execute(_price_sql(), [model])
        row = cursor.fetchone()
    if row is not None:
        price = _PRICE.build(row)  # model is unique: one row at most
        return price.input_usd_per_million, price.output_usd_per_million
    prices = getattr(settings, "MODEL_PRICES", {}).get(model)
    if not prices:
        return Decimal(0), Decimal(0)
    return Decimal(str(prices[0])), Decimal(str(prices[1]))


def cost_usd(model: str, input_tokens: int, output_tokens: int) -> Decimal:
    price_in, price_out = price_for(model)
    return (price_in * input_tokens + price_out * output_tokens) / MILLION
