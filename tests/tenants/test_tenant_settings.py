"""A tenant's admin sets their tenant's settings in Django admin: its display name, its time
zone, who may be invited (an e-mail domain allow-list, held by every way of inviting), its
default expiry and reminders (one ladder sentence), whether an expiry may approve and how
long its audit is kept (never under the legal floor); each change audited; the slug and the tenant's life cycle stay platform staff's; another
tenant's settings are out of reach."""

from http import HTTPStatus
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from notifications.models import Ladder
from notifications.tenant_ladder import TenantLadderError, tenant_ladder_set
from runtime.kernel.task_models import AuditEvent
from tenants.models import Membership, Tenant
from tenants.services import MemberError, membership_add, tenant_settings_set
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


LADDER = "remind after 1h; escalate to admins after 4h; warn 30m before expiry; expire after 2h"


def test_a_tenant_admin_sets_the_default_ladder_as_one_sentence_audited(world):
    a = world.a
    client = tenant_admin_client(a)
    data = form_data(client.get(url(a.tenant)).content.decode())
    data["default_ladder"] = (
        "remind after 1h;  escalate to admins after 4h; warn 30m before expiry; "
        "expire after 24h, then escalate"
    )
    response = client.post(url(a.tenant), data)
    assert response.status_code == HTTPStatus.FOUND, response.content.decode()[-3000:]
    tenant = Tenant.objects.get(pk=a.tenant.pk)
    assert tenant.default_expiry == {
        "after": "24h",
        "action": "expire",
        "roles": [],
        "on_expiry": {"action": "escalate", "to": ["admin"]},
    }
    row = Ladder.objects.get(tenant=tenant, agent=None, tool="")
    assert [s["action"] for s in row.steps] == ["remind", "escalate", "warn"]
    assert not Ladder.objects.filter(tenant=world.b.tenant).exists()
    event = AuditEvent.objects.get(tenant=tenant, action="tenant.settings_changed")
    assert event.detail["changed"]["default_ladder"] == [
        "",
        "remind after 1h; escalate to admins after 4h; warn 30m before expiry; "
        "expire after 24h, then escalate",
    ]
    # Shown back as it was written; emptied, it is gone (and audited again).
    page = client.get(url(a.tenant)).content.decode()
    assert "expire after 24h, then escalate" in read_form(page).values["default_ladder"][0]
    data = form_data(page)
    data["default_ladder"] = ""
    assert client.post(url(a.tenant), data).status_code == HTTPStatus.FOUND
    tenant.refresh_from_db()
    assert tenant.default_expiry == {}
    assert not Ladder.objects.filter(tenant=tenant, agent=None, tool="").exists()
    assert AuditEvent.objects.filter(action="tenant.settings_changed").count() == 2


@pytest.mark.parametrize(
    "field, value, said",
    [
        (
            "default_ladder",
            "remind after soon",
            "Step 1 (&#x27;remind after soon&#x27;): &#x27;soon&#x27; is not a duration",
        ),
        ("default_ladder", "expire after 2h; remind after 3h", "no step can follow expire"),
        ("default_ladder", "remind after 2h; remind after 1h", "in order of time"),
        ("default_ladder", "escalate to robots after 1h", "is not a role"),
        ("default_ladder", "expire after 1h, then approve", "needs “An expiry may approve” on"),
        ("audit_retention_days", "179", "at least 180 days"),
        ("audit_retention_days", "-5", "greater than or equal to 0"),
    ],
)
def test_a_bad_ladder_or_retention_is_said_next_to_its_field(world, field, value, said):
    client = tenant_admin_client(world.a)
    data = form_data(client.get(url(world.a.tenant)).content.decode())
    data[field] = value
    response = client.post(url(world.a.tenant), data)
    html = response.content.decode()
    assert response.status_code == HTTPStatus.OK and said in html
    # Next to its field: in the field's own row of the form.
    row = html[html.index(f'class="form-row errors field-{field}') :]
    assert said in row[: row.index(f'name="{field}"') + 2000]
    tenant = Tenant.objects.get(pk=world.a.tenant.pk)
    assert (tenant.default_expiry, tenant.audit_retention_days) == ({}, None)
    assert not Ladder.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.filter(action="tenant.settings_changed").exists()


def test_expiry_may_approve_and_retention_are_set_and_audited(world):
    client = tenant_admin_client(world.a)
    data = form_data(client.get(url(world.a.tenant)).content.decode())
    data.update(
        expiry_may_approve="on",
        audit_retention_days="180",
        default_ladder="expire after 1h, then approve",
    )
    response = client.post(url(world.a.tenant), data)
    assert response.status_code == HTTPStatus.FOUND, response.content.decode()[-3000:]
    tenant = Tenant.objects.get(pk=world.a.tenant.pk)
    assert tenant.expiry_may_approve and tenant.audit_retention_days == 180
    changed = {}
    for event in AuditEvent.objects.filter(tenant=tenant, action="tenant.settings_changed"):
        changed |= event.detail["changed"]
    assert changed["expiry_may_approve"] == [False, True]
    assert changed["audit_retention_days"] == [None, 180]
    assert changed["default_ladder"] == ["", "expire after 1h, then approve"]
    assert not Tenant.objects.get(pk=world.b.tenant.pk).expiry_may_approve


def test_the_services_refuse_a_retention_under_the_floor(world):
    with pytest.raises(ValidationError, match="at least 180 days"):
        tenant_settings_set(tenant=world.a.tenant, actor="t", audit_retention_days=30)
    with pytest.raises(TenantLadderError, match="Step 1: 'remind after 5 minutes' is not a"):
        tenant_ladder_set(tenant=world.a.tenant, text="remind after 5 minutes", actor="t")
    assert Tenant.objects.get(pk=world.a.tenant.pk).audit_retention_days is None
