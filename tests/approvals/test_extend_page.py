"""The item page's Extend button: who may decide an open item gives it
30 minutes, 1 hour or 4 hours more, within INTERACTION_EXTEND_MAX_SECONDS over its life,
through the same service as the REST route (audited, the channels and the caller told);
a wrong choice is an error beside the field, and nothing changes."""

from datetime import timedelta

import pytest
from django.test import Client

from runtime.kernel import extensions as ext
from runtime.kernel.task_models import AuditEvent, TaskState

pytestmark = pytest.mark.django_db

RULE = {"action": "approve", "expires": "2h"}


def page_of(held) -> str:
    return f"/inbox/{held.public_id}/"


def test_an_operator_extends_an_item_from_its_page_and_the_caller_is_told(agents, held_under):
    held = held_under(agents.a, RULE)
    deadline = held.expires_at
    operator = agents.a.client_for(agents.a.operator)
    shown = operator.get(page_of(held)).content.decode()
    assert 'id="extend-form"' in shown and 'value="4h"' in shown and "csrfmiddlewaretoken" in shown
    events_before = held.task.events.count()

    response = operator.post(page_of(held) + "extend", {"by": "1h"})
    assert response.status_code == 302 and response["Location"] == page_of(held)
    held.refresh_from_db()
    assert held.expires_at == deadline + timedelta(hours=1)
    audit = AuditEvent.objects.get(action="extended", interaction=held)
    assert (audit.actor, audit.via) == ("user:operator@acme.test", "page")
    # The caller is told: the same status update the REST route sends.
    held.task.refresh_from_db()
    assert held.task.state == TaskState.AUTH_REQUIRED
    assert held.task.events.count() == events_before + 1
    progress = held.task.status_ext[ext.INTERACTIONS]["progress"]
    assert progress["expiresAt"].startswith(held.expires_at.strftime("%Y-%m-%dT%H:%M"))
    followed = operator.get(page_of(held)).content.decode()
    assert "Extended by 1 hour" in followed


def test_extending_from_the_page_is_bounded_and_errors_sit_by_the_field(
    agents, held_under, settings
):
    settings.INTERACTION_EXTEND_MAX_SECONDS = 3600
    held = held_under(agents.a, RULE)
    deadline = held.expires_at
    operator = agents.a.client_for(agents.a.operator)
    shown = operator.get(page_of(held)).content.decode()
    assert 'value="1h"' in shown and 'value="4h"' not in shown  # beyond the bound

    refused = operator.post(page_of(held) + "extend", {"by": "4h"})
    assert refused.status_code == 400
    body = refused.content.decode()
    assert 'id="extend-err"' in body and "Choose one of the durations offered" in body
    assert operator.post(page_of(held) + "extend", {"by": "30m"}).status_code == 302
    assert operator.post(page_of(held) + "extend", {"by": "30m"}).status_code == 302
    held.refresh_from_db()
    assert held.expires_at == deadline + timedelta(hours=1)
    spent = operator.get(page_of(held)).content.decode()
    assert 'id="extend-none"' in spent and 'id="extend-form"' not in spent
    assert operator.post(page_of(held) + "extend", {"by": "30m"}).status_code == 400
    assert AuditEvent.objects.filter(action="extended").count() == 2


def test_only_who_may_decide_extends_and_only_their_tenants_items(agents, held_under):
    held = held_under(agents.a, RULE)
    deadline = held.expires_at
    viewer = agents.a.client_for(agents.a.viewer)
    assert 'id="extend-form"' not in viewer.get(page_of(held)).content.decode()
    assert viewer.post(page_of(held) + "extend", {"by": "30m"}).status_code == 403
    stranger = agents.b.client_for(agents.b.operator)
    assert stranger.post(page_of(held) + "extend", {"by": "30m"}).status_code == 404
    # A form without its CSRF token is refused.
    plain = Client(enforce_csrf_checks=True)
    plain.force_login(agents.a.operator)
    assert plain.post(page_of(held) + "extend", {"by": "30m"}).status_code == 403
    assert operator_get_method(agents, held) == 405
    held.refresh_from_db()
    assert held.expires_at == deadline and not AuditEvent.objects.filter(action="extended")


def operator_get_method(agents, held) -> int:
    return agents.a.client_for(agents.a.operator).get(page_of(held) + "extend").status_code
