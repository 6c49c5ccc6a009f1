"""A tenant's admin sets their tenant's settings in Django admin: its display name, its time
zone and who may be invited (an e-mail domain allow-list, held by every way of inviting);
each change audited; the slug and the tenant's life cycle stay platform staff's; another
tenant's settings are out of reach."""

from http import HTTPStatus
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from runtime.kernel.task_models import AuditEvent
from tenants.models import Membership, Tenant
from tenants.services import MemberError, membership_add
from tests.admin_pages import form_data, read_form, tenant_admin_client

pytestmark = pytest.mark.django_db


def url(tenant) -> str:
    return f"/admin/tenants/tenant/{tenant.pk}/change/"


def test_a_tenant_admin_sets_name_time_zone_and_invitation_domains_audited(world):
    a = world.a
    client = tenant_admin_client(a)
    page = client.get(url(a.tenant)).content.decode()
    reader = read_form(page)
    assert "Europe/Berlin" in reader.options["time_zone"]
    assert "slug" not in reader.values  # shown, not editable
    data = form_data(page)
    data.update(
        name="Acme Corporation",
        time_zone="Europe/Berlin",
        invitation_domains="@ACME.test acme.example,, acme.test",
    )
    response = client.post(url(a.tenant), data)
    assert response.status_code == HTTPStatus.FOUND, response.content.decode()[-2000:]
    tenant = Tenant.objects.get(pk=a.tenant.pk)
    assert (tenant.slug, tenant.name, tenant.time_zone) == (
        "acme",
        "Acme Corporation",
        "Europe/Berlin",
    )
    assert tenant.invitation_domains == "acme.test, acme.example"
    event = AuditEvent.objects.get(tenant=tenant, action="tenant.settings_changed")
    assert event.actor == a.admin.subject
    assert event.detail["changed"]["name"] == ["Acme Corp", "Acme Corporation"]
    assert event.detail["changed"]["time_zone"] == ["", "Europe/Berlin"]


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("time_zone", "Mars/Olympus", "is not a time zone"),
        ("invitation_domains", "acme.test not_a_domain", "is not a domain name"),
        ("name", "", "required"),
    ],
)
def test_a_bad_setting_is_said_next_to_its_field_and_changes_nothing(world, field, value, said):
    client = tenant_admin_client(world.a)
    data = form_data(client.get(url(world.a.tenant)).content.decode())
    data[field] = value
    response = client.post(url(world.a.tenant), data)
    assert response.status_code == HTTPStatus.OK and said in response.content.decode()
    assert Tenant.objects.get(pk=world.a.tenant.pk).name == "Acme Corp"
    assert not AuditEvent.objects.filter(action="tenant.settings_changed").exists()


def test_only_allowed_domains_are_invited_from_admin_and_the_shell(world, mailoutbox):
    a = world.a
    Tenant.objects.filter(pk=a.tenant.pk).update(invitation_domains="acme.test")
    client = tenant_admin_client(a)
    response = client.post(
        "/admin/tenants/membership/add/",
        {"email": "eve@evil.example", "role": "viewer", "send_invitation": "on"},
    )
    assert response.status_code == HTTPStatus.OK
    assert "invites addresses at acme.test only" in response.content.decode()
    assert not Membership.objects.filter(user__email="eve@evil.example").exists()
    with pytest.raises(CommandError, match="acme.test only"):
        call_command(
            "members", "invite", "eve@evil.example", "--tenant", "acme",
            "--base-url", "http://testserver", stdout=StringIO(),
        )  # fmt: skip
    with pytest.raises(MemberError):
        membership_add(
            tenant=Tenant.objects.get(pk=a.tenant.pk), email="x@sub.acme.test", role="viewer",
            actor="t",
        )  # fmt: skip
    response = client.post(
        "/admin/tenants/membership/add/",
        {"email": "fay@acme.test", "role": "viewer", "send_invitation": "on"},
    )
    assert response.status_code == HTTPStatus.FOUND
    assert len(mailoutbox) == 1


def test_a_tenant_admin_reaches_no_other_tenants_settings(world):
    a, b = world.a, world.b
    client = tenant_admin_client(a)
    assert client.get(url(b.tenant)).status_code == HTTPStatus.NOT_FOUND
    data = form_data(client.get(url(a.tenant)).content.decode())
    data["name"] = "Hijacked"
    assert client.post(url(b.tenant), data).status_code == HTTPStatus.NOT_FOUND
    assert Tenant.objects.get(pk=b.tenant.pk).name == "Globex Corp"
    # Nor deactivates their own (platform staff's), nor adds or deletes tenants.
    assert client.get("/admin/tenants/tenant/add/").status_code == HTTPStatus.FORBIDDEN
    assert client.get(f"/admin/tenants/tenant/{a.tenant.pk}/delete/").status_code == 403
