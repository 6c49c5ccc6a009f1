"""A tenant admin's Django admin lists only pages they can use: the index names what a tenant
admin works with, section by section (never a platform-only page such as "Social
applications"), and every link on the index and on each app page answers 200, none a 403 or a
404. An "Add" link to a tenant's only one (its Slack app, its push settings) that exists
already is not shown: that form could only refuse."""

import re
from http import HTTPStatus

import pytest
from django.test import Client

from integrations.slack.models import SlackApp
from tenants.models import User
from tests.admin_pages import populate, tenant_admin_client

pytestmark = pytest.mark.django_db

TENANT_ADMIN_INDEX = {
    "People": ["Tenant settings", "Members", "Approver groups"],
    "Agents and policy": [
        "Agents",
        "Tool servers",
        "Tool annotation defaults",
        "Credentials",
        "Standing rules",
        "Ladders",
    ],
    "Channels": [
        "Channels",
        "Notification preferences",
        "Slack apps",
        "Slack users",
        "E-mail decision links",
        "Push settings",
        "Push subscriptions",
    ],
    "Tokens and connections": ["API tokens", "Connections", "OAuth apps of the tenant"],
    "Records": [
        "Audit log",
        "Tasks",
        "Interactions",
        "Effects",
        "Receipts",
        "Connection audit log",
        "Notification deliveries",
        "Push deliveries",
    ],
}
PLATFORM_ONLY = [
    "Social applications",
    "Social accounts",
    "Accounts",
    "App catalog",
    "Model prices",
    "Groups",
    "E-mail addresses",
    "Authenticators",
]


def index_sections(html: str) -> dict[str, list[str]]:
    sections = {}
    for table in re.findall(r"<table>(.*?)</table>", html, re.S):
        caption = re.search(r"<caption>.*?>([^<]+)</a>\s*</caption>", table, re.S)
        if caption:
            sections[caption.group(1).strip()] = re.findall(
                r'<th scope="row" id="[^"]*">\s*<a href="[^"]*">([^<]*)</a>', table
            )
    return sections


def admin_links(html: str) -> set[str]:
    return {
        link
        for link in re.findall(r'href="(/admin/[^"#?]*)"', html)
        if not link.startswith(("/admin/logout", "/admin/jsi18n"))
    }


@pytest.fixture
def scoped_world(world, make_agent):
    populate(world, make_agent)
    return world


def test_a_tenant_admin_sees_the_pages_they_can_use_and_each_link_answers_200(scoped_world):
    client = tenant_admin_client(scoped_world.a)
    index = client.get("/admin/")
    html = index.content.decode()
    assert index_sections(html) == TENANT_ADMIN_INDEX
    for name in PLATFORM_ONLY:
        assert f">{name}<" not in html, name

    # Every link on the index, and on each app page it leads to (the models' own app pages
    # name the same models), answers 200.
    apps = {link.split("/")[2] for link in admin_links(html) if link.count("/") >= 4}
    pages = {"/admin/": html}
    for app in sorted(apps):
        app_page = client.get(f"/admin/{app}/")
        assert app_page.status_code == HTTPStatus.OK, app
        pages[f"/admin/{app}/"] = app_page.content.decode()
        for name in PLATFORM_ONLY:
            assert f">{name}<" not in pages[f"/admin/{app}/"], (app, name)
    broken = {}
    for where, page in pages.items():
        for link in sorted(admin_links(page)):
            status = client.get(link).status_code
            if status != HTTPStatus.OK:
                broken[link] = (status, where)
    assert not broken, broken
    # The platform's own apps are not there at all.
    for app in ("socialaccount", "account", "mfa", "auth"):
        assert client.get(f"/admin/{app}/").status_code == HTTPStatus.NOT_FOUND, app


def test_no_add_link_to_a_tenants_only_one_that_exists(scoped_world):
    client = tenant_admin_client(scoped_world.a)
    html = client.get("/admin/").content.decode()
    # populate gave the tenant its Slack app and its push settings; it has no SSO of its own.
    assert "/admin/integrations/slackapp/" in html
    assert "/admin/integrations/slackapp/add/" not in html
    assert "/admin/runtime/pushsettings/add/" not in html
    # Its add page (a bookmark) leads to the one there is.
    mine = SlackApp.objects.get(tenant=scoped_world.a.tenant)
    again = client.get("/admin/integrations/slackapp/add/")
    assert again.status_code == HTTPStatus.FOUND
    assert again["Location"] == f"/admin/integrations/slackapp/{mine.pk}/change/"
    # Platform staff may still add one (for any tenant without one).
    root = User.objects.create_superuser(email="root@countersign.test", password="x")
    staff = Client()
    staff.force_login(root)
    assert "/admin/integrations/slackapp/add/" in staff.get("/admin/").content.decode()


def test_the_app_pages_use_the_plain_names_and_plurals(scoped_world):
    client = tenant_admin_client(scoped_world.a)
    notifications = client.get("/admin/notifications/").content.decode()
    assert ">Notification deliveries<" in notifications and "Deliverys" not in notifications
    tokens = client.get("/admin/tenants/").content.decode()
    assert ">API tokens<" in tokens and "Api tokens" not in tokens
    slack = client.get("/admin/integrations/").content.decode()
    assert ">Slack users<" in slack and ">E-mail decision links<" in slack
