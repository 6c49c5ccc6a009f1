"""Django admin's index reads as a console: the models grouped by what an admin does
(People, Agents and policy, Channels, Tokens and connections, Records) with plain names,
for a tenant's admin and for platform staff alike; an app's own page is as before."""

import re
from http import HTTPStatus

import pytest
from django.test import Client

from tenants.models import User
from tests.admin_pages import tenant_admin_client

pytestmark = pytest.mark.django_db
SECTIONS = ["People", "Agents and policy", "Channels", "Tokens and connections", "Records"]


def captions(html: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<caption>(.*?)</caption>", html, re.S)
    ]


def test_a_tenant_admins_index_is_grouped_by_what_they_do_with_plain_names(world):
    page = tenant_admin_client(world.a).get("/admin/")
    assert page.status_code == HTTPStatus.OK
    html = page.content.decode()
    assert captions(html)[: len(SECTIONS)] == SECTIONS
    assert "Tenant settings" in html and "Audit log" in html and "API tokens" in html
    assert "Notification deliveries" in html
    assert "Deliverys" not in html and "deliverys" not in html
    # Every link still leads to its model's page.
    assert 'href="/admin/tenants/membership/"' in html
    assert 'href="/admin/notifications/delivery/"' in html


def test_platform_staff_see_the_same_sections_and_app_pages_as_before(world):
    root = User.objects.create_superuser(email="root@countersign.test", password="x")
    client = Client()
    client.force_login(root)
    html = client.get("/admin/").content.decode()
    found = captions(html)
    assert found[: len(SECTIONS)] == SECTIONS
    assert ">Accounts<" in html and "App catalog" in html
    app_page = client.get("/admin/notifications/").content.decode()
    assert "Channels" in app_page and "Notification deliveries" in app_page
    assert "Deliverys" not in app_page
