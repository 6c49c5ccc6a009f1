"""Expiry: an open interaction past its expiry closes; an approval as a denial with
reason "expired", a question as no answer; each audited."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel.task_models import AuditEvent
from tests.core import reply, run, start, status_text, tool_results

pytestmark = pytest.mark.django_db

LATER = timedelta(days=2)  # past the default 24-hour interaction lifetime


def test_nothing_expires_before_its_time(agents):
    start(agents.a, "deployer", "deploy build b-1 to staging")
    assert interactions_expire(now=timezone.now()) == 0
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_an_expired_approval_is_a_denial_the_model_sees(agents):
    task = start(agents.a, "deployer", "deploy build b-1 to staging")
    assert interactions_expire(now=timezone.now() + LATER) == 1
    run(task)
    interaction = Interaction.objects.get()
    assert interaction.state == Interaction.State.EXPIRED
    assert interaction.answer == {"approved": False, "reason": "expired"}
    effect = Effect.objects.get()
    assert effect.state == Effect.State.DENIED
    assert effect.outcome["reason"] == "expired"
    assert task.state == "TASK_STATE_COMPLETED"
    (result,) = tool_results(task)
    assert (result["error"], result["reason"]) == ("tool.denied", "expired")
    assert "was not deployed" in status_text(task)
    assert not DemoRecord.objects.exists()
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor, audit.via) == ("expired", "system:expiry", "expiry")
    assert audit.interaction == interaction
    # Expiring again finds nothing.
    assert interactions_expire(now=timezone.now() + LATER) == 0


def test_an_expired_question_resumes_the_turn_without_an_answer(agents):
    task = start(agents.a, "code-reviewer", "review")
    assert interactions_expire(now=timezone.now() + LATER) == 1
    interaction = Interaction.objects.get()
    assert interaction.state == Interaction.State.EXPIRED
    run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    # The model saw no answer for its question.
    assert task.artifacts[0]["parts"][0]["data"]["base"] == ""
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor) == ("expired", "system:expiry")


def test_an_answered_interaction_does_not_expire(agents):
    reply(start(agents.a, "code-reviewer", "review"), "main")
    assert interactions_expire(now=timezone.now() + LATER) == 0
    assert Interaction.objects.get().state == Interaction.State.ANSWERED
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["answered"]
