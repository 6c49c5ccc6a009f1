from http import HTTPStatus

import pytest
from allauth.socialaccount.models import SocialApp
from django.test import Client

from connections.demo import seed_demo_apps
from connections.models import App, Connection, ConnectionAuditEvent
from connections.services import connection_connect_token

pytestmark = pytest.mark.django_db

TOKEN = "ghp_AdminMustNeverSeeThis0123456789"


def test_connection_admin_lists_who_and_when_and_never_the_secret(world, github, staff):
    connection = connection_connect_token(
        tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator
    )
    listing = staff.get("/admin/connections/connection/")
    detail = staff.get(f"/admin/connections/connection/{connection.pk}/change/")
    for response in (listing, detail):
        assert response.status_code == HTTPStatus.OK
        html = response.content.decode()
        assert "operator@acme.test" in html
        assert TOKEN not in html
        assert connection.access_token_encrypted not in html
    assert staff.get("/admin/connections/connection/add/").status_code == HTTPStatus.FORBIDDEN


def test_admin_disconnect_action_is_audited(world, github, staff):
    connection = connection_connect_token(
        tenant=world.a.tenant, app=github, token=TOKEN, by=world.a.operator
    )
    response = staff.post(
        "/admin/connections/connection/",
        {"action": "disconnect", "_selected_action": [connection.pk]},
    )
    assert response.status_code == HTTPStatus.FOUND
    connection.refresh_from_db()
    assert connection.status == Connection.Status.DISCONNECTED
    assert ConnectionAuditEvent.objects.filter(
        action="disconnected", actor="user:staff@countersign.test"
    ).exists()


def test_an_oauth2_app_needs_a_social_application(staff):
    response = staff.post(
        "/admin/connections/app/add/",
        {"slug": "drive", "name": "Drive", "method": "oauth2", "active": "on"},
    )
    assert response.status_code == HTTPStatus.OK
    assert "An OAuth2 app needs a social application." in response.content.decode()
    assert not App.objects.exists()


def test_admins_can_create_social_applications_for_oauth2_apps(staff):
    # The openid_connect provider is installed so that the SocialApp form has a choice.
    response = staff.get("/admin/socialaccount/socialapp/add/")
    assert response.status_code == HTTPStatus.OK
    assert 'value="openid_connect"' in response.content.decode()


def test_seed_demo_apps_is_idempotent(db):
    assert seed_demo_apps() == ["github", "google-drive"]
    App.objects.filter(slug="github").update(name="GitHub Enterprise")
    assert seed_demo_apps() == ["github", "google-drive"]
    assert App.objects.count() == 2
    assert SocialApp.objects.count() == 1
    # An admin's edit survives a re-seed.
    assert App.objects.get(slug="github").name == "GitHub Enterprise"
    drive = App.objects.get(slug="google-drive")
    assert drive.is_oauth2
    assert not drive.oauth2_ready  # the placeholder waits for an admin's client credentials
    assert "client id and secret" in drive.description


def test_demo_catalog_renders_for_an_operator(world):
    seed_demo_apps()
    html = world.a.client_for(world.a.operator).get("/connections/").content.decode()
    assert "GitHub" in html
    assert "Google Drive" in html
    assert "Not set up yet" in html
    # The placeholder social application is no login option.
    assert (
        "Google Drive (Countersign connection)"
        not in Client().get("/accounts/login/").content.decode()
    )
