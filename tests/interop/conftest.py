"""Fixtures for the interop suite: a partner (tests/sdk_client.py) holding the demo tenant's
token, calling the live stack."""

import pytest

from tests.sdk_client import Partner


@pytest.fixture
def partner(live_stack, demo):
    p = Partner(live_stack.url, demo["token"])
    yield p
    p.close()


@pytest.fixture
def agents(demo) -> dict:
    return demo["agents"]
