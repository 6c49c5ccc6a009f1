from http import HTTPStatus

import pytest

from tenants.models import ApiToken, Membership, User
from tenants.tokens import authenticate_bearer

pytestmark = pytest.mark.django_db


def test_creating_a_token_shows_the_plaintext_once_and_never_again(world, staff):
    response = staff.post(
        "/admin/tenants/apitoken/add/",
        {
            "tenant": world.a.tenant.pk,
            "kind": "partner",
            "subject": "partner:initech",
            "name": "initech",
            "all_agents": "on",
        },
    )
    assert response.status_code == HTTPStatus.OK
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get(subject="partner:initech")
    html = response.content.decode()
    start = html.index(f"cs_{token.prefix}_")
    plaintext = html[start : start + len(f"cs_{token.prefix}_") + 43]
    assert authenticate_bearer(f"Bearer {plaintext}").subject == "partner:initech"

    secret = plaintext.split("_", 2)[2]
    for url in (
        "/admin/tenants/apitoken/",
        f"/admin/tenants/apitoken/{token.pk}/change/",
        f"/admin/tenants/apitoken/{token.pk}/history/",
    ):
        page = staff.get(url)
        assert page.status_code == HTTPStatus.OK
        assert secret not in page.content.decode()
        assert token.token_hash not in page.content.decode()


def test_token_form_errors_change_nothing(world, staff):
    response = staff.post(
        "/admin/tenants/apitoken/add/",
        {"tenant": world.a.tenant.pk, "subject": "", "name": "x", "agent_slugs": "not an agent"},
    )
    assert response.status_code == HTTPStatus.OK
    assert b"errorlist" in response.content
    assert not ApiToken.objects.filter(name="x").exists()


def test_revoke_action(world, staff):
    token = ApiToken.objects.get(tenant=world.a.tenant)
    response = staff.post(
        "/admin/tenants/apitoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
        follow=True,
    )
    assert response.status_code == HTTPStatus.OK
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_staff_see_every_tenant(world, staff):
    page = staff.get("/admin/tenants/tenant/").content.decode()
    assert "acme" in page and "globex" in page


def test_tenant_page_has_memberships_inline(world, staff):
    page = staff.get(f"/admin/tenants/tenant/{world.a.tenant.pk}/change/").content.decode()
    assert "operator@acme.test" in page or "memberships" in page


def test_staff_can_add_a_member_by_email(staff):
    response = staff.post(
        "/admin/tenants/user/add/",
        {
            "email": "new@acme.test",
            "usable_password": "true",
            "password1": "A-long-passphrase-1",
            "password2": "A-long-passphrase-1",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == HTTPStatus.FOUND, response.content[:2000]
    assert User.objects.filter(email="new@acme.test").exists()


def test_invitation_action_sends_the_invitation_again(world, staff, mailoutbox):
    membership = Membership.objects.get(user=world.a.viewer)
    staff.post(
        "/admin/tenants/membership/",
        {"action": "resend_invitation", "_selected_action": [membership.pk]},
    )
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["viewer@acme.test"]
    assert "Acme Corp" in mailoutbox[0].subject


@pytest.mark.parametrize(
    "agent_slugs", ["a\x00b", "not a slug", "s" * 64, '["support"]', "other-tenants"]
)
def test_agent_slugs_that_are_not_slugs_are_a_form_error_not_a_500(world, staff, agent_slugs):
    response = staff.post(
        "/admin/tenants/apitoken/add/",
        {
            "tenant": world.a.tenant.pk,
            "kind": "partner",
            "subject": "partner:x",
            "name": "x",
            "agent_slugs": agent_slugs,
        },
    )
    assert response.status_code == HTTPStatus.OK
    assert b"is not one of the available choices" in response.content
    assert not ApiToken.objects.filter(subject="partner:x").exists()


# Subjects that fold to the system's (a case, a space, a fullwidth letter): each reads like
# the system's own in the audit, so no path makes a token act for one.
FOLDED_RESERVED = ["System:expiry", "RULE:rul_1", "  system:receipts", "ｓｙｓｔｅｍ:expiry"]


@pytest.mark.parametrize("subject", FOLDED_RESERVED)
def test_a_tenant_admin_cannot_mint_a_token_whose_subject_folds_to_the_systems(world, subject):
    from tests.admin_pages import tenant_admin_client

    response = tenant_admin_client(world.a).post(
        "/admin/tenants/apitoken/add/",
        {
            "tenant": world.a.tenant.pk,
            "kind": "operator",
            "subject": subject,
            "name": "looks like the system",
            "all_agents": "on",
        },
    )
    assert response.status_code == HTTPStatus.OK
    assert "reserved for the system" in response.content.decode()
    assert not ApiToken.objects.filter(name="looks like the system").exists()


def test_a_token_made_before_the_folded_check_stays_editable_and_revocable(world, staff):
    token = ApiToken(tenant=world.a.tenant, subject="System:expiry", name="old")
    token.prefix, token.token_hash = "oldoldoldold", "0" * 64
    ApiToken.objects.bulk_create([token])  # straight into the table, as rows made before
    token = ApiToken.objects.get(prefix="oldoldoldold")
    page = staff.get(f"/admin/tenants/apitoken/{token.pk}/change/")
    assert page.status_code == HTTPStatus.OK
    renamed = staff.post(
        f"/admin/tenants/apitoken/{token.pk}/change/",
        {"name": "old, to revoke", "all_agents": "on"},
    )
    assert renamed.status_code == HTTPStatus.FOUND
    token.refresh_from_db()
    assert token.name == "old, to revoke"
