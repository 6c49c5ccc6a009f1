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


# Words a title must spell as they are spelt, not lower-cased from a class name.
PROPER = re.compile(r"\b(api|slack|oauth|a2a|mcp)\b|\bemail link|\bpush config")


def titles(html: str) -> list[str]:
    found = re.findall(r"<title>(.*?)</title>|<h1[^>]*>(.*?)</h1>", html, re.S)
    crumbs = re.findall(r'<div class="breadcrumbs">(.*?)</div>', html, re.S)
    return [re.sub(r"<[^>]+>|\s+", " ", "".join(t)).strip() for t in [*found, *crumbs]]


def test_every_page_title_a_tenant_admin_sees_reads_as_plain_words(world):
    """Each registered model's list and add page, as a tenant's admin opens them: the title,
    heading and breadcrumbs say "API token", "Slack user", "e-mail decision link", never the
    class name lower-cased ("Add api token", "Select slack user to change")."""
    from django.contrib import admin

    client = tenant_admin_client(world.a)
    seen: dict[str, list[str]] = {}
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        may = getattr(model_admin, "tenant_admin_may", ())
        base = f"/admin/{opts.app_label}/{opts.model_name}/"
        for path, what in ((base, "view"), (f"{base}add/", "add")):
            if what not in may:
                continue
            response = client.get(path)
            if response.status_code != HTTPStatus.OK:
                continue  # platform staff's only (a third party's app, the tenant row's add)
            found = titles(response.content.decode())
            seen[path] = found
            bad = [t for t in found if PROPER.search(t)]
            assert not bad, (path, bad)
    assert "Add API token | Countersign admin" in seen["/admin/tenants/apitoken/add/"]
    assert "Select API token to change" in seen["/admin/tenants/apitoken/"]
    assert any("Slack user to" in t for t in seen["/admin/integrations/slackuser/"])
    assert any("e-mail decision link to" in t for t in seen["/admin/integrations/emaillink/"])
    assert any("push subscription to" in t for t in seen["/admin/runtime/pushconfig/"])
    assert any("notification preference" in t for t in seen["/admin/notifications/preference/"])
    assert any("OAuth app of the tenant" in t for t in seen["/admin/connections/tenantapp/"])
