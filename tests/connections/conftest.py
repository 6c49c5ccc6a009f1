"""Fixtures for the connections suite: catalog apps, the runtime hook, a stub OAuth2 provider."""

from unittest import mock

import pytest
from allauth.socialaccount.models import SocialApp

from connections.models import App
from tests.connections.oauth_stub import StubProvider


@pytest.fixture(autouse=True)
def runtime_hook():
    """Stands in for the runtime's receiver of connections.signals.app_connected, so that these
    tests see exactly when and how the runtime is told; its effect is tested in tests/runtime.
    The mock is called with the signal's arguments (tenant, app, by)."""
    from connections.signals import app_connected
    from runtime.receivers import app_connected_received

    hook = mock.Mock(name="app_connected receiver")

    def stand_in(sender, signal, **kwargs):
        hook(**kwargs)

    app_connected.disconnect(dispatch_uid="runtime-app-connected")
    app_connected.connect(stand_in, weak=False, dispatch_uid="tests-app-connected")
    try:
        yield hook
    finally:
        app_connected.disconnect(dispatch_uid="tests-app-connected")
        app_connected.connect(app_connected_received, dispatch_uid="runtime-app-connected")


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
