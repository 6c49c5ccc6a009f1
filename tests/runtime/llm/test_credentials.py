"""Credentials for model providers: set in admin, shown once, encrypted at
rest, looked up tenant first, then the environment, never leaked in a message."""

from http import HTTPStatus

import pytest
from django.db import connection
from django.test import override_settings

from runtime.agents.agent_models import Credential
from runtime.kernel.task_models import AuditEvent
from runtime.llm.credentials import CredentialMissing, credential_set, credential_value

pytestmark = pytest.mark.django_db

SECRET = "sk-test-0123456789abcdefghijklmnopqrstuvwxyz-WXYZ"
OTHER_SECRET = "sk-other-9876543210zyxwvutsrqponmlkjihgfedcba-LMNO"


@pytest.fixture(autouse=True)
def _no_key_in_the_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY_FILE", raising=False)


def raw_column(pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret_encrypted FROM runtime_credential WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_the_secret_is_encrypted_at_rest(world):
    credential, outcome = credential_set(
        tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET, by=world.a.admin
    )
    assert outcome == "created"
    stored = raw_column(credential.pk)
    assert stored and SECRET not in stored and SECRET[-12:] not in stored
    assert credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY") == SECRET


def test_admin_adds_a_credential_and_never_shows_it_again(world, staff):
    add = staff.get("/admin/runtime/credential/add/")
    assert add.status_code == HTTPStatus.OK
    assert b'type="password"' in add.content
    response = staff.post(
        "/admin/runtime/credential/add/",
        {"tenant": world.a.tenant.pk, "name": "OPENAI_API_KEY", "secret": SECRET},
    )
    assert response.status_code == HTTPStatus.FOUND, response.content[:2000]
    # Django's error reports would mask the field, should the request ever fail.
    assert response.wsgi_request.sensitive_post_parameters == ("secret",)
    credential = Credential.objects.get(tenant=world.a.tenant, name="OPENAI_API_KEY")
    assert credential.created_by.email == "staff@countersign.test"

    for url in (
        f"/admin/runtime/credential/{credential.pk}/change/",
        "/admin/runtime/credential/",
        f"/admin/runtime/credential/{credential.pk}/history/",
    ):
        page = staff.get(url)
        assert page.status_code == HTTPStatus.OK, url
        assert SECRET.encode() not in page.content, url
        assert credential.secret_encrypted.encode() not in page.content, url
    change = staff.get(f"/admin/runtime/credential/{credential.pk}/change/")
    assert "set, ending …WXYZ".encode() in change.content
    assert b'type="password"' in change.content
    audit = AuditEvent.objects.get(tenant=world.a.tenant, action="credential_created")
    assert audit.detail == {"credential": "OPENAI_API_KEY"}
    assert audit.actor == "user:staff@countersign.test"


def test_a_blank_secret_on_change_keeps_it_and_a_new_one_replaces_it(world, staff):
    credential, _ = credential_set(tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET)
    url = f"/admin/runtime/credential/{credential.pk}/change/"
    assert staff.post(url, {"secret": ""}).status_code == HTTPStatus.FOUND
    assert credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY") == SECRET
    assert not AuditEvent.objects.filter(action="credential_replaced").exists()

    assert staff.post(url, {"secret": OTHER_SECRET}).status_code == HTTPStatus.FOUND
    assert credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY") == OTHER_SECRET
    assert Credential.objects.filter(tenant=world.a.tenant).count() == 1
    assert AuditEvent.objects.filter(action="credential_replaced").count() == 1
    assert OTHER_SECRET.encode() not in staff.get(url).content


def test_adding_without_a_secret_or_with_a_bad_name_is_a_form_error(world, staff):
    no_secret = staff.post(
        "/admin/runtime/credential/add/",
        {"tenant": world.a.tenant.pk, "name": "OPENAI_API_KEY", "secret": ""},
    )
    assert no_secret.status_code == HTTPStatus.OK and b"errorlist" in no_secret.content
    bad_name = staff.post(
        "/admin/runtime/credential/add/",
        {"tenant": world.a.tenant.pk, "name": "openai key", "secret": SECRET},
    )
    assert bad_name.status_code == HTTPStatus.OK and b"errorlist" in bad_name.content
    # A form that comes back with an error does not echo the typed secret either.
    assert SECRET.encode() not in bad_name.content
    assert not Credential.objects.exists()


def test_adding_a_second_credential_of_the_same_name_is_a_form_error(world, staff):
    credential_set(tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET)
    response = staff.post(
        "/admin/runtime/credential/add/",
        {"tenant": world.a.tenant.pk, "name": "OPENAI_API_KEY", "secret": OTHER_SECRET},
    )
    assert response.status_code == HTTPStatus.OK and b"errorlist" in response.content
    assert credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY") == SECRET


def test_deleting_a_credential_in_admin_is_audited(world, staff):
    credential, _ = credential_set(tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET)
    response = staff.post(
        "/admin/runtime/credential/",
        {"action": "delete_audited", "_selected_action": [credential.pk]},
    )
    assert response.status_code == HTTPStatus.FOUND
    assert not Credential.objects.exists()
    assert AuditEvent.objects.filter(tenant=world.a.tenant, action="credential_deleted").exists()


def test_a_short_secret_shows_no_ending(world, staff):
    credential, _ = credential_set(tenant=world.a.tenant, name="SHORT_KEY", secret="abcd1234")
    page = staff.get(f"/admin/runtime/credential/{credential.pk}/change/")
    assert b"1234" not in page.content and b"set (last changed" in page.content


def test_the_tenant_credential_comes_before_the_environment(world, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OTHER_SECRET)
    credential_set(tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET)
    assert credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY") == SECRET
    # Tenant B has none of its own: the single-tenant environment's key.
    assert credential_value(tenant=world.b.tenant, name="OPENAI_API_KEY") == OTHER_SECRET


def test_the_environment_may_give_it_as_a_file(world, monkeypatch, tmp_path):
    path = tmp_path / "key"
    path.write_text(SECRET + "\n")
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(path))
    assert credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY") == SECRET


def test_a_missing_credential_is_named_and_its_value_never_is(world, monkeypatch):
    with pytest.raises(CredentialMissing) as missing:
        credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY")
    assert "OPENAI_API_KEY" in str(missing.value)
    # Another tenant's credential of that name is not this tenant's.
    credential_set(tenant=world.b.tenant, name="OPENAI_API_KEY", secret=SECRET)
    with pytest.raises(CredentialMissing) as isolated:
        credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY")
    assert "OPENAI_API_KEY" in str(isolated.value) and SECRET not in str(isolated.value)
    assert credential_value(tenant=world.b.tenant, name="OPENAI_API_KEY") == SECRET


def test_only_the_listed_names_come_from_the_environment(world, monkeypatch, settings):
    # An agent's file names its credential; the server's own secrets are never among them.
    monkeypatch.setenv("SECRET_KEY", "the-server-secret-key-value")
    with pytest.raises(CredentialMissing) as refused:
        credential_value(tenant=world.a.tenant, name="SECRET_KEY")
    assert "the-server-secret-key-value" not in str(refused.value)
    settings.CREDENTIAL_ENV_NAMES = []
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with pytest.raises(CredentialMissing):
        credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY")


def test_a_credential_the_key_cannot_read_is_missing_without_falling_back(world, monkeypatch):
    credential_set(tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", OTHER_SECRET)
    with override_settings(CONNECTIONS_ENCRYPTION_KEY="another-key-than-the-one-it-was-set-with"):
        with pytest.raises(CredentialMissing, match="OPENAI_API_KEY.*set it again") as unreadable:
            credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY")
    assert OTHER_SECRET not in str(unreadable.value)


def test_the_lookup_is_one_query(world, django_assert_num_queries):
    credential_set(tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET)
    with django_assert_num_queries(1):
        credential_value(tenant=world.a.tenant, name="OPENAI_API_KEY")


def test_the_tenant_audit_page_shows_a_credential_change_to_that_tenant_only(world):
    credential_set(tenant=world.a.tenant, name="OPENAI_API_KEY", secret=SECRET, by=world.a.admin)
    mine = world.a.client_for(world.a.operator).get("/audit/")
    assert mine.status_code == HTTPStatus.OK
    assert b"credential_created" in mine.content and SECRET.encode() not in mine.content
    theirs = world.b.client_for(world.b.operator).get("/audit/")
    assert theirs.status_code == HTTPStatus.OK and b"credential_created" not in theirs.content


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "OPENAI\x00KEY", "secret": SECRET},
        {"name": "OPENAI_API_KEY", "secret": "sk-\x00-nul"},
        {"name": "OPENAI_API_KEY", "secret": "x" * 9000},
        {"name": "K" * 101, "secret": SECRET},
        {"name": "OPENAI_API_KEY", "secret": SECRET, "tenant": "not-a-tenant"},
    ],
)
def test_hostile_input_is_a_form_error_and_stores_nothing(world, staff, fields):
    response = staff.post("/admin/runtime/credential/add/", {"tenant": world.a.tenant.pk, **fields})
    assert response.status_code == HTTPStatus.OK and b"errorlist" in response.content
    assert not Credential.objects.exists()
