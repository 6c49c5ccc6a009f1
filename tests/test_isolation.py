"""Every operator page, visited by each tenant's people, shows only their own tenant."""

from http import HTTPStatus

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

PAGES = [
    "approvals:inbox",
    "approvals:tasks",
    "approvals:audit",
    "approvals:rules",
    "connections:index",
]


@pytest.mark.parametrize("page", PAGES)
def test_pages_show_only_the_members_own_tenant(world, page):
    for side, other in ((world.a, world.b), (world.a, world.b)[::-1]):
        for user in (side.admin, side.operator, side.viewer):
            html = side.client_for(user).get(reverse(page)).content.decode()
            assert side.tenant.name in html
            assert other.tenant.name not in html


@pytest.mark.parametrize("page", PAGES)
def test_pages_need_a_login(client, page):
    response = client.get(reverse(page))
    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("page", PAGES)
def test_people_without_a_tenant_are_told_so(user_factory, page):
    from django.test import Client

    client = Client()
    client.force_login(user_factory(email="loner@example.test"))
    response = client.get(reverse(page))
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert b"not a member of any tenant" in response.content


def test_other_tenants_operator_cannot_switch_into_tenant_a(world):
    client = world.b.client_for(world.b.operator)
    assert (
        client.post("/tenant/switch", {"tenant": world.a.tenant.slug}).status_code
        == HTTPStatus.NOT_FOUND
    )
    assert world.a.tenant.name not in client.get(reverse("approvals:inbox")).content.decode()
