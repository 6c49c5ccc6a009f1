"""A tenant's admin runs the tenant's members in Django admin without a shell: the add form
invites (e-mail, role, groups; the invitation sent on save), the list says what became of
each invitation, resend and revoke are actions; role, groups, access and the account are
changed on a member's page; the tenant never loses its last admin; every change is audited;
nothing reaches another tenant."""

import re
from http import HTTPStatus
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from runtime.kernel.task_models import AuditEvent
from tenants.models import ApproverGroup, Membership, User
from tenants.services import (
    InvitationStatus,
    MemberError,
    invitation_status,
    member_active_set,
    membership_remove,
    membership_role_set,
)
from tests.admin_pages import form_data, read_form, tenant_admin_client

pytestmark = pytest.mark.django_db
ADD = "/admin/tenants/membership/add/"
LIST = "/admin/tenants/membership/"


def change_url(membership) -> str:
    return f"/admin/tenants/membership/{membership.pk}/change/"


def link_in(message) -> str:
    match = re.search(r"http://testserver(/accounts/invitation/\S+/)", message.body)
    assert match, message.body
    return match.group(1)


def actions_of(world) -> list[str]:
    return list(AuditEvent.objects.filter(tenant=world.a.tenant).values_list("action", flat=True))


@pytest.fixture
def groups(world):
    mine = ApproverGroup.objects.create(tenant=world.a.tenant, slug="release", name="Release")
    theirs = ApproverGroup.objects.create(tenant=world.b.tenant, slug="oncall", name="On call")
    return mine, theirs


def test_the_add_form_asks_for_an_email_a_role_and_the_tenants_groups(world, groups):
    mine, theirs = groups
    page = tenant_admin_client(world.a).get(ADD)
    assert page.status_code == HTTPStatus.OK
    html = page.content.decode()
    # An input, not the read-only "E-mail: -" the form showed before.
    assert 'name="email"' in html and 'type="email"' in html
    assert set(read_form(html).options["role"]) == {"admin", "operator", "viewer"}
    assert f'name="groups" value="{mine.pk}"' in html
    assert f'value="{theirs.pk}"' not in html and "oncall" not in html


def test_a_tenant_admin_invites_with_role_and_groups_and_the_list_says_pending(
    world, groups, mailoutbox
):
    mine, _ = groups
    admin = tenant_admin_client(world.a)
    response = admin.post(
        ADD,
        {"email": "Hana@Acme.test", "role": "viewer", "groups": [mine.pk], "send_invitation": "on"},
    )
    assert response.status_code == HTTPStatus.FOUND, response.content[:3000]
    membership = Membership.objects.get(tenant=world.a.tenant, user__email="hana@acme.test")
    assert membership.role == "viewer"
    assert list(membership.approver_groups.all()) == [mine]
    [message] = mailoutbox
    assert message.to == ["hana@acme.test"] and "as a viewer" in message.body
    # Each step is on record, named for the admin who did it.
    events = AuditEvent.objects.filter(tenant=world.a.tenant, detail__member="hana@acme.test")
    assert {e.action for e in events} == {"member.added", "member.groups_changed", "member.invited"}
    assert {e.actor for e in events} == {world.a.admin.subject}
    listing = admin.get(LIST).content.decode()
    assert "hana@acme.test" in listing and "pending: sent" in listing
    pending = admin.get(LIST + "?invitation=pending").content.decode()
    assert "hana@acme.test" in pending and "viewer@acme.test" not in pending


def test_a_group_of_another_tenant_is_refused_next_to_the_field(world, groups, mailoutbox):
    _, theirs = groups
    response = tenant_admin_client(world.a).post(
        ADD, {"email": "ian@acme.test", "role": "viewer", "groups": [theirs.pk]}
    )
    assert response.status_code == HTTPStatus.OK
    assert re.search(r"errorlist.*valid choice", response.content.decode())
    assert not User.objects.filter(email="ian@acme.test").exists()
    assert mailoutbox == []


def test_an_empty_email_is_said_next_to_the_field(world):
    response = tenant_admin_client(world.a).post(ADD, {"email": "", "role": "viewer"})
    assert response.status_code == HTTPStatus.OK
    html = response.content.decode()
    assert re.search(r'errorlist[^>]*id="id_email_error"', html) or (
        "This field is required" in html and 'name="email"' in html
    )
    assert Membership.objects.filter(tenant=world.a.tenant).count() == 3


def test_revoke_kills_the_link_and_resend_makes_a_new_one(world, mailoutbox):
    admin = tenant_admin_client(world.a)
    admin.post(ADD, {"email": "jo@acme.test", "role": "operator", "send_invitation": "on"})
    membership = Membership.objects.get(user__email="jo@acme.test")
    link = link_in(mailoutbox[-1])
    response = admin.post(
        LIST, {"action": "revoke_invitation", "_selected_action": [membership.pk], "index": 0}
    )
    assert response.status_code == HTTPStatus.FOUND
    membership.refresh_from_db()
    assert invitation_status(membership) == InvitationStatus.REVOKED
    assert Client().get(link).status_code == HTTPStatus.NOT_FOUND
    assert "member.invitation_revoked" in actions_of(world)
    assert "revoked: sent" in admin.get(LIST).content.decode()
    # Revoking someone who has accepted changes nothing.
    viewer = Membership.objects.get(user=world.a.viewer)
    admin.post(LIST, {"action": "revoke_invitation", "_selected_action": [viewer.pk], "index": 0})
    viewer.refresh_from_db()
    assert viewer.invitation_revoked_at is None

    admin.post(
        LIST, {"action": "resend_invitation", "_selected_action": [membership.pk], "index": 0}
    )
    membership.refresh_from_db()
    assert invitation_status(membership) == InvitationStatus.PENDING
    fresh = link_in(mailoutbox[-1])
    assert Client().get(fresh).status_code == HTTPStatus.OK


def test_role_groups_and_account_are_changed_on_a_members_page_and_audited(world, groups):
    mine, _ = groups
    admin = tenant_admin_client(world.a)
    membership = Membership.objects.get(user=world.a.operator)
    operator = world.a.client_for(world.a.operator)
    assert operator.get("/inbox/").status_code == HTTPStatus.OK
    data = form_data(admin.get(change_url(membership)).content.decode())
    data.update(role="viewer", groups=[mine.pk])
    data.pop("active", None)  # unticked: deactivate the account
    response = admin.post(change_url(membership), data)
    assert response.status_code == HTTPStatus.FOUND, response.content[:3000]
    membership.refresh_from_db()
    user = User.objects.get(pk=world.a.operator.pk)
    assert membership.role == "viewer" and list(membership.approver_groups.all()) == [mine]
    assert not user.is_active
    # Deactivated: their session is over.
    assert operator.get("/inbox/").status_code == HTTPStatus.FOUND
    assert {"member.role_changed", "member.groups_changed", "member.deactivated"} <= set(
        actions_of(world)
    )
    admin.post(
        LIST, {"action": "reactivate_members", "_selected_action": [membership.pk], "index": 0}
    )
    assert User.objects.get(pk=user.pk).is_active
    assert "member.reactivated" in actions_of(world)


def test_the_last_admin_is_never_demoted_deactivated_removed_or_loses_access(world):
    a = world.a
    tenant_admin_client(a)  # a.admin runs the tenant: its only admin with admin access
    first = Membership.objects.get(user=a.admin)
    with pytest.raises(MemberError, match="last admin"):
        membership_role_set(membership=first, role="viewer", actor="t")
    with pytest.raises(MemberError, match="last admin"):
        membership_remove(membership=first, actor="t")
    with pytest.raises(MemberError, match="last admin"):
        member_active_set(membership=first, active=False, actor="t", platform=True)
    with pytest.raises(CommandError, match="last admin"):
        call_command(
            "members", "role", a.admin.email, "--tenant", "acme", "--role", "operator",
            stdout=StringIO(),
        )  # fmt: skip
    # Platform staff are held to it too, and the page says so next to the field.
    root = User.objects.create_superuser(email="root@countersign.test", password="x")
    staff = Client()
    staff.force_login(root)
    data = form_data(staff.get(change_url(first)).content.decode())
    data["role"] = "operator"
    response = staff.post(change_url(first), data)
    assert response.status_code == HTTPStatus.OK and b"last admin" in response.content
    data["role"] = "admin"
    data.pop("staff", None)
    response = staff.post(change_url(first), data)
    assert response.status_code == HTTPStatus.OK and b"last admin" in response.content
    response = staff.get(f"/admin/tenants/membership/{first.pk}/delete/", follow=True)
    assert b"last admin" in response.content
    staff.post(f"/admin/tenants/membership/{first.pk}/delete/", {"post": "yes"})
    response = staff.post(
        LIST, {"action": "deactivate_members", "_selected_action": [first.pk], "index": 0}
    )
    first.refresh_from_db()
    assert first.role == "admin" and User.objects.get(pk=a.admin.pk).is_active
    assert User.objects.get(pk=a.admin.pk).is_staff
    assert not actions_of(world)
    # With another admin who runs the tenant, the first may go.
    User.objects.filter(pk=a.viewer.pk).update(is_staff=True)
    Membership.objects.filter(user=a.viewer).update(role="admin")
    assert membership_role_set(membership=first, role="operator", actor="t")


def test_a_tenant_admin_cannot_deactivate_a_member_of_another_tenant_too(world):
    a, b = world.a, world.b
    shared = Membership.objects.create(tenant=a.tenant, user=b.operator, role="viewer")
    admin = tenant_admin_client(a)
    admin.post(LIST, {"action": "deactivate_members", "_selected_action": [shared.pk], "index": 0})
    assert User.objects.get(pk=b.operator.pk).is_active
    # Nor themselves.
    own = Membership.objects.get(user=a.admin)
    admin.post(LIST, {"action": "deactivate_members", "_selected_action": [own.pk], "index": 0})
    assert User.objects.get(pk=a.admin.pk).is_active


def test_actions_on_another_tenants_members_change_nothing(world):
    a, b = world.a, world.b
    admin = tenant_admin_client(a)
    theirs = Membership.objects.get(user=b.operator)
    before = (theirs.role, theirs.invited_at, b.operator.is_active)
    for action in (
        "resend_invitation",
        "revoke_invitation",
        "deactivate_members",
        "reactivate_members",
        "delete_selected",
    ):
        response = admin.post(
            LIST, {"action": action, "_selected_action": [theirs.pk], "index": 0, "post": "yes"}
        )
        assert response.status_code < 500
    theirs.refresh_from_db()
    assert (theirs.role, theirs.invited_at, User.objects.get(pk=b.operator.pk).is_active) == before
    for view in ("change", "delete"):
        url = f"/admin/tenants/membership/{theirs.pk}/{view}/"
        assert admin.get(url).status_code == HTTPStatus.NOT_FOUND


def test_the_members_command_revokes_deactivates_and_reactivates(world, mailoutbox):
    def run(*args) -> str:
        out = StringIO()
        call_command(*args, stdout=out, stderr=StringIO())
        return out.getvalue()

    run("members", "invite", "kim@acme.test", "--tenant", "acme", "--base-url", "http://testserver")
    assert "Revoked the invitation to kim@acme.test." in run(
        "members", "revoke", "kim@acme.test", "--tenant", "acme"
    )
    assert "no pending invitation" in run("members", "revoke", "kim@acme.test", "--tenant", "acme")
    assert "is now deactivated" in run("members", "deactivate", "kim@acme.test", "--tenant", "acme")
    assert not User.objects.get(email="kim@acme.test").is_active
    assert "is now reactivated" in run("members", "reactivate", "kim@acme.test", "--tenant", "acme")
    actions = actions_of(world)
    assert "member.invitation_revoked" in actions and "member.deactivated" in actions
