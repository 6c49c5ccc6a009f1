"""Out of office from the pages and for an admin: a member's profile
page ("My profile" in the account menu) sets "away from ... until ..." with a delegate and
"I'm back" (CSRF, errors beside their fields, audited); a tenant admin sets another member's
over REST (``/api/v1/members/<id>/away``: signed-in admins of the member's tenant only)."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from runtime.kernel.task_models import AuditEvent
from tenants.models import ApiToken, Membership
from tenants.tokens import api_token_create
from tests.approvals.test_api import bearer

pytestmark = pytest.mark.django_db

LOCAL = "%Y-%m-%dT%H:%M"


def member(side, user) -> Membership:
    return Membership.objects.get(tenant=side.tenant, user=user)


def local(delta: timedelta, side) -> str:
    return (timezone.now() + delta).astimezone(side.tenant.zone).strftime(LOCAL)


def test_a_member_sets_their_away_and_delegate_on_their_profile_and_comes_back(agents):
    operator = agents.a.client_for(agents.a.operator)
    inbox = operator.get("/inbox/").content.decode()
    assert 'href="/me/"' in inbox and "My profile" in inbox
    page = operator.get("/me/").content.decode()
    assert 'id="away-form"' in page and "csrfmiddlewaretoken" in page
    # The delegate is chosen among the tenant's members who may decide, never oneself.
    admin = member(agents.a, agents.a.admin)
    assert f'value="{admin.pk}"' in page and "admin@acme.test" in page
    assert "viewer@acme.test" not in page and "globex" not in page

    response = operator.post(
        "/me/away", {"away_until": local(timedelta(days=3), agents.a), "delegate": admin.pk}
    )
    assert response.status_code == 302 and response["Location"] == "/me/"
    me = member(agents.a, agents.a.operator)
    assert me.away_at() and me.delegate_id == admin.pk
    assert abs(me.away_until - (timezone.now() + timedelta(days=3))) < timedelta(minutes=2)
    audit = AuditEvent.objects.get(action="member.away")
    assert audit.actor == "user:operator@acme.test"
    assert audit.detail["delegate"] == "admin@acme.test"
    shown = operator.get("/me/").content.decode()
    assert "You are away" in shown and "admin@acme.test is told" in shown and 'id="back"' in shown

    assert operator.post("/me/back").status_code == 302
    me.refresh_from_db()
    assert not me.away_at() and me.delegate is None
    assert AuditEvent.objects.filter(action="member.back").count() == 1


def test_a_wrong_away_is_an_error_beside_its_field_and_changes_nothing(agents):
    operator = agents.a.client_for(agents.a.operator)
    globex_operator = member(agents.b, agents.b.operator)
    cases = [
        ({}, "away_until-err", "This field is required."),
        ({"away_until": "next week"}, "away_until-err", "Enter a valid date/time."),
        ({"away_until": local(-timedelta(days=1), agents.a)}, "away_until-err", "after now"),
        ({"away_until": local(timedelta(days=400), agents.a)}, "away_until-err", "at most"),
        # Another tenant's member is no choice here.
        (
            {"away_until": local(timedelta(days=1), agents.a), "delegate": globex_operator.pk},
            "delegate-err",
            "Select a valid choice.",
        ),
    ]
    for data, field, words in cases:
        response = operator.post("/me/away", data)
        assert response.status_code == 400, data
        body = response.content.decode()
        assert f'id="{field}"' in body and words in body, (
            data,
            body[body.find("errorlist") :][:300],
        )
    me = member(agents.a, agents.a.operator)
    assert me.away_until is None and me.delegate is None
    assert not AuditEvent.objects.filter(action="member.away").exists()
    # Without its CSRF token the form is refused.
    plain = Client(enforce_csrf_checks=True)
    plain.force_login(agents.a.operator)
    assert (
        plain.post("/me/away", {"away_until": local(timedelta(days=1), agents.a)}).status_code
        == 403
    )
    assert plain.post("/me/back").status_code == 403


# --- an admin sets another member's --------------------------------------------------------


def url(membership: Membership) -> str:
    return f"/api/v1/members/{membership.pk}/away"


def week() -> str:
    return (timezone.now() + timedelta(days=7)).isoformat()


def test_an_admin_sets_and_clears_a_members_away_over_rest(agents):
    admin = agents.a.client_for(agents.a.admin)
    operator = member(agents.a, agents.a.operator)
    response = admin.put(
        url(operator),
        {"until": week(), "delegate": "admin@acme.test"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["away"] is True and response.json()["delegate"] == "admin@acme.test"
    operator.refresh_from_db()
    assert operator.away_at() and operator.delegate.user.email == "admin@acme.test"
    audit = AuditEvent.objects.get(action="member.away")
    assert (audit.actor, audit.detail["member"]) == ("user:admin@acme.test", "operator@acme.test")
    assert admin.get(url(operator)).json()["away"] is True
    assert admin.delete(url(operator)).json()["away"] is False
    operator.refresh_from_db()
    assert operator.away_until is None
    # A bad body: 400, nothing changes.
    bad = admin.put(url(operator), {"until": "soon"}, content_type="application/json")
    assert bad.status_code == 400
    operator.refresh_from_db()
    assert operator.away_until is None


def test_only_a_signed_in_admin_of_the_members_tenant_sets_their_away(agents, client):
    operator = member(agents.a, agents.a.operator)
    body = {"until": week()}

    def put(c, target=operator):
        return c.put(url(target), body, content_type="application/json")

    # Another tenant's admin: a missing member. Not an admin, a token: refused.
    assert put(agents.b.client_for(agents.b.admin)).status_code == 404
    assert put(agents.a.client_for(agents.a.operator)).status_code == 403
    assert put(agents.a.client_for(agents.a.viewer)).status_code == 403
    _, token = api_token_create(
        tenant=agents.a.tenant, subject="program:bot", name="bot", kind=ApiToken.Kind.OPERATOR
    )
    assert (
        client.put(
            url(operator), body, content_type="application/json", **bearer(token)
        ).status_code
        == 403
    )
    assert client.put(url(operator), body, content_type="application/json").status_code in (
        401,
        403,
    )
    assert (
        agents.a.client_for(agents.a.admin)
        .get("/api/v1/members/99999999999999999999/away")
        .status_code
        == 404
    )
    operator.refresh_from_db()
    assert operator.away_until is None
    assert not AuditEvent.objects.filter(action="member.away").exists()


# --- Django admin's Members ----------------------------------------------------------------


def change_url(membership: Membership) -> str:
    return f"/admin/tenants/membership/{membership.pk}/change/"


def test_a_tenant_admin_sets_a_members_away_in_django_admin(world):
    from tests.admin_pages import form_data, read_form, tenant_admin_client

    admin = tenant_admin_client(world.a)
    operator = member(world.a, world.a.operator)
    admin_member = member(world.a, world.a.admin)
    page = admin.get(change_url(operator)).content.decode()
    # The delegate is one of the member's own tenant's people who may decide.
    options = set(read_form(page).options["away_delegate"]) - {""}
    assert options == {str(admin_member.pk)}
    data = form_data(page)
    until = (timezone.now() + timedelta(days=2)).astimezone(timezone.get_current_timezone())
    data.update(away_end=until.strftime("%Y-%m-%d %H:%M:%S"), away_delegate=admin_member.pk)
    response = admin.post(change_url(operator), data)
    assert response.status_code == 302, response.content[:3000]
    operator.refresh_from_db()
    assert operator.away_at() and operator.delegate_id == admin_member.pk
    audit = AuditEvent.objects.get(action="member.away")
    assert (audit.actor, audit.detail["member"]) == ("user:admin@acme.test", "operator@acme.test")

    # Back: until cleared (with its delegate).
    data = form_data(admin.get(change_url(operator)).content.decode())
    data.update(away_start="", away_end="", away_delegate="")
    assert admin.post(change_url(operator), data).status_code == 302
    operator.refresh_from_db()
    assert operator.away_until is None and operator.delegate is None
    assert AuditEvent.objects.filter(action="member.back").count() == 1


def test_a_wrong_away_in_django_admin_is_said_beside_its_field(world):
    from tests.admin_pages import form_data, tenant_admin_client

    admin = tenant_admin_client(world.a)
    operator = member(world.a, world.a.operator)
    globex = member(world.b, world.b.operator)
    base = form_data(admin.get(change_url(operator)).content.decode())
    past = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    soon = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    for change, field, words in [
        ({"away_end": past}, "away_end", "after now"),
        (
            {"away_end": "", "away_delegate": member(world.a, world.a.admin).pk},
            "away_end",
            "until when",
        ),
        # Another tenant's member is no choice.
        ({"away_end": soon, "away_delegate": globex.pk}, "away_delegate", "Select a valid choice"),
    ]:
        response = admin.post(change_url(operator), {**base, **change})
        assert response.status_code == 200, change
        body = response.content.decode()
        assert words in body and f"field-{field}" in body, change
    # Another tenant's admin cannot reach the member at all.
    other = tenant_admin_client(world.b).get(change_url(operator))
    assert other.status_code in (302, 404)
    operator.refresh_from_db()
    assert operator.away_until is None and not AuditEvent.objects.filter(action="member.away")
