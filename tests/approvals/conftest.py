"""Fixtures for the operator channel: the demo agents of both tenants, each tenant with an
operator token and a maker of real paused turns (tests/core.py)."""

import pytest

from tenants.models import ApiToken
from tenants.tokens import api_token_create
from tests.core import Maker


@pytest.fixture
def agents(agents):
    """The demo world (tests/conftest.py), each side with an operator token and a Maker."""
    for side in (agents.a, agents.b):
        _, token = api_token_create(
            tenant=side.tenant,
            subject=f"program:{side.tenant.slug}-ops",
            name="ops bot",
            kind=ApiToken.Kind.OPERATOR,
        )
        side.extra["operator_token"] = token
        side.extra["make"] = Maker(side)
    return agents
