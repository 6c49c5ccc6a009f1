"""The turn loop without the wire: a task taken by message_send, its turn run by turn_run, and
what the rows say afterwards (task state, events, effects, interactions, the lease)."""

import time

import pytest
from django.db import connection

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.task_models import AuditEvent, Task, TaskState
from runtime.turn.claim import turn_claim
from tests.core import (
    decide,
    open_interaction,
    reply,
    run,
    send,
    start,
    states,
    status_text,
    tool_results,
)

pytestmark = pytest.mark.django_db

BUILD = "2026.10.06-1"
DEPLOY = f"deploy build {BUILD} to staging"


def assert_lease_free(task: Task) -> None:
    task.refresh_from_db()
    assert (task.lease_owner, task.lease_expires_at) == ("", None)


def test_a_turn_runs_from_submitted_to_completed(agents, make_agent):
    make_agent("greeter", [{"reply": "Hello, {{ text }}."}])
    task = send(agents.a, "greeter", "world")
    assert task.state == TaskState.SUBMITTED
    assert task.runs == []

    run(task, worker_id="w1")

    assert task.state == TaskState.COMPLETED
    assert status_text(task) == "Hello, world."
    assert states(task) == [TaskState.SUBMITTED, TaskState.WORKING, TaskState.COMPLETED]
    assert [r["worker"] for r in task.runs] == ["w1"]
    assert task.runs[0]["resumedFrom"] is None
    assert not Effect.objects.exists() and not Interaction.objects.exists()
    assert_lease_free(task)
    # A finished turn is not run again.
    run(task, worker_id="w2")
    assert len(task.runs) == 1
    assert states(task)[-1] == TaskState.COMPLETED


def test_a_question_pauses_and_its_answer_resumes_the_same_task(agents):
    task = start(agents.a, "code-reviewer", "Review this diff of payments-api")
    assert task.state == TaskState.INPUT_REQUIRED
    asked = open_interaction(task)
    assert asked.kind == Interaction.Kind.QUESTION
    # Copied from its task, for the inbox's counts per agent (runtime.decisions.inbox).
    assert asked.agent_id == task.agent_id
    assert status_text(task) == asked.prompt
    assert_lease_free(task)

    decide(asked, value="main")
    task.refresh_from_db()
    asked.refresh_from_db()
    assert task.state == TaskState.WORKING
    assert (asked.state, asked.answer, asked.answered_via) == (
        Interaction.State.ANSWERED,
        {"value": "main"},
        "page",
    )

    run(task)
    assert task.state == TaskState.COMPLETED
    assert status_text(task) == "Reviewed the diff against main: no findings."
    assert task.artifacts[0]["parts"][0]["data"]["base"] == "main"
    assert Task.objects.count() == 1
    assert states(task) == [
        TaskState.SUBMITTED,
        TaskState.WORKING,
        TaskState.INPUT_REQUIRED,
        TaskState.WORKING,
        TaskState.COMPLETED,
    ]
    first, second = task.runs
    assert (second["resumedFrom"], second["interactionId"]) == (first["runId"], asked.public_id)
    assert_lease_free(task)


def test_an_in_band_answer_resumes_the_task_like_a_decision(agents):
    task = start(agents.a, "code-reviewer", "Review this diff")
    result = reply(task, "release/2.1")
    assert (result.task.pk, result.replayed) == (task.pk, False)
    assert run(task).state == TaskState.COMPLETED
    assert status_text(task) == "Reviewed the diff against release/2.1: no findings."
    answered = Interaction.objects.get()
    assert (answered.answered_by, answered.answered_via) == (agents.a.subject, "inband")


def test_a_held_call_is_sent_once_after_its_approval(agents):
    task = start(agents.a, "deployer", DEPLOY)
    assert task.state == TaskState.AUTH_REQUIRED
    held = open_interaction(task)
    effect = Effect.objects.get(task=task)
    assert (held.kind, effect.state, effect.public_id) == (
        Interaction.Kind.APPROVAL,
        Effect.State.HELD,
        held.public_id,
    )
    assert not DemoRecord.objects.exists()
    assert_lease_free(task)
    # Running the paused turn again sends nothing.
    run(task)
    assert task.state == TaskState.AUTH_REQUIRED
    assert not DemoRecord.objects.exists()

    decide(held, approved=True)
    run(task)

    assert task.state == TaskState.COMPLETED
    assert status_text(task) == f"Deployed build {BUILD} to staging."
    record = DemoRecord.objects.get()
    assert record.data == {"build": BUILD, "environment": "staging"}
    effect.refresh_from_db()
    assert (effect.state, effect.approved_by) == (Effect.State.SUCCEEDED, "user:operator@acme.test")
    assert record.effect_id == effect.public_id
    assert tool_results(task)[0]["ok"] is True
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.via) == ("approved", "page")
    run(task)
    assert DemoRecord.objects.count() == 1
    assert_lease_free(task)


def test_a_denial_reaches_the_transcript_as_tool_denied(agents):
    task = start(agents.a, "deployer", DEPLOY)
    decide(open_interaction(task), approved=False, reason="not today")
    run(task)
    assert task.state == TaskState.COMPLETED
    assert tool_results(task) == [
        {
            "type": "tool_result",
            "step": tool_results(task)[0]["step"],
            "ok": False,
            "error": "tool.denied",
            "reason": "not today",
        }
    ]
    assert f"Build {BUILD} was not deployed to staging: not today" in status_text(task)
    effect = Effect.objects.get()
    assert (effect.state, effect.outcome["error"]) == (Effect.State.DENIED, "tool.denied")
    assert not DemoRecord.objects.exists()
    assert AuditEvent.objects.get().action == "denied"


def test_a_turn_leased_to_a_live_worker_is_not_run_by_another(agents, make_agent):
    make_agent("greeter", [{"reply": "Hello."}])
    task = send(agents.a, "greeter")
    claimed = turn_claim(task_pk=task.pk, worker_id="w1")
    assert claimed.lease_owner == "w1" and claimed.lease_expires_at is not None
    run(task, worker_id="w2")
    assert task.state == TaskState.WORKING
    assert task.lease_owner == "w1"
    # Its own worker may pick it up again (a redelivered message).
    run(task, worker_id="w1")
    assert task.state == TaskState.COMPLETED
    assert_lease_free(task)


def test_a_second_turn_of_a_context_waits_until_the_first_ends(agents):
    first = start(agents.a, "code-reviewer", "Review this diff")
    assert first.state == TaskState.INPUT_REQUIRED
    second = send(agents.a, "code-reviewer", "and this one", contextId=first.wire_context_id)
    assert (second.context_id, second.turn) == (first.context_id, first.turn + 1)

    # A paused turn is not an ended one: the next turn stays queued.
    run(second)
    assert second.state == TaskState.SUBMITTED
    assert second.runs == []
    assert not Interaction.objects.filter(task=second).exists()

    reply(first, "main")
    run(first)
    assert first.state == TaskState.COMPLETED

    run(second)
    assert second.state == TaskState.INPUT_REQUIRED
    assert len(second.runs) == 1


def test_a_queued_turn_starts_after_the_first_is_canceled(agents):
    from runtime.turn.cancel import task_cancel

    first = start(agents.a, "code-reviewer", "Review this diff")
    second = send(agents.a, "code-reviewer", "next", contextId=first.wire_context_id)
    task_cancel(
        tenant=agents.a.tenant, agent=first.agent, subject=first.subject, task_id=first.public_id
    )
    assert Interaction.objects.get(task=first).state == Interaction.State.CANCELED
    run(second)
    assert second.state == TaskState.INPUT_REQUIRED


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks between two connections")
@pytest.mark.django_db(transaction=True)
def test_a_message_queued_as_the_turn_before_it_ends_starts_when_that_turn_commits(agents, eager):
    """The turn before ends in a transaction that has already looked for the context's next
    turn (none yet) when the new message commits behind it, still seeing it open: the new
    turn is not left to the sweep (30 s), it starts as soon as the turn before commits."""
    import threading

    from django.db import close_old_connections, transaction

    from runtime.kernel.shapes import agent_message
    from runtime.kernel.task_state import task_end

    first = start(agents.a, "code-reviewer", "Review this diff")
    assert first.state == TaskState.INPUT_REQUIRED
    looked, failures = threading.Event(), []

    def end_first():
        try:
            with transaction.atomic():
                task = Task.objects.select_for_update().get(pk=first.pk)
                # Ends it, and looks for the context's next queued turn: there is none yet.
                task_end(task, TaskState.COMPLETED, agent_message(task, "Done."))
                looked.set()
                time.sleep(1)  # the message below is sent meanwhile, and waits for this
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)
        finally:
            looked.set()
            close_old_connections()

    ender = threading.Thread(target=end_first)
    ender.start()
    assert looked.wait(10)
    # The first turn is still open for everyone else: this message is queued behind it.
    second = send(agents.a, "code-reviewer", "and this one", contextId=first.wire_context_id)
    ender.join(10)

    assert not failures, failures
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == TaskState.COMPLETED
    # Started by its own claim, which waited for the first turn's end to commit.
    assert second.state == TaskState.INPUT_REQUIRED, second.state
    assert len(second.runs) == 1


def test_a_turn_that_crashes_logs_it_with_its_task_and_tenant(
    agents, make_agent, monkeypatch, caplog
):
    import logging

    from runtime.turn.runner import turn_run

    make_agent("crasher", [{"reply": "never used"}])
    task = send(agents.a, "crasher", "go")

    class Broken:
        in_process = True

        def next_action(self, view):
            raise RuntimeError("a bug in a provider")

    monkeypatch.setattr("runtime.turn.runner.model_for", lambda agent: Broken())
    # Handled, not raised: Celery's own line about it would name neither task nor tenant.
    with caplog.at_level(logging.ERROR, logger="runtime.turn.runner"):
        turn_run(task_pk=task.pk, worker_id="w1")
    crashed = [r for r in caplog.records if r.getMessage() == "the turn crashed"]
    assert crashed and crashed[0].exc_info is not None
    assert (crashed[0].task_id, crashed[0].tenant) == (task.public_id, "acme")
