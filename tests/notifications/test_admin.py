"""Notifications in Django admin, and beat's schedule naming real tasks."""

import pytest
from django.conf import settings as django_settings

from config.celery import app
from connections.crypto import secret_decrypt
from notifications.models import Channel, Ladder

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(world):
    world.a.admin.is_staff = world.a.admin.is_superuser = True
    world.a.admin.save()
    return world.a.client_for(world.a.admin)


def test_admin_adds_a_slack_channel_with_its_url_encrypted(staff, world):
    response = staff.post(
        "/admin/notifications/channel/add/",
        {
            "tenant": world.a.tenant.pk,
            "name": "ops slack",
            "kind": "slack",
            "enabled": "on",
            "kinds": ["approval"],
            "url": "https://hooks.slack.example/services/T/B/secret",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    channel = Channel.objects.get()
    assert channel.kinds == ["approval"] and channel.url_hint == "https://hooks.slack.example/…"
    assert secret_decrypt(channel.url_encrypted).endswith("/secret")
    page = staff.get(f"/admin/notifications/channel/{channel.pk}/change/").content.decode()
    assert "services/T/B/secret" not in page


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"url": "http://10.0.0.1/hook"}, "the URL cannot be used"),
        ({"url": ""}, "needs a URL"),
        ({"kinds": ["everything"]}, "not one of the available choices"),
        ({"agents": "not/a slug"}, "is not an agent slug"),
    ],
)
def test_admin_refuses_a_bad_channel_with_the_reason(staff, world, change, problem):
    form = {
        "tenant": world.a.tenant.pk,
        "name": "ops",
        "kind": "webhook",
        "url": "https://hooks.example/x",
    }
    response = staff.post("/admin/notifications/channel/add/", {**form, **change})
    assert response.status_code == 200 and problem in response.content.decode()
    assert not Channel.objects.exists()


def test_admin_refuses_a_bad_ladder_with_the_reason(staff, world):
    response = staff.post(
        "/admin/notifications/ladder/add/",
        {
            "tenant": world.a.tenant.pk,
            "tool": "",
            "steps": '[{"after": "soon", "action": "remind"}]',
        },
    )
    assert response.status_code == 200 and "not a duration" in response.content.decode()
    assert not Ladder.objects.exists()
    response = staff.post(
        "/admin/notifications/ladder/add/",
        {
            "tenant": world.a.tenant.pk,
            "tool": "",
            "steps": '[{"after": "15m", "action": "remind"}]',
        },
    )
    assert response.status_code == 302
    assert Ladder.objects.get().steps == [{"after": "15m", "action": "remind", "roles": []}]
    # A second ladder of the whole tenant for the same tool: a form error on every database.
    response = staff.post(
        "/admin/notifications/ladder/add/",
        {"tenant": world.a.tenant.pk, "tool": "", "steps": '[{"after": "1h", "action": "remind"}]'},
    )
    assert response.status_code == 200
    assert "The tenant has a ladder for this tool already." in response.content.decode()
    assert Ladder.objects.count() == 1


def test_admin_refuses_a_ladder_for_another_tenants_agent(staff, agents):
    other = agents.b.tenant.agents.get(slug="deployer")
    response = staff.post(
        "/admin/notifications/ladder/add/",
        {
            "tenant": agents.a.tenant.pk,
            "agent": other.pk,
            "tool": "",
            "steps": '[{"after": "15m", "action": "remind"}]',
        },
    )
    assert response.status_code == 200 and "another tenant" in response.content.decode()
    assert not Ladder.objects.exists()


@pytest.mark.parametrize("page", ["channel", "delivery", "ladder", "preference"])
def test_admin_lists_load(staff, page):
    assert staff.get(f"/admin/notifications/{page}/").status_code == 200


def test_beat_runs_the_notification_tasks():
    app.loader.import_default_modules()
    names = {entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    for task in ("sweep_notifications", "advance_ladders", "send_digests"):
        assert f"notifications.tasks.{task}" in names
        assert f"notifications.tasks.{task}" in app.tasks
