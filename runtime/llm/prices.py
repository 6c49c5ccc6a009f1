"""What a model's tokens cost: a per-model price table, which telemetry/v1's costUsd is
computed from. A row in Django admin ("Model prices", runtime.agents.agent_models.ModelPrice) overrides
settings.MODEL_PRICES (USD per million tokens); a model in neither costs nothing."""

from decimal import Decimal

from django.conf import settings

from runtime.agents.agent_store import model_price_read

MILLION = Decimal(1_000_000)


def price_for(model: str) -> tuple[Decimal, Decimal]:
    """(input, output) USD per million tokens for ``model``; unknown models cost nothing."""
    price = model_price_read(model)
    if price is not None:
        return price
    prices = getattr(settings, "MODEL_PRICES", {}).get(model)
    if not prices:
        return Decimal(0), Decimal(0)
    return Decimal(str(prices[0])), Decimal(str(prices[1]))


def cost_usd(model: str, input_tokens: int, output_tokens: int) -> Decimal:
    price_in, price_out = price_for(model)
    return (price_in * input_tokens + price_out * output_tokens) / MILLION
