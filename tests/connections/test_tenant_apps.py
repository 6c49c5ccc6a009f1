"""A tenant's admin sets the tenant's own OAuth app (client id, secret, scopes, endpoints)
for a catalog app in Django admin: the secret stored encrypted and never shown again, every
change audited, a "check" that tries it at the provider and says what went wrong in words;
the connect flow then uses the tenant's client, which wins over the platform's default,
end to end against a real provider on 127.0.0.1. Another tenant's app is out of reach."""

from datetime import timedelta
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.urls import reverse
from django.utils import timezone

from connections.crypto import secret_decrypt
from connections.models import Connection, TenantApp
from connections.oauth import connection_access_token
from connections.selectors import connection_secret_for
from connections.tenant_apps import tenant_app_save
from runtime.kernel.task_models import AuditEvent
from tests.admin_pages import form_data, read_form, tenant_admin_client
from tests.connections.oauth_stub import StubProvider

pytestmark = pytest.mark.django_db

ADD = "/admin/connections/tenantapp/"
SECRET = "tenant-a-secret-that-is-never-shown"
START = reverse("connections:oauth_start", args=["stub-drive"])
CALLBACK = reverse("connections:oauth_callback")


def change(row) -> str:
    return f"{ADD}{row.pk}/change/"


def own_app(world, stub_provider, stub_app, *, side=None, **values) -> TenantApp:
    side = side or world.a
    client_id = f"{side.tenant.slug}-client"
    stub_provider.clients[client_id] = SECRET
    return tenant_app_save(
        tenant=side.tenant,
        app=stub_app,
        actor=side.admin.subject,
        secret=SECRET,
        client_id=client_id,
        scopes=values.pop("scopes", "files.read"),
        server_url=values.pop("server_url", ""),
        authorize_url="",
        token_url="",
        token_auth_method="client_secret_post",
        **values,
    )


def test_a_tenant_admin_sets_an_oauth_app_its_secret_encrypted_and_never_shown(
    world, stub_app, stub_provider
):
    client = tenant_admin_client(world.a)
    page = client.get(f"{ADD}add/").content.decode()
    assert read_form(page).options["app"] == ["", str(stub_app.pk)]  # OAuth2 apps only
    response = client.post(
        f"{ADD}add/",
        {
            "app": stub_app.pk,
            "client_id": "acme-client",
            "client_secret": SECRET,
            "scopes": "files.read",
            "server_url": "",
            "authorize_url": "",
            "token_url": "",
            "token_auth_method": "client_secret_post",
        },
    )
    assert response.status_code == HTTPStatus.FOUND, response.content.decode()[-3000:]
    row = TenantApp.objects.get()
    assert row.tenant == world.a.tenant and row.client_id == "acme-client"
    assert SECRET not in row.client_secret_encrypted
    assert secret_decrypt(row.client_secret_encrypted) == SECRET
    event = AuditEvent.objects.get(tenant=world.a.tenant, action="oauth_app.set")
    assert event.actor == world.a.admin.subject and event.detail["app"] == "stub-drive"
    assert event.detail["changed"]["client_secret"] == ["", "replaced"]
    assert SECRET not in str(event.detail)

    html = client.get(change(row)).content.decode()
    assert SECRET not in html and row.client_secret_encrypted not in html
    assert "set" in html and read_form(html).values["client_secret"] == [""]
    # Saved with the secret left empty, the secret stays; a new one replaces it (audited).
    data = form_data(html)
    data["scopes"] = "files.read files.write"
    assert client.post(change(row), data).status_code == HTTPStatus.FOUND
    row.refresh_from_db()
    assert secret_decrypt(row.client_secret_encrypted) == SECRET
    assert row.scopes == "files.read files.write"
    data["client_secret"] = "a-new-secret"
    assert client.post(change(row), data).status_code == HTTPStatus.FOUND
    row.refresh_from_db()
    assert secret_decrypt(row.client_secret_encrypted) == "a-new-secret"
    changes = AuditEvent.objects.filter(action="oauth_app.set").order_by("id")
    assert [e.detail["changed"].get("client_secret") for e in changes] == [
        ["", "replaced"],
        None,
        ["set", "replaced"],
    ]


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("client_secret", "", "Give the client secret"),
        ("client_id", "", "This field is required"),
        ("authorize_url", "http://127.0.0.1:9/authorize", "or neither"),
        ("server_url", "not a url", "Enter a valid URL"),
    ],
)
def test_a_bad_oauth_app_is_said_next_to_its_field(world, stub_app, field, value, said):
    client = tenant_admin_client(world.a)
    data = {
        "app": stub_app.pk,
        "client_id": "acme-client",
        "client_secret": SECRET,
        "token_auth_method": "client_secret_post",
        field: value,
    }
    response = client.post(f"{ADD}add/", data)
    html = response.content.decode()
    assert response.status_code == HTTPStatus.OK and said in html
    target = "token_url" if field == "authorize_url" else field
    row = html[html.index(f"field-{target}") :]
    assert said in row[: row.index(f'name="{target}"') + 1500]
    assert not TenantApp.objects.exists()
    assert not AuditEvent.objects.filter(action="oauth_app.set").exists()


def run_check(client, row) -> str:
    response = client.post(
        ADD, {"action": "check_at_provider", "_selected_action": [row.pk]}, follow=True
    )
    assert response.status_code == HTTPStatus.OK
    return response.content.decode()


def test_check_says_in_words_whether_the_provider_takes_the_client(world, stub_app, stub_provider):
    row = own_app(world, stub_provider, stub_app)
    client = tenant_admin_client(world.a)
    assert "Stub Drive: passed. The provider accepted the client id and secret." in run_check(
        client, row
    )
    row.refresh_from_db()
    assert row.checked_at is not None and row.check_problem == ""

    stub_provider.client_credentials = False
    assert "it answered that this client may not use the client-credentials grant" in (
        run_check(client, row)
    )

    stub_provider.clients[row.client_id] = "rotated-at-the-provider"
    html = run_check(client, row)
    assert "Stub Drive: failed. The provider refused the client id or secret (invalid_client)" in (
        html
    )
    row.refresh_from_db()
    assert "refused the client id or secret" in row.check_problem

    TenantApp.objects.filter(pk=row.pk).update(server_url="http://127.0.0.1:9")
    html = run_check(client, TenantApp.objects.get(pk=row.pk))
    assert "failed. The provider&#x27;s discovery document could not be read" in html

    # Every check is in the audit log (the row keeps only the last): who, the outcome, why.
    checks = AuditEvent.objects.filter(action="oauth_app.checked").order_by("pk")
    assert [(e.tenant_id, e.actor, e.detail["app"], e.detail["outcome"]) for e in checks] == [
        (world.a.tenant.pk, world.a.admin.subject, "stub-drive", outcome)
        for outcome in ("passed", "passed", "failed", "failed")
    ]
    assert "refused the client id or secret" in checks[2].detail["said"]
    assert not any(SECRET in str(e.detail) for e in checks)


def test_a_provider_that_echoes_the_secret_never_gets_it_kept_or_shown(
    world, stub_app, stub_provider
):
    row = own_app(world, stub_provider, stub_app)
    stub_provider.clients[row.client_id] = "rotated-at-the-provider"
    stub_provider.echo_secret = True
    html = run_check(tenant_admin_client(world.a), row)
    assert "failed. The provider refused the client id or secret (wrong secret [secret])" in html
    assert SECRET not in html
    row.refresh_from_db()
    assert "[secret]" in row.check_problem and SECRET not in row.check_problem
    (check,) = AuditEvent.objects.filter(action="oauth_app.checked")
    assert check.detail["outcome"] == "failed" and "[secret]" in check.detail["said"]
    assert SECRET not in str(check.detail)


def connect(client, stub_provider) -> dict:
    response = client.post(START)
    assert response.status_code == HTTPStatus.FOUND, response
    location = response["Location"]
    back = httpx.get(location, follow_redirects=False)
    assert back.status_code == HTTPStatus.FOUND
    query = {k: v[0] for k, v in parse_qs(urlsplit(back.headers["Location"]).query).items()}
    asked = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert client.get(CALLBACK, query).status_code == HTTPStatus.FOUND
    return asked


def test_the_connect_flow_uses_the_tenants_own_app_over_the_platforms(
    world, stub_app, stub_provider
):
    own_app(world, stub_provider, stub_app, scopes="files.read")
    asked = connect(world.a.client_for(world.a.operator), stub_provider)
    assert asked["client_id"] == "acme-client" and asked["scope"] == "files.read"
    assert stub_provider.token_requests[-1]["client_id"] == "acme-client"
    assert connection_secret_for(tenant=world.a.tenant, app_slug="stub-drive")
    # The other tenant has none of its own: the platform's default client.
    asked = connect(world.b.client_for(world.b.operator), stub_provider)
    assert asked["client_id"] == StubProvider.client_id
    assert stub_provider.token_requests[-1]["client_id"] == StubProvider.client_id
    assert Connection.objects.filter(status="connected").count() == 2


def test_a_tenant_brings_its_own_provider_where_the_platform_set_no_client(
    world, stub_app, stub_provider, settings
):
    # A deployment whose tenants' URLs may be private (the provider below is on loopback).
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    stub_app.social_app.client_id = stub_app.social_app.secret = ""
    stub_app.social_app.save()
    page = world.a.client_for(world.a.operator).get(reverse("connections:index"))
    assert "Not set up yet" in page.content.decode()
    with StubProvider() as theirs:
        own_app(world, theirs, stub_app, server_url=theirs.base_url)
        html = world.a.client_for(world.a.operator).get(reverse("connections:index"))
        assert "Connect with Stub Drive" in html.content.decode()
        asked = connect(world.a.client_for(world.a.operator), theirs)
        assert asked["client_id"] == "acme-client"
        assert theirs.issued_tokens and not stub_provider.issued_tokens
    # Tenant B still has no client at all: not set up, and a start says so.
    response = world.b.client_for(world.b.operator).post(START, follow=True)
    assert "is not set up yet: a tenant admin must set its OAuth app" in (response.content.decode())


def test_a_code_for_a_client_that_changed_mid_flow_is_not_redeemed(world, stub_app, stub_provider):
    client = world.a.client_for(world.a.operator)
    location = client.post(START)["Location"]
    back = httpx.get(location, follow_redirects=False)
    query = {k: v[0] for k, v in parse_qs(urlsplit(back.headers["Location"]).query).items()}
    own_app(world, stub_provider, stub_app)  # set while the person was at the provider
    response = client.get(CALLBACK, query)
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "changed while connecting" in response.content.decode()
    assert not Connection.objects.exists()


def test_the_connections_page_sends_a_tenant_admin_to_the_tenants_oauth_apps(world, stub_app):
    stub_app.social_app.client_id = ""
    stub_app.social_app.save()
    tenant_admin_client(world.a)  # staff status, as a tenant admin has
    html = world.a.client_for(world.a.admin).get(reverse("connections:index")).content.decode()
    assert f'href="{ADD}"' in html and "OAuth apps of the tenant" in html
    assert "Social applications" not in html and "socialapp" not in html
    # An operator is told who sets it up, with no link to pages they cannot open.
    html = world.a.client_for(world.a.operator).get(reverse("connections:index")).content.decode()
    assert "a tenant admin sets its OAuth app" in html and f'href="{ADD}"' not in html


def test_another_tenants_oauth_app_is_out_of_reach(world, stub_app, stub_provider):
    theirs = own_app(world, stub_provider, stub_app, side=world.b)
    client = tenant_admin_client(world.a)
    assert client.get(change(theirs)).status_code == HTTPStatus.NOT_FOUND
    assert client.post(change(theirs), {"client_id": "x"}).status_code == HTTPStatus.NOT_FOUND
    assert client.post(f"{ADD}{theirs.pk}/delete/", {"post": "yes"}).status_code == 404
    html = run_check(client, theirs)
    assert "Stub Drive: passed" not in html and "Stub Drive: failed" not in html
    assert TenantApp.objects.get(pk=theirs.pk).checked_at is None
    assert "globex" not in client.get(ADD).content.decode()
    # A row added by A's admin is A's, whatever tenant the post names.
    response = client.post(
        f"{ADD}add/",
        {
            "tenant": world.b.tenant.pk,
            "app": stub_app.pk,
            "client_id": "sneaky",
            "client_secret": "s",
            "token_auth_method": "client_secret_post",
        },
    )
    assert response.status_code == HTTPStatus.FOUND
    assert TenantApp.objects.get(client_id="sneaky").tenant == world.a.tenant
    # B's own client is still B's, and B's flow uses it.
    asked = connect(world.b.client_for(world.b.operator), stub_provider)
    assert asked["client_id"] == "globex-client"


def test_an_expired_token_is_renewed_with_the_tenants_own_client(world, stub_app, stub_provider):
    own_app(world, stub_provider, stub_app)
    connect(world.a.client_for(world.a.operator), stub_provider)
    Connection.objects.filter(tenant=world.a.tenant).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    token = connection_access_token(tenant=world.a.tenant, app=stub_app)
    assert token == stub_provider.issued_tokens[-1] and len(stub_provider.issued_tokens) == 2
    renewal = stub_provider.token_requests[-1]
    assert renewal["grant_type"] == "refresh_token" and renewal["client_id"] == "acme-client"


def test_a_tenants_own_endpoints_on_a_private_address_are_refused(world, stub_app, settings):
    # The platform's endpoints may be private (an installer chose them); a tenant admin's are
    # held to PUSH_ALLOW_PRIVATE_HOSTS, off here as in production: no request leaves.
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    with StubProvider() as internal:
        row = own_app(world, internal, stub_app, server_url=internal.base_url)
        html = run_check(tenant_admin_client(world.a), row)
        assert (
            "Stub Drive: failed. The provider&#x27;s discovery document could not be read" in html
        )
        assert "refused" in html
        response = world.a.client_for(world.a.operator).post(START, follow=True)
        assert "Cannot connect Stub Drive" in response.content.decode()
        assert internal.token_requests == [] and not internal.codes
