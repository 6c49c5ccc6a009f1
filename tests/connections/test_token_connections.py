from http import HTTPStatus

import pytest
from django.db import connection as db_connection
from django.test import Client
from django.urls import reverse

from connections.models import Connection, ConnectionAuditEvent
from connections.selectors import connection_secret_for
from connections.services import connection_connect_token

pytestmark = pytest.mark.django_db

TOKEN = "ghp_S3cretTokenValue0123456789abcdefXYZ"
INDEX = reverse("connections:index")


def connect_url(slug="github"):
    return reverse("connections:connect_token", args=[slug])


def disconnect_url(slug="github"):
    return reverse("connections:disconnect", args=[slug])


def raw_rows() -> str:
    with db_connection.cursor() as cursor:
        cursor.execute("SELECT * FROM connections_connection")
        return repr(cursor.fetchall())


def test_connecting_by_token_stores_it_encrypted_and_never_shows_it(world, github):
    client = world.a.client_for(world.a.operator)

    response = client.post(connect_url(), {"github-token": f"  {TOKEN}\n"})

    assert response.status_code == HTTPStatus.FOUND
    connection = Connection.objects.get(tenant=world.a.tenant, app=github)
    assert connection.status == Connection.Status.CONNECTED
    assert connection.connected_by == world.a.operator
    assert connection.connected_at is not None
    # At rest: the raw row holds ciphertext only.
    assert TOKEN not in raw_rows()
    assert connection.access_token_encrypted
    # The tool servers' selector gets the plaintext back, trimmed of the paste's blanks.
    assert connection_secret_for(tenant=world.a.tenant, app_slug="github") == TOKEN
    page = client.get(INDEX).content.decode()
    assert TOKEN not in page
    assert "operator@acme.test" in page
    event = ConnectionAuditEvent.objects.get(tenant=world.a.tenant)
    assert (event.action, event.actor, event.app) == (
        "connected",
        "user:operator@acme.test",
        github,
    )


def test_secret_cannot_be_read_with_another_key(world, github, settings):
    connection_connect_token(tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator)
    settings.CONNECTIONS_ENCRYPTION_KEY = "a-different-key-altogether"
    assert connection_secret_for(tenant=world.a.tenant, app_slug="github") is None


def test_disconnecting_is_audited_and_forgets_the_secret(world, github):
    connection_connect_token(tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator)
    client = world.a.client_for(world.a.admin)

    response = client.post(disconnect_url())

    assert response.status_code == HTTPStatus.FOUND
    connection = Connection.objects.get(tenant=world.a.tenant, app=github)
    assert connection.status == Connection.Status.DISCONNECTED
    assert connection.disconnected_by == world.a.admin
    assert connection.access_token_encrypted == ""
    assert connection_secret_for(tenant=world.a.tenant, app_slug="github") is None
    actions = list(
        ConnectionAuditEvent.objects.filter(tenant=world.a.tenant)
        .order_by("created_at", "pk")
        .values_list("action", "actor")
    )
    assert actions == [
        ("connected", "user:operator@acme.test"),
        ("disconnected", "user:admin@acme.test"),
    ]
    # A second disconnect changes nothing and writes no second row.
    client.post(disconnect_url())
    assert ConnectionAuditEvent.objects.filter(action="disconnected").count() == 1


def test_connecting_and_disconnecting_are_in_the_tenants_chained_audit_log(world, github):
    from io import StringIO

    from django.core.management import call_command

    from runtime.kernel.audit_chain import links_made
    from runtime.kernel.task_models import AuditEvent

    connection_connect_token(tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator)
    world.a.client_for(world.a.admin).post(disconnect_url())
    links_made()
    rows = list(
        AuditEvent.objects.filter(tenant=world.a.tenant, action__startswith="connection.")
        .order_by("chain_seq")
        .values_list("action", "actor", "via", "detail", "chain_seq")
    )
    assert [row[:4] for row in rows] == [
        (
            "connection.connected",
            "user:operator@acme.test",
            "page",
            {"app": "github", "method": "token"},
        ),
        ("connection.disconnected", "user:admin@acme.test", "page", {"app": "github"}),
    ]
    assert all(row[4] is not None for row in rows)  # linked into the chain
    out = StringIO()
    call_command("audit", "verify", "--tenant", world.a.tenant.slug, stdout=out)
    assert "The audit chain of acme holds" in out.getvalue()
    assert not AuditEvent.objects.filter(tenant=world.b.tenant, action__startswith="connection.")


def test_viewer_sees_but_cannot_connect_or_disconnect(world, github, runtime_hook):
    connection_connect_token(tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator)
    before = raw_rows()
    client = world.a.client_for(world.a.viewer)

    page = client.get(INDEX)
    assert page.status_code == HTTPStatus.OK
    assert "operator@acme.test" in page.content.decode()
    assert connect_url() not in page.content.decode()
    assert disconnect_url() not in page.content.decode()

    assert client.post(connect_url(), {"github-token": "ghp_other"}).status_code == 403
    assert client.post(disconnect_url()).status_code == 403
    assert raw_rows() == before
    assert ConnectionAuditEvent.objects.count() == 1


def test_other_tenants_operator_sees_and_touches_nothing_of_tenant_a(world, github):
    connection_connect_token(tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator)
    client = world.b.client_for(world.b.operator)

    html = client.get(INDEX).content.decode()
    assert "operator@acme.test" not in html
    assert "Not connected" in html
    assert connection_secret_for(tenant=world.b.tenant, app_slug="github") is None

    # B's disconnect is about B's (absent) connection; A's stays.
    client.post(disconnect_url())
    assert Connection.objects.get(tenant=world.a.tenant).status == Connection.Status.CONNECTED

    # B connecting github makes B's own connection, with B's secret.
    client.post(connect_url(), {"github-token": "ghp_globex"})
    assert connection_secret_for(tenant=world.b.tenant, app_slug="github") == "ghp_globex"
    assert connection_secret_for(tenant=world.a.tenant, app_slug="github") == TOKEN
    assert (
        "operator@globex.test"
        not in world.a.client_for(world.a.operator).get(INDEX).content.decode()
    )


@pytest.mark.parametrize(
    "value, error",
    [
        ("", "Paste the token."),
        ("   ", "Paste the token."),
        ("ghp_one ghp_two", "no spaces"),
        ("ghp_" + "x" * 5000, "at most 4096"),
        ("ghp_a\x07b", "control characters"),
    ],
)
def test_bad_token_input_shows_field_errors_and_changes_nothing(world, github, value, error):
    client = world.a.client_for(world.a.operator)

    response = client.post(connect_url(), {"github-token": value})

    assert response.status_code == HTTPStatus.BAD_REQUEST
    html = response.content.decode()
    assert 'class="errorlist"' in html
    assert error in html
    assert 'aria-invalid="true"' in html
    if value.strip():
        assert value.strip() not in html  # the rejected paste is not echoed back
    assert not Connection.objects.exists()
    assert not ConnectionAuditEvent.objects.exists()


def test_missing_field_is_a_field_error(world, github):
    response = world.a.client_for(world.a.operator).post(connect_url(), {})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "Paste the token." in response.content.decode()
    assert not Connection.objects.exists()


def test_posts_need_the_csrf_token(world, github):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.a.operator)
    assert client.post(connect_url(), {"github-token": TOKEN}).status_code == 403
    connection_connect_token(tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator)
    assert client.post(disconnect_url()).status_code == 403
    assert Connection.objects.get().status == Connection.Status.CONNECTED
    assert ConnectionAuditEvent.objects.count() == 1


def test_unknown_or_wrong_kind_of_app_is_404(world, github, stub_app):
    client = world.a.client_for(world.a.operator)
    assert client.post(connect_url("nope"), {"nope-token": TOKEN}).status_code == 404
    assert client.post(disconnect_url("nope")).status_code == 404
    # A token for an OAuth2 app, or an OAuth2 start for a token app: no such endpoint.
    assert client.post(connect_url("stub-drive"), {"stub-drive-token": TOKEN}).status_code == 404
    assert client.post(reverse("connections:oauth_start", args=["github"])).status_code == 404
    assert not Connection.objects.exists()


def test_get_on_a_post_endpoint_is_refused(world, github):
    client = world.a.client_for(world.a.operator)
    assert client.get(connect_url()).status_code == HTTPStatus.METHOD_NOT_ALLOWED
    assert client.get(disconnect_url()).status_code == HTTPStatus.METHOD_NOT_ALLOWED


def test_page_labels_every_token_field(world, github):
    html = world.a.client_for(world.a.operator).get(INDEX).content.decode()
    assert '<label for="id_github-token">' in html
    assert 'id="id_github-token"' in html
    assert 'name="github-token"' in html
