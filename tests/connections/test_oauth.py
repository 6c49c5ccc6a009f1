"""The OAuth2 path end to end against a real stub provider on 127.0.0.1 (see conftest)."""

from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.urls import reverse

from connections.models import Connection, ConnectionAuditEvent
from connections.selectors import connection_secret_for

pytestmark = pytest.mark.django_db

START = reverse("connections:oauth_start", args=["stub-drive"])
CALLBACK = reverse("connections:oauth_callback")


def authorize(client, stub_provider) -> dict:
    """Start the flow as the browser would, and let the stub provider approve it.

    Returns the callback's query (code and state) as the provider sent the browser back.
    """
    response = client.post(START)
    assert response.status_code == HTTPStatus.FOUND
    location = response["Location"]
    assert location.startswith(f"{stub_provider.base_url}/authorize?")
    asked = parse_qs(urlsplit(location).query)
    assert asked["scope"] == ["files.read files.write"]
    assert asked["redirect_uri"] == ["http://testserver/connections/oauth/callback"]
    back = httpx.get(location, follow_redirects=False)
    assert back.status_code == HTTPStatus.FOUND
    target = urlsplit(back.headers["Location"])
    assert target.path == CALLBACK
    return {k: v[0] for k, v in parse_qs(target.query).items()}


def test_oauth_happy_path_connects_the_tenant(
    world, stub_app, stub_provider, runtime_hook, django_capture_on_commit_callbacks
):
    client = world.a.client_for(world.a.operator)
    query = authorize(client, stub_provider)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.get(CALLBACK, query)

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == reverse("connections:index")
    connection = Connection.objects.get(tenant=world.a.tenant, app=stub_app)
    assert connection.status == Connection.Status.CONNECTED
    assert connection.connected_by == world.a.operator
    assert connection.expires_at is not None
    assert connection.refresh_token_encrypted
    (access_token,) = stub_provider.issued_tokens
    assert connection_secret_for(tenant=world.a.tenant, app_slug="stub-drive") == access_token
    assert access_token not in connection.access_token_encrypted
    assert connection_secret_for(tenant=world.b.tenant, app_slug="stub-drive") is None
    assert ConnectionAuditEvent.objects.get(tenant=world.a.tenant).method == "oauth2"
    runtime_hook.assert_called_once_with(
        tenant=world.a.tenant, app="stub-drive", by="user:operator@acme.test"
    )
    page = client.get(reverse("connections:index")).content.decode()
    assert "Reconnect with Stub ID" in page
    assert access_token not in page


def test_a_bad_state_is_refused_and_the_code_is_never_redeemed(world, stub_app, stub_provider):
    client = world.a.client_for(world.a.operator)
    query = authorize(client, stub_provider)

    response = client.get(CALLBACK, {**query, "state": "forged-" + query["state"][:10]})

    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "unknown or has expired" in response.content.decode()
    assert stub_provider.token_requests == []
    assert not Connection.objects.exists()


def test_a_callback_without_state_is_refused(world, stub_app, stub_provider):
    client = world.a.client_for(world.a.operator)
    query = authorize(client, stub_provider)
    response = client.get(CALLBACK, {"code": query["code"]})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert not Connection.objects.exists()


def test_a_state_works_once(world, stub_app, stub_provider):
    client = world.a.client_for(world.a.operator)
    query = authorize(client, stub_provider)
    assert client.get(CALLBACK, query).status_code == HTTPStatus.FOUND
    assert client.get(CALLBACK, query).status_code == HTTPStatus.BAD_REQUEST
    assert len(stub_provider.token_requests) == 1


def test_another_persons_callback_cannot_use_my_state(world, stub_app, stub_provider):
    query = authorize(world.a.client_for(world.a.operator), stub_provider)

    # The link leaks (or is planted) into tenant B's operator's browser: their session
    # never started this flow, so nothing is connected for either tenant.
    response = world.b.client_for(world.b.operator).get(CALLBACK, query)

    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert not Connection.objects.exists()


def test_the_tenant_is_the_one_the_flow_started_in(world, stub_app, stub_provider):
    from tenants.models import Membership

    # One person in both tenants starts in A, then switches to B before coming back.
    Membership.objects.create(tenant=world.b.tenant, user=world.a.operator, role="operator")
    client = world.a.client_for(world.a.operator)
    client.post("/tenant/switch", {"tenant": world.a.tenant.slug})
    query = authorize(client, stub_provider)
    client.post("/tenant/switch", {"tenant": world.b.tenant.slug})

    assert client.get(CALLBACK, query).status_code == HTTPStatus.FOUND
    assert Connection.objects.get().tenant == world.a.tenant


def test_declining_at_the_provider_connects_nothing(world, stub_app, stub_provider):
    client = world.a.client_for(world.a.operator)
    query = authorize(client, stub_provider)
    response = client.get(CALLBACK, {"state": query["state"], "error": "access_denied"})
    assert response.status_code == HTTPStatus.FOUND
    assert not Connection.objects.exists()


def test_a_refused_code_is_an_error_page_not_a_crash(world, stub_app, stub_provider):
    stub_provider.refuse_tokens = True
    client = world.a.client_for(world.a.operator)
    query = authorize(client, stub_provider)
    response = client.get(CALLBACK, query)
    assert response.status_code == HTTPStatus.BAD_GATEWAY
    assert "invalid_grant" in response.content.decode()
    assert not Connection.objects.exists()


def test_an_unreachable_provider_is_an_error_message(world, stub_app, stub_provider):
    stub_app.social_app.settings = {"server_url": "http://127.0.0.1:9"}
    stub_app.social_app.save()
    client = world.a.client_for(world.a.operator)
    response = client.post(START, follow=True)
    assert response.status_code == HTTPStatus.OK
    assert "Cannot connect Stub Drive" in response.content.decode()
    assert not Connection.objects.exists()


def test_a_provider_at_a_cloud_metadata_address_is_refused_before_any_request(
    world, stub_app, settings
):
    # Installer-configured endpoints may be private (the stub is on 127.0.0.1 with
    # PUSH_ALLOW_PRIVATE_HOSTS off), but the outbound guard still refuses metadata addresses.
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    stub_app.social_app.settings = {"server_url": "http://169.254.169.254"}
    stub_app.social_app.save()
    response = world.a.client_for(world.a.operator).post(START, follow=True)
    html = response.content.decode()
    assert "Cannot connect Stub Drive" in html
    assert "resolves only to refused addresses (169.254.169.254)" in html
    assert not Connection.objects.exists()


def test_explicit_endpoints_in_the_social_app_settings_work_too(world, stub_app, stub_provider):
    stub_app.social_app.settings = {
        "authorize_url": f"{stub_provider.base_url}/authorize",
        "access_token_url": f"{stub_provider.base_url}/token",
    }
    stub_app.social_app.save()
    client = world.a.client_for(world.a.operator)
    assert client.get(CALLBACK, authorize(client, stub_provider)).status_code == HTTPStatus.FOUND
    assert Connection.objects.get().is_connected


def test_viewer_cannot_start_or_finish_an_oauth_connect(world, stub_app, stub_provider):
    viewer = world.a.client_for(world.a.viewer)
    assert viewer.post(START).status_code == HTTPStatus.FORBIDDEN
    assert "Connect with Stub ID" not in viewer.get(reverse("connections:index")).content.decode()


def test_an_app_without_client_credentials_says_it_is_not_set_up(world, stub_app):
    stub_app.social_app.client_id = ""
    stub_app.social_app.save()
    client = world.a.client_for(world.a.operator)
    assert "Not set up yet" in client.get(reverse("connections:index")).content.decode()
    response = client.post(START)
    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == reverse("connections:index")


def test_connection_social_apps_are_not_login_options(client, stub_app):
    html = client.get("/accounts/login/").content.decode()
    assert "Stub ID" not in html
    assert client.get("/accounts/oidc/stub/login/").status_code == HTTPStatus.NOT_FOUND


@pytest.mark.parametrize("expires_in", [10**20, "soon", None, -5])
def test_odd_token_lifetimes_are_handled(world, stub_app, stub_provider, expires_in):
    stub_provider.expires_in = expires_in
    client = world.a.client_for(world.a.operator)
    assert client.get(CALLBACK, authorize(client, stub_provider)).status_code == HTTPStatus.FOUND
    connection = Connection.objects.get()
    assert connection.is_connected
    if expires_in == 10**20:
        assert connection.expires_at.year < 2100
    else:
        assert connection.expires_at is None


@pytest.mark.parametrize("odd_settings", [[], "server_url", {"server_url": 42}])
def test_malformed_social_app_settings_are_an_error_message(world, stub_app, odd_settings):
    stub_app.social_app.settings = odd_settings
    stub_app.social_app.save()
    response = world.a.client_for(world.a.operator).post(START, follow=True)
    assert response.status_code == HTTPStatus.OK
    assert "names no endpoints" in response.content.decode()
