"""Expiry (seed 002): an open interaction past its expiry closes; an approval as a denial with
reason "expired", a question as no answer; each audited."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runtime.models import AuditEvent, DemoRecord, Effect, Interaction, Task
from runtime.services.interactions import interactions_expire
from tests.a2a_endpoint.conftest import rpc, status_text, task_of, user_message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

LATER = timedelta(days=2)  # past the default 24-hour interaction lifetime


def start(client, token, slug, text):
    message = user_message(text)
    return task_of(
        rpc(client, f"/a2a/acme/{slug}", "SendMessage", {"message": message}, token=token)
    )


def test_nothing_expires_before_its_time(agents, client):
    start(client, agents.a.token, "deployer", "deploy build b-1 to staging")
    assert interactions_expire(now=timezone.now()) == 0
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_an_expired_approval_is_a_denial_the_model_sees(agents, client):
    held = start(client, agents.a.token, "deployer", "deploy build b-1 to staging")
    assert interactions_expire(now=timezone.now() + LATER) == 1
    interaction = Interaction.objects.get()
    assert interaction.state == Interaction.State.EXPIRED
    assert interaction.answer == {"approved": False, "reason": "expired"}
    effect = Effect.objects.get()
    assert effect.state == Effect.State.DENIED
    assert effect.outcome["reason"] == "expired"
    task = Task.objects.get(public_id=held["id"])
    assert task.state == "TASK_STATE_COMPLETED"
    (result,) = [e for e in task.transcript if e["type"] == "tool_result"]
    assert (result["error"], result["reason"]) == ("tool.denied", "expired")
    assert "was not deployed" in status_text({"status": {"message": task.status_message}})
    assert not DemoRecord.objects.exists()
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor, audit.via) == ("expired", "system:expiry", "expiry")
    assert audit.interaction == interaction
    # Expiring again finds nothing.
    assert interactions_expire(now=timezone.now() + LATER) == 0


def test_an_expired_question_resumes_the_turn_without_an_answer(agents, client):
    asked = start(client, agents.a.token, "code-reviewer", "review")
    assert interactions_expire(now=timezone.now() + LATER) == 1
    interaction = Interaction.objects.get()
    assert interaction.state == Interaction.State.EXPIRED
    task = Task.objects.get(public_id=asked["id"])
    assert task.state == "TASK_STATE_COMPLETED"
    # The model saw no answer for its question.
    assert task.artifacts[0]["parts"][0]["data"]["base"] == ""
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor) == ("expired", "system:expiry")


def test_an_answered_interaction_does_not_expire(agents, client):
    from tests.a2a_endpoint.conftest import answer_message

    asked = start(client, agents.a.token, "code-reviewer", "review")
    answer = answer_message(asked, parts=[{"text": "main"}])
    rpc(client, "/a2a/acme/code-reviewer", "SendMessage", {"message": answer}, token=agents.a.token)
    assert interactions_expire(now=timezone.now() + LATER) == 0
    assert Interaction.objects.get().state == Interaction.State.ANSWERED
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["answered"]
