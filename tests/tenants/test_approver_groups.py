"""Approver groups in Django admin: a tenant's named groups of its own members."""

from http import HTTPStatus

import pytest

from tenants.models import ApproverGroup, Membership

pytestmark = pytest.mark.django_db


def test_staff_make_a_group_of_the_tenants_members(world, staff):
    operator = Membership.objects.get(tenant=world.a.tenant, user=world.a.operator)
    response = staff.post(
        "/admin/tenants/approvergroup/add/",
        {
            "tenant": world.a.tenant.pk,
            "slug": "release",
            "name": "Release",
            "members": [operator.pk],
        },
    )
    assert response.status_code == HTTPStatus.FOUND
    group = ApproverGroup.objects.get()
    assert list(group.members.all()) == [operator] and str(group) == "group:release"


def test_a_group_never_holds_another_tenants_member(world, staff):
    stranger = Membership.objects.get(tenant=world.b.tenant, user=world.b.operator)
    response = staff.post(
        "/admin/tenants/approvergroup/add/",
        {"tenant": world.a.tenant.pk, "slug": "release", "members": [stranger.pk]},
    )
    assert response.status_code == HTTPStatus.OK
    assert "Members of another tenant: operator@globex.test" in response.content.decode()
    assert not ApproverGroup.objects.exists()


def test_group_slugs_are_unique_per_tenant(world, staff):
    ApproverGroup.objects.create(tenant=world.a.tenant, slug="release")
    ApproverGroup.objects.create(tenant=world.b.tenant, slug="release")
    response = staff.post(
        "/admin/tenants/approvergroup/add/", {"tenant": world.a.tenant.pk, "slug": "release"}
    )
    assert response.status_code == HTTPStatus.OK
    assert ApproverGroup.objects.count() == 2
