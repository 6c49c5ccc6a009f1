"""The per-model price table: settings.MODEL_PRICES, overridden by rows set in admin."""

from decimal import Decimal
from http import HTTPStatus

import pytest
from django.test import Client

from runtime.agents.agent_models import ModelPrice
from runtime.llm.prices import cost_usd, price_for
from tenants.models import User

pytestmark = pytest.mark.django_db


def test_settings_give_the_price_of_a_known_model(settings):
    settings.MODEL_PRICES = {"gpt-4o-mini": (0.15, 0.60)}
    assert price_for("gpt-4o-mini") == (Decimal("0.15"), Decimal("0.60"))
    assert cost_usd("gpt-4o-mini", 1_000_000, 2_000_000) == Decimal("1.35")


def test_an_unknown_model_costs_nothing(settings):
    settings.MODEL_PRICES = {}
    assert price_for("my-local-llama") == (Decimal(0), Decimal(0))
    assert cost_usd("my-local-llama", 1000, 1000) == 0


def test_a_price_set_in_admin_beats_the_settings(settings):
    settings.MODEL_PRICES = {"gpt-4o-mini": (0.15, 0.60)}
    client = Client()
    client.force_login(User.objects.create_superuser(email="staff@countersign.test", password="x"))
    response = client.post(
        "/admin/runtime/modelprice/add/",
        {
            "model": "gpt-4o-mini",
            "input_usd_per_million": "1.25",
            "output_usd_per_million": "5",
        },
    )
    assert response.status_code == HTTPStatus.FOUND, response.content[:2000]
    assert price_for("gpt-4o-mini") == (Decimal("1.25"), Decimal("5"))
    assert cost_usd("gpt-4o-mini", 2_000, 1_000) == Decimal("0.0075")
    # Other models still come from the settings.
    settings.MODEL_PRICES["gpt-4o"] = (2.5, 10)
    assert price_for("gpt-4o") == (Decimal("2.5"), Decimal("10"))


def test_a_negative_price_is_a_form_error_and_saves_nothing():
    client = Client()
    client.force_login(User.objects.create_superuser(email="staff@countersign.test", password="x"))
    response = client.post(
        "/admin/runtime/modelprice/add/",
        {"model": "gpt-4o", "input_usd_per_million": "-1", "output_usd_per_million": "5"},
    )
    assert response.status_code == HTTPStatus.OK and b"errorlist" in response.content
    assert not ModelPrice.objects.exists()
