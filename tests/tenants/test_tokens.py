from datetime import timedelta
from http import HTTPStatus

import pytest
from django.db import connection
from django.utils import timezone

from tenants.models import ApiToken
from tenants.tokens import TokenError, api_token_create, api_token_revoke, authenticate_bearer

pytestmark = pytest.mark.django_db


def test_valid_token_gives_tenant_and_subject(world):
    identity = authenticate_bearer(f"Bearer {world.a.token}")
    assert identity.tenant == world.a.tenant
    assert identity.subject == "partner:acme-client"
    assert (
        identity.token.last_used_at is not None
        or ApiToken.objects.get(pk=identity.token.pk).last_used_at
    )


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("Basic dXNlcjpwYXNz", "malformed"),
        ("Bearer", "malformed"),
        ("Bearer not-a-countersign-token", "malformed"),
        ("Bearer cs_AAAAAAAAAAAA_" + "x" * 43, "unknown"),
    ],
)
def test_bad_headers_fail_precisely(world, header, reason):
    with pytest.raises(TokenError) as exc:
        authenticate_bearer(header)
    assert exc.value.reason == reason


def test_right_prefix_wrong_secret_is_unknown(world):
    prefix = world.a.token.split("_")[1]
    with pytest.raises(TokenError) as exc:
        authenticate_bearer(f"Bearer cs_{prefix}_{'y' * 43}")
    assert exc.value.reason == "unknown"


def test_revoked_token_is_refused(world):
    token = ApiToken.objects.get(tenant=world.a.tenant)
    assert api_token_revoke(token=token) is True
    assert api_token_revoke(token=token) is False
    with pytest.raises(TokenError) as exc:
        authenticate_bearer(f"Bearer {world.a.token}")
    assert exc.value.reason == "revoked"


def test_expired_token_is_refused(world):
    _, plaintext = api_token_create(
        tenant=world.a.tenant,
        subject="partner:late",
        name="late",
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    with pytest.raises(TokenError) as exc:
        authenticate_bearer(f"Bearer {plaintext}")
    assert exc.value.reason == "expired"


def test_inactive_tenant_token_is_refused(world):
    world.a.tenant.active = False
    world.a.tenant.save(update_fields=["active"])
    with pytest.raises(TokenError) as exc:
        authenticate_bearer(f"Bearer {world.a.token}")
    assert exc.value.reason == "inactive"


def test_database_holds_no_plaintext_token(world):
    row = ApiToken.objects.get(tenant=world.a.tenant)
    secret = world.a.token.split("_", 2)[2]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM tenants_apitoken WHERE id = %s", [row.pk])
        stored = " ".join(str(value) for value in cursor.fetchone())
    assert world.a.token not in stored
    assert secret not in stored
    assert row.token_hash != world.a.token and len(row.token_hash) == 64


def operator_token(side, subject: str) -> str:
    _, token = api_token_create(
        tenant=side.tenant, subject=subject, name="ops bot", kind=ApiToken.Kind.OPERATOR
    )
    return token


def test_rest_whoami_with_an_operator_token(world, client):
    token = operator_token(world.a, "program:acme-ops")
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == HTTPStatus.OK
    assert response.json() == {"tenant": "acme", "subject": "program:acme-ops", "kind": "token"}


def test_rest_whoami_refuses_a_partner_token_as_the_rest_channel_does(world, client):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {world.a.token}"}
    response = client.get("/api/v1/whoami", **auth)
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert "partner token" in response.json()["detail"]
    # The same answer as the channel's other endpoints give the same token.
    listed = client.get("/api/v1/interactions", **auth)
    assert (listed.status_code, listed.json()) == (response.status_code, response.json())


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("Bearer nope", "not 'Bearer <token>'"),
        ("Token abc", "not 'Bearer <token>'"),
        ("Bearer cs_AAAAAAAAAAAA_" + "x" * 43, "not known"),
    ],
)
def test_rest_bad_token_is_401_with_reason(world, client, header, detail):
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=header)
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert detail in response.json()["detail"]


def test_rest_without_credentials_is_401(client, db):
    response = client.get("/api/v1/whoami")
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_token_of_tenant_a_acts_only_for_tenant_a(world, client):
    token = operator_token(world.b, "program:globex-ops")
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.json()["tenant"] == "globex"
    assert response.json()["subject"] == "program:globex-ops"


@pytest.mark.parametrize(
    "subject",
    ["System:expiry", "RULE:rul_1", " system:receipts ", "ｓｙｓｔｅｍ:expiry", "Anonymous:x"],
)
def test_no_path_makes_a_token_whose_subject_folds_to_a_reserved_one(world, subject):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        api_token_create(tenant=world.a.tenant, subject=subject, name="x")
    assert "subject" in refused.value.message_dict
    # A shell's objects.create, which runs no clean(), is refused the same way.
    with pytest.raises(ValidationError):
        ApiToken.objects.create(
            tenant=world.a.tenant, subject=subject, name="x", prefix="shellshell12"
        )
    assert not ApiToken.objects.filter(name="x").exists()
