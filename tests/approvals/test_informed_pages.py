"""The audit's filters and search, the task page's states and calls, and times as people read
them: in the tenant's time zone, relative where it helps, exact on hover, never with
microseconds."""

import re
from datetime import timedelta
from http import HTTPStatus

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from runtime.kernel.task_models import AuditEvent
from tenants.models import Tenant
from tests.core import decide, run

pytestmark = pytest.mark.django_db


def audit_rows(client, params) -> str:
    html = client.get(reverse("approvals:audit"), params).content.decode()
    return html[html.index("<tbody>") :] if "<tbody>" in html else ""


def test_the_audit_filters_by_agent_tool_decider_outcome_and_date_and_searches(agents):
    make = agents.a.extra["make"]
    staging = make.approval(build="aud-1")
    production = make.approval(build="aud-2")
    question = make.question()
    decide(staging, approved=True)
    decide(production, by=agents.a.admin.subject, approved=False, reason="not on friday")
    decide(question, value="main")
    client = agents.a.client_for(agents.a.operator)
    everything = audit_rows(client, {})
    assert "Deploy aud-1 to staging" in everything  # the What names what was decided
    assert "aud-2" in everything and "answered" in everything
    deployer = audit_rows(client, {"agent": "deployer"})
    assert "aud-1" in deployer and "answered" not in deployer
    assert "aud-1" in audit_rows(client, {"tool": "deploy/deploy_build"})
    assert "aud-1" in audit_rows(client, {"tool": "deploy"})
    assert audit_rows(client, {"tool": "github/create_pull_request"}) == ""
    by_admin = audit_rows(client, {"decider": "admin@acme"})
    assert "aud-2" in by_admin and "aud-1" not in by_admin
    denied = audit_rows(client, {"outcome": "denied"})
    assert "aud-2" in denied and "aud-1" not in denied
    # Search: a held call's argument, a reason, an id.
    assert "aud-1" in audit_rows(client, {"q": "aud-1"}) and "aud-2" not in audit_rows(
        client, {"q": "aud-1"}
    )
    assert "aud-2" in audit_rows(client, {"q": "friday"})
    assert "answered" in audit_rows(client, {"q": question.task.public_id})
    # Dates are days in the tenant's time zone, "to" included.
    today = timezone.localdate()
    assert "aud-1" in audit_rows(client, {"from": today.isoformat(), "to": today.isoformat()})
    assert audit_rows(client, {"to": (today - timedelta(days=1)).isoformat()}) == ""
    # What does not read is ignored, never an error; other tenants' rows never show.
    for params in ({"from": "yesterday", "outcome": "exploded", "tool": "a b"}, {"q": "\x00"}):
        response = client.get(reverse("approvals:audit"), params)
        assert response.status_code == HTTPStatus.OK
    agents.b.extra["make"].approval(build="aud-1")
    assert AuditEvent.objects.filter(tenant=agents.b.tenant).count() == 0


def test_the_audit_filter_pages_keep_their_filters(agents, django_assert_max_num_queries):
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(tenant=agents.a.tenant, actor=f"user:{i}@x.test", action="approved")
            for i in range(60)
        ]
        + [AuditEvent(tenant=agents.a.tenant, actor="user:z@x.test", action="denied")]
    )
    client = agents.a.client_for(agents.a.operator)
    first = client.get(reverse("approvals:audit"), {"outcome": "approved"})
    assert "user:z@x.test" not in first.content.decode()
    nxt = first.context["next_url"]
    assert "outcome=approved" in nxt and "before=" in nxt
    with django_assert_max_num_queries(8):
        client.get(reverse("approvals:audit"), {"outcome": "approved", "q": "x.test"})


def test_the_task_page_collapses_repeated_status_updates_and_summarises_calls(agents):
    approval = agents.a.extra["make"].approval(build="tp-1")
    task = approval.task
    # A turn's repeated "working" updates, five one after another.
    from runtime.kernel.task_models import TaskEvent

    last = task.events.order_by("-seq").first()
    TaskEvent.objects.bulk_create(
        [
            TaskEvent(
                task=task,
                tenant_id=task.tenant_id,
                seq=last.seq + i + 1,
                kind="status",
                state="TASK_STATE_WORKING",
                payload={},
            )
            for i in range(5)
        ]
    )
    html = (
        agents.a.client_for(agents.a.operator)
        .get(reverse("approvals:task", args=[task.public_id]))
        .content.decode()
    )
    assert 'data-repeats="5"' in html and "× 5" in html
    assert "Deploy tp-1 to staging" in html


def test_times_are_in_the_tenant_time_zone_to_the_second(agents):
    approval = agents.a.extra["make"].approval(build="tz-1")
    client = agents.a.client_for(agents.a.operator)
    urls = [
        reverse("approvals:inbox"),
        reverse("approvals:interaction", args=[approval.public_id]),
        reverse("approvals:task", args=[approval.task.public_id]),
        reverse("approvals:tasks"),
        reverse("approvals:audit"),
    ]
    decide(agents.a.extra["make"].approval(build="tz-2"), approved=True)
    microseconds = re.compile(r"T\d\d:\d\d:\d\d\.\d+")
    for url in urls:
        html = client.get(url).content.decode()
        assert not microseconds.search(html), url
    tenant = agents.a.tenant
    tenant.time_zone = "Asia/Tokyo"
    tenant.save(update_fields=["time_zone"])
    html = client.get(reverse("approvals:interaction", args=[approval.public_id])).content.decode()
    assert re.search(r'<time datetime="[^"]+\+09:00" title="[^"]+ JST">', html), html
    assert re.search(r">in (23 hours|1 day)</time>", html)  # the expiry, relative
    inbox = client.get(reverse("approvals:inbox")).content.decode()
    assert re.search(r'datetime="[^"]+\+09:00"', inbox)
    assert "expires in" in inbox


def test_a_tenant_time_zone_must_be_one(world):
    tenant = world.a.tenant
    tenant.time_zone = "Mars/Olympus"
    with pytest.raises(ValidationError, match="is not a time zone"):
        tenant.full_clean()
    assert Tenant(time_zone="").zone == timezone.get_default_timezone()
    call_command("tenants", "create", "zoned", "--time-zone", "Europe/Berlin")
    assert Tenant.objects.get(slug="zoned").zone.key == "Europe/Berlin"
    with pytest.raises(CommandError, match="time_zone"):
        call_command("tenants", "create", "nowhere", "--time-zone", "Nowhere/Land")


def test_the_demo_deployer_reports_what_was_sent_after_an_edit(agents):
    from runtime.agents.agent_models import Agent
    from tests.core import edit_approve, status_text

    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "editable": True}}
    agent.save(update_fields=["tool_policy"])
    approval = agents.a.extra["make"].approval(build="ed-1")  # asked for staging
    edit_approve(agents.a, approval, {"build": "ed-2", "environment": "production"})
    done = run(approval.task)
    assert status_text(done) == "Deployed build ed-2 to production."


def test_the_demo_deployer_names_the_call_an_operator_said_happened(agents):
    from tests.core import status_text

    effect = agents.a.extra["make"].uncertain()  # deploy build 2026.10.06-1 to staging
    client = agents.a.client_for(agents.a.operator)
    client.post(
        reverse("approvals:effect", args=[effect.public_id]),
        {"resolution": "happened", "result": '{"deploymentId": "dep-9"}'},
    )
    # The result the operator gave names no build: the call's own arguments do.
    assert status_text(run(effect.task)) == "Deployed build 2026.10.06-1 to staging."
