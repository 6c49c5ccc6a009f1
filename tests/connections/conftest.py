"""Fixtures for the connections suite: catalog apps, the runtime hook, a stub OAuth2 provider."""

from unittest import mock

import pytest
from allauth.socialaccount.models import SocialApp

from connections.models import App
from tests.connections.oauth_stub import StubProvider


@pytest.fixture(autouse=True)
def runtime_hook(monkeypatch):
    """Stands in for the core's runtime.services.interactions_connect_app, so that these tests
    see exactly when and how it is called; its effect is tested in tests/runtime."""
    import runtime.services as module

    hook = mock.Mock(name="interactions_connect_app")
    monkeypatch.setattr(module, "interactions_connect_app", hook)
    return hook


@pytest.fixture
def github(db) -> App:
    return App.objects.create(slug="github", name="GitHub", method=App.Method.TOKEN)


@pytest.fixture
def stub_provider():
    with StubProvider() as stub:
        yield stub


@pytest.fixture
def stub_app(db, stub_provider) -> App:
    """An OAuth2 catalog app whose allauth OpenID Connect social application is the stub."""
    social_app = SocialApp.objects.create(
        provider="openid_connect",
        provider_id="stub",
        name="Stub ID",
        client_id=StubProvider.client_id,
        secret=StubProvider.client_secret,
        settings={"server_url": stub_provider.base_url},
    )
    return App.objects.create(
        slug="stub-drive",
        name="Stub Drive",
        method=App.Method.OAUTH2,
        social_app=social_app,
        scopes="files.read files.write",
    )
