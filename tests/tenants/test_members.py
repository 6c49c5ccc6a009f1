"""Members' life cycle and tenant deactivation: a real invitation (who,
which tenant, which role, a link that sets a password and expires), resend, change role,
remove (sessions end, audit history stays), in Django admin and in `manage.py members`;
deactivation by platform staff (tokens stop, agents say why); `tokens list --all`."""

import re
import time
from http import HTTPStatus
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import AuditEvent
from tenants.models import ApiToken, Membership, Tenant, User
from tenants.services import (
    MemberError,
    invitation_send,
    membership_add,
    membership_remove,
    tenant_active_set,
)
from tenants.tokens import TokenError, api_token_create, authenticate_bearer
from tests.a2a_client import assert_error, error_info, result_of, rpc
from tests.admin_pages import tenant_admin_client

pytestmark = pytest.mark.django_db
BASE = "http://testserver"


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def link_in(message) -> str:
    match = re.search(r"http://testserver(/accounts/invitation/\S+/)", message.body)
    assert match, message.body
    return match.group(1)


# --- invitations -----------------------------------------------------------------------------


def test_a_tenant_admin_invites_a_member_who_sets_a_password_and_lands_in_the_tenant(
    world, mailoutbox
):
    a = world.a
    admin = tenant_admin_client(a)
    response = admin.post(
        "/admin/tenants/membership/add/",
        {"email": "Dana@Acme.test", "role": "operator", "send_invitation": "on"},
    )
    assert response.status_code == HTTPStatus.FOUND
    membership = Membership.objects.get(user__email="dana@acme.test")
    assert membership.tenant == a.tenant and membership.invited_by == a.admin
    [message] = mailoutbox
    assert message.to == ["dana@acme.test"]
    assert message.subject == "admin@acme.test invited you to Acme Corp on Countersign"
    assert "admin@acme.test invited you to Acme Corp (acme)" in message.body
    assert "as an operator" in message.body
    assert "expires on" in message.body and "Password Reset" not in message.body
    link = link_in(message)

    dana = Client()
    page = dana.get(link)
    assert page.status_code == HTTPStatus.OK
    assert b"admin@acme.test invited you" in page.content and b"Acme Corp" in page.content
    response = dana.post(
        link, {"new_password1": "A-long-passphrase-9", "new_password2": "A-long-passphrase-9"}
    )
    assert response.status_code == HTTPStatus.FOUND
    user = User.objects.get(email="dana@acme.test")
    assert user.check_password("A-long-passphrase-9")
    assert dana.get("/inbox/").status_code == HTTPStatus.OK
    # The link worked once.
    again = Client().get(link)
    assert again.status_code == HTTPStatus.NOT_FOUND and b"does not work" in again.content


def test_an_invitation_link_expires(world, mailoutbox, settings, monkeypatch):
    settings.INVITATION_LINK_DAYS = 2
    membership, _ = membership_add(
        tenant=world.a.tenant, email="erin@acme.test", role="viewer", actor="shell:test"
    )
    invitation_send(membership=membership, by=world.a.admin, base_url=BASE)
    link = link_in(mailoutbox[0])
    sent = time.time()

    def at(seconds_later: float) -> None:
        monkeypatch.setattr(time, "time", lambda: sent + seconds_later)

    at(2 * 86400 - 60)
    assert Client().get(link).status_code == HTTPStatus.OK
    at(2 * 86400 + 60)
    response = Client().get(link)
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert b"has expired" in response.content
    response = Client().post(
        link, {"new_password1": "A-long-passphrase-9", "new_password2": "A-long-passphrase-9"}
    )
    assert response.status_code == HTTPStatus.NOT_FOUND
    monkeypatch.undo()
    assert not User.objects.get(email="erin@acme.test").has_usable_password()


def test_resending_an_invitation_replaces_the_link(world, mailoutbox):
    membership, _ = membership_add(
        tenant=world.a.tenant, email="finn@acme.test", role="viewer", actor="shell:test"
    )
    admin = tenant_admin_client(world.a)
    invitation_send(membership=membership, by=world.a.admin, base_url=BASE)
    admin.post(
        "/admin/tenants/membership/",
        {"action": "resend_invitation", "_selected_action": [membership.pk]},
    )
    first, second = (link_in(m) for m in mailoutbox)
    assert first != second
    assert Client().get(first).status_code == HTTPStatus.NOT_FOUND
    assert Client().get(second).status_code == HTTPStatus.OK


def test_someone_who_has_a_password_is_invited_to_log_in(world, mailoutbox):
    # operator@globex.test has a password: the invitation to Acme sets none.
    membership, created = membership_add(
        tenant=world.a.tenant, email=world.b.operator.email, role="viewer", actor="shell:test"
    )
    assert created
    invitation_send(membership=membership, by=None, base_url=BASE)
    [message] = mailoutbox
    assert "An administrator of Acme Corp invited you" in message.body
    assert "/accounts/invitation/" not in message.body
    assert f"{BASE}/accounts/login/" in message.body


def test_a_mail_that_cannot_be_sent_is_said_and_changes_nothing(world, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2
    membership = Membership.objects.get(user=world.a.viewer)
    with pytest.raises(MemberError, match="could not be sent"):
        invitation_send(membership=membership, by=world.a.admin, base_url=BASE)
    membership.refresh_from_db()
    assert membership.invited_at is None


def test_a_newline_in_the_tenants_name_does_not_break_the_mail(world, mailoutbox):
    Tenant.objects.filter(pk=world.a.tenant.pk).update(name="Acme\nCorp")
    membership = Membership.objects.select_related("tenant", "user").get(user=world.a.viewer)
    invitation_send(membership=membership, by=world.a.admin, base_url=BASE)
    assert mailoutbox[0].subject == "admin@acme.test invited you to Acme Corp on Countersign"


# --- roles and removal -----------------------------------------------------------------------


def test_a_tenant_admin_changes_a_members_role(world):
    admin = tenant_admin_client(world.a)
    membership = Membership.objects.get(user=world.a.viewer)
    response = admin.post(
        f"/admin/tenants/membership/{membership.pk}/change/", {"role": "operator"}
    )
    assert response.status_code == HTTPStatus.FOUND
    assert Membership.objects.get(pk=membership.pk).role == "operator"
    event = AuditEvent.objects.get(action="member.role_changed")
    assert event.actor == world.a.admin.subject
    assert event.detail == {"member": "viewer@acme.test", "role": "operator", "previous": "viewer"}


def test_removing_a_member_ends_their_sessions_and_keeps_their_audit_history(world):
    a = world.a
    operator = a.client_for(a.operator)
    assert operator.get("/inbox/").status_code == HTTPStatus.OK
    AuditEvent.objects.create(tenant=a.tenant, actor=a.operator.subject, action="approved")
    row, acting_token = api_token_create(
        tenant=a.tenant, subject=a.operator.subject, name="bot", kind=ApiToken.Kind.OPERATOR
    )
    admin = tenant_admin_client(a)
    membership = Membership.objects.get(user=a.operator)
    response = admin.post(f"/admin/tenants/membership/{membership.pk}/delete/", {"post": "yes"})
    assert response.status_code == HTTPStatus.FOUND
    assert not Membership.objects.filter(pk=membership.pk).exists()
    # Their session is over: the next request is an anonymous one.
    response = operator.get("/inbox/")
    assert response.status_code == HTTPStatus.FOUND and "/accounts/login/" in response["Location"]
    # A token acting for them is revoked, saying why.
    row.refresh_from_db()
    assert row.revoked_by == f"member-removed:{a.operator.email} by {a.admin.subject}"
    with pytest.raises(TokenError):
        authenticate_bearer(f"Bearer {acting_token}")
    # What they did stays on record, and the removal is recorded.
    assert AuditEvent.objects.filter(actor=a.operator.subject, action="approved").exists()
    removed = AuditEvent.objects.get(action="member.removed")
    assert removed.detail["member"] == a.operator.email and removed.detail["tokens_revoked"] == 1
    # The account itself is there still (they may be a member elsewhere), logged out.
    assert User.objects.filter(pk=a.operator.pk, is_active=True).exists()
    # Other members' sessions are untouched.
    assert a.client_for(a.viewer).get("/inbox/").status_code == HTTPStatus.OK


def test_a_removed_member_of_two_tenants_keeps_the_other(world):
    a, b = world.a, world.b
    Membership.objects.create(tenant=b.tenant, user=a.viewer, role="viewer")
    membership_remove(membership=Membership.objects.get(tenant=a.tenant, user=a.viewer), actor="t")
    assert list(
        Membership.objects.filter(user=a.viewer).values_list("tenant__slug", flat=True)
    ) == ["globex"]


def test_an_admin_cannot_remove_themselves(world):
    admin = tenant_admin_client(world.a)
    own = Membership.objects.get(user=world.a.admin)
    response = admin.post(f"/admin/tenants/membership/{own.pk}/delete/", {"post": "yes"})
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert Membership.objects.filter(pk=own.pk).exists()
    with pytest.raises(MemberError, match="cannot remove yourself"):
        membership_remove(membership=own, actor="t", by=world.a.admin)


def test_a_tenant_admin_cannot_remove_platform_staff_who_are_members(world):
    root = User.objects.create_superuser(email="root@countersign.test", password="x")
    membership = Membership.objects.create(tenant=world.a.tenant, user=root, role="viewer")
    admin = tenant_admin_client(world.a)
    response = admin.post(f"/admin/tenants/membership/{membership.pk}/delete/", {"post": "yes"})
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert Membership.objects.filter(pk=membership.pk).exists()


def test_the_members_command_invites_resends_changes_roles_and_removes(world, mailoutbox):
    out = run(
        "members", "invite", "gail@acme.test", "--tenant", "acme", "--role", "viewer",
        "--base-url", BASE, "--by", "admin@acme.test",
    )  # fmt: skip
    assert "Sent an invitation to gail@acme.test" in out
    assert mailoutbox[-1].subject.startswith("admin@acme.test invited you to Acme Corp")
    assert "Sent an invitation" in run(
        "members", "resend", "gail@acme.test", "--tenant", "acme", "--base-url", BASE
    )
    assert len(mailoutbox) == 2
    assert "gail@acme.test is now operator in acme." in run(
        "members", "role", "gail@acme.test", "--tenant", "acme", "--role", "operator"
    )
    listing = run("members", "list", "--tenant", "acme")
    assert re.search(r"gail@acme\.test\s+operator\s+no\s+not set\s+pending sent ", listing)
    out = run("members", "remove", "gail@acme.test", "--tenant", "acme")
    assert "Removed gail@acme.test from acme: their sessions ended" in out
    assert not Membership.objects.filter(user__email="gail@acme.test").exists()
    assert AuditEvent.objects.get(action="member.removed").actor.startswith("shell")
    with pytest.raises(CommandError, match="not a member of acme"):
        run("members", "remove", "gail@acme.test", "--tenant", "acme")
    with pytest.raises(CommandError, match="--by: no account"):
        run("members", "resend", "viewer@acme.test", "--tenant", "acme", "--by", "x@y.test")


# --- tenant deactivation ---------------------------------------------------------------------


@pytest.fixture
def root():
    client = Client()
    client.force_login(User.objects.create_superuser(email="root@countersign.test", password="x"))
    return client


# The A2A view closes its connection after a request (close_old_connections), which a test's
# transaction would not survive: as the endpoint's own tests, a transactional database.
@pytest.mark.django_db(transaction=True)
def test_platform_staff_deactivate_a_tenant_its_tokens_stop_and_its_agents_say_why(
    agents, root, client
):
    a = agents.a
    path = f"/a2a/{a.tenant.slug}/support"
    result_of(rpc(client, path, "ListTasks", {}, token=a.token))
    _, operator_token = api_token_create(
        tenant=a.tenant, subject="program:ops", name="ops", kind=ApiToken.Kind.OPERATOR
    )
    response = root.post(
        "/admin/tenants/tenant/",
        {"action": "deactivate", "_selected_action": [a.tenant.pk]},
    )
    assert response.status_code == HTTPStatus.FOUND
    tenant = Tenant.objects.get(pk=a.tenant.pk)
    assert not tenant.active and tenant.deactivated_by == "user:root@countersign.test"
    error = assert_error(
        rpc(client, path, "ListTasks", {}, token=a.token), -32000, "TENANT_INACTIVE", status=403
    )
    assert "is deactivated" in error["message"]
    assert error_info(error)["metadata"] == {"tenant": a.tenant.slug}
    # A public agent says it to anyone; another tenant's token learns nothing new.
    Agent.objects.filter(tenant=a.tenant, slug="support").update(public=True)
    assert_error(rpc(client, path, "ListTasks", {}), -32000, "TENANT_INACTIVE", status=403)
    assert_error(
        rpc(client, path, "ListTasks", {}, token=agents.b.token),
        -32000,
        "AGENT_NOT_FOUND",
        status=404,
    )
    # The REST API refuses its operator tokens; its members reach none of its pages.
    response = client.get(
        "/api/v1/interactions", headers={"Authorization": f"Bearer {operator_token}"}
    )
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert a.client_for(a.operator).get("/inbox/").status_code == HTTPStatus.FORBIDDEN
    assert AuditEvent.objects.get(action="tenant.deactivated").actor == "user:root@countersign.test"

    root.post("/admin/tenants/tenant/", {"action": "reactivate", "_selected_action": [a.tenant.pk]})
    result_of(rpc(client, path, "ListTasks", {}, token=a.token))
    assert a.client_for(a.operator).get("/inbox/").status_code == HTTPStatus.OK


def test_only_platform_staff_deactivate_tenants(world):
    admin = tenant_admin_client(world.a)
    changelist = admin.get("/admin/tenants/tenant/").content.decode()
    assert 'value="deactivate"' not in changelist
    admin.post(
        "/admin/tenants/tenant/", {"action": "deactivate", "_selected_action": [world.a.tenant.pk]}
    )
    assert Tenant.objects.get(pk=world.a.tenant.pk).active


def test_the_tenants_command_deactivates_and_reactivates(world):
    assert "Deactivated acme." in run("tenants", "deactivate", "acme")
    assert "acme was already deactivated." in run("tenants", "deactivate", "acme")
    assert re.search(
        r"acme\s+inactive\s+Acme Corp\s+\(deactivated .* by shell", run("tenants", "list")
    )
    with pytest.raises(TokenError):
        authenticate_bearer(f"Bearer {world.a.token}")
    assert "Reactivated acme." in run("tenants", "reactivate", "acme")
    assert authenticate_bearer(f"Bearer {world.a.token}").tenant.slug == "acme"
    assert not tenant_active_set(tenant=world.a.tenant, active=True, actor="t")


# --- revoked tokens --------------------------------------------------------------------------


def test_tokens_list_all_shows_revoked_tokens_with_when_and_by_whom(world):
    admin = tenant_admin_client(world.a)
    token = ApiToken.objects.get(tenant=world.a.tenant)
    admin.post("/admin/tenants/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.prefix not in run("tokens", "list")
    listing = run("tokens", "list", "--all")
    line = next(line for line in listing.splitlines() if token.prefix in line)
    assert " revoked " in line
    assert line.endswith(f"revoked {token.revoked_at:%Y-%m-%d %H:%M:%S}Z by user:admin@acme.test")
    other = ApiToken.objects.get(tenant=world.b.tenant)
    run("tokens", "revoke", other.prefix)
    line = next(
        line for line in run("tokens", "list", "--all").splitlines() if other.prefix in line
    )
    assert re.search(r"revoked \S+ \S+Z by shell", line)
