"""A reply's calls decided together: the held calls of one model reply open
as one approval group, decided call by call or at once through the one decision flow, and the
turn resumes once, when the last of them has its decision; then every call of the reply is sent
(or its denial told) in the reply's order. The model is the local OpenAI-compatible stub."""

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.flow import PAGE, Decision
from runtime.decisions.group_flow import group_decision_take
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel import extensions as ext
from runtime.kernel.errors import (
    AlreadyDecided,
    DecisionMisfit,
    InvalidParams,
    StepUpRequired,
    TaskNotFound,
)
from runtime.kernel.task_models import AuditEvent
from runtime.turn.cancel import task_stop
from tests.core import decide, run, send, states, status_text
from tests.groups import DEPLOY, PRODUCTION, STAGING, group_of, held_group, model_stub, planner
from tests.llm_stub import call, completion

pytestmark = pytest.mark.django_db

OPERATOR = "user:operator@acme.test"


@pytest.fixture
def llm(settings, monkeypatch):
    with model_stub(settings, monkeypatch) as stub:
        yield stub


@pytest.fixture
def acme(agents):
    planner(agents.a.tenant)
    return agents.a


def tool_results(body: dict) -> list[tuple[str, dict]]:
    """The tool results a model request carried, in order: (call id, parsed content)."""
    return [
        (m["tool_call_id"], json.loads(m["content"]))
        for m in body["messages"]
        if m["role"] == "tool"
    ]


def resumes(callbacks) -> int:
    """How many times the committed decision(s) resumed the turn (runtime.kernel.task_state)."""
    return sum(1 for c in callbacks if "_turn_enqueue_pk" in c.__qualname__)


def group_decide(tenant, group_id, *, approved, by=OPERATOR, shown=None, **decider):
    return group_decision_take(
        tenant=tenant,
        group_id=group_id,
        decider=Decider(subject=by, **decider),
        decision=Decision(approved=approved, reason="as a whole"),
        channel=PAGE,
        shown=shown,
    )


def test_a_two_call_reply_opens_one_group_and_pauses_once(acme, llm):
    task, calls = held_group(acme, llm)
    assert [c.public_id for c in calls] == list(
        Effect.objects.filter(task=task).order_by("step").values_list("public_id", flat=True)
    )
    assert Effect.objects.filter(task=task, state=Effect.State.HELD).count() == 2
    assert [c.group_position for c in calls] == [0, 1]
    assert [c.listed for c in calls] == [True, False]  # one inbox item
    assert all(c.state == Interaction.State.OPEN for c in calls)
    # One pause: one AUTH_REQUIRED status, the model asked once.
    assert states(task) == [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_AUTH_REQUIRED",
    ]
    assert len(llm.requests) == 1
    # interactions/v1: the first call's interaction at the top, the group listed beside it.
    data = task.status_ext[ext.INTERACTIONS]
    assert data["interactionId"] == calls[0].public_id
    assert data["kind"] == "approval"
    assert data["prompt"] == "Approve deploy / deploy_build?"
    assert data["groupId"] == calls[0].group_id
    assert [i["interactionId"] for i in data["interactions"]] == [c.public_id for c in calls]
    assert "outcomes" not in data
    assert (
        status_text(task)
        == "Approve 2 calls of one reply: deploy / deploy_build; deploy / deploy_build?"
    )
    # Never a call's arguments on the wire. "b-1" is looked for as a word of its own: a random
    # id (base64url: letters, digits, "-" and "_") may hold it as a substring.
    wire = json.dumps(task.status_ext) + json.dumps(task.status_message)
    assert "staging" not in wire and "production" not in wire
    assert not re.search(r"(?<![\w-])b-1(?![\w-])", wire)


def test_decided_call_by_call_the_turn_resumes_once_the_last_has_its_decision(
    acme, llm, django_capture_on_commit_callbacks
):
    task, (first, second) = held_group(acme, llm)
    with django_capture_on_commit_callbacks() as callbacks:
        decide(first, approved=True)
    assert resumes(callbacks) == 0
    task.refresh_from_db()
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    # The task now says what is left: the second call at the top, the first one's outcome.
    data = task.status_ext[ext.INTERACTIONS]
    assert data["interactionId"] == second.public_id
    assert [i["interactionId"] for i in data["interactions"]] == [second.public_id]
    assert [(o["interactionId"], o["outcome"]) for o in data["outcomes"]] == [
        (first.public_id, "approved")
    ]
    assert status_text(task) == "Approve 1 call of 2 of one reply: deploy / deploy_build?"
    # The group's inbox row moved to the call still open; nothing was sent yet.
    assert list(Interaction.objects.filter(task=task, listed=True)) == [second]
    assert not DemoRecord.objects.exists()
    assert run(task).state == "TASK_STATE_AUTH_REQUIRED"  # a turn run early waits on

    with django_capture_on_commit_callbacks() as callbacks:
        decide(second, approved=False, reason="not production")
    assert resumes(callbacks) == 1
    task.refresh_from_db()
    assert task.state == "TASK_STATE_WORKING"
    data = task.status_ext[ext.INTERACTIONS]
    assert (data["interactionId"], data["outcome"]) == (second.public_id, "denied")
    assert [(o["interactionId"], o["outcome"]) for o in data["outcomes"]] == [
        (first.public_id, "approved"),
        (second.public_id, "denied"),
    ]
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    assert len(llm.requests) == 2
    results = tool_results(llm.requests[1]["body"])
    assert [call_id for call_id, _ in results] == ["d_staging", "d_prod"]
    assert results[0][1]["ok"] is True
    assert (results[1][1]["ok"], results[1][1]["reason"]) == (False, "not production")
    assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [first.public_id]
    assert (
        Receipt.objects.filter(
            interaction_public_id__in=[first.public_id, second.public_id]
        ).count()
        == 2
    )


def test_decided_at_once_every_call_is_decided_in_one_transaction_and_sent_in_order(
    acme, llm, django_capture_on_commit_callbacks
):
    task, calls = held_group(acme, llm)
    events_before = task.event_seq
    with django_capture_on_commit_callbacks() as callbacks:
        decided = group_decide(acme.tenant, calls[0].group_id, approved=True)
    assert resumes(callbacks) == 1
    assert decided.decided == tuple(c.public_id for c in calls)
    assert not decided.waiting
    task.refresh_from_db()
    # One status for the decision: the turn resumes, with each call's outcome.
    assert task.event_seq == events_before + 1
    data = task.status_ext[ext.INTERACTIONS]
    assert [o["outcome"] for o in data["outcomes"]] == ["approved", "approved"]
    # Every call decided as on its own: its audit row and its receipt.
    for c in calls:
        c.refresh_from_db()
        assert (c.state, c.answered_by, c.answered_via) == ("answered", OPERATOR, "page")
        assert c.answer == {"approved": True, "reason": "as a whole"}
    assert AuditEvent.objects.filter(action="approved", interaction__in=calls).count() == 2
    assert (
        Receipt.objects.filter(
            decision="approved", effect_public_id__in=[c.public_id for c in calls]
        ).count()
        == 2
    )
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    sent = list(DemoRecord.objects.order_by("pk").values_list("effect_id", flat=True))
    assert sent == [c.public_id for c in calls]


def test_a_held_call_allowed_call_and_held_call_are_one_group_sent_in_the_reply_order(acme, llm):
    planner(
        acme.tenant,
        policy={
            "deploy/deploy_build": [
                {
                    "when": [{"field": "environment", "op": "equals", "value": "production"}],
                    "action": "approve",
                },
                {"action": "allow"},
            ]
        },
    )
    later = {"build": "b-2", "environment": "production"}
    llm.play(
        completion(
            calls=[
                call(DEPLOY, PRODUCTION, "p1"),
                call(DEPLOY, STAGING, "s1"),
                call(DEPLOY, later, "p2"),
            ]
        ),
        completion("Done."),
    )
    task = run(send(acme, "planner", "three deploys"))
    calls = group_of(task)
    effects = list(Effect.objects.filter(task=task).order_by("step"))
    # All three journalled together, the allowed one too; it waits for the group.
    assert [e.state for e in effects] == ["held", "approved", "held"]
    assert [c.public_id for c in calls] == [effects[0].public_id, effects[2].public_id]
    assert not DemoRecord.objects.exists()
    group_decide(acme.tenant, calls[0].group_id, approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    sent = list(DemoRecord.objects.order_by("pk").values_list("effect_id", flat=True))
    assert sent == [e.public_id for e in effects]
    assert [i for i, _ in tool_results(llm.requests[1]["body"])] == ["p1", "s1", "p2"]


def test_one_held_call_among_allowed_ones_is_held_on_its_own_as_before(acme, llm):
    planner(
        acme.tenant,
        policy={
            "deploy/deploy_build": [
                {
                    "when": [{"field": "environment", "op": "equals", "value": "production"}],
                    "action": "approve",
                },
                {"action": "allow"},
            ]
        },
    )
    llm.play(
        completion(calls=[call(DEPLOY, PRODUCTION, "p1"), call(DEPLOY, STAGING, "s1")]),
        completion("Done."),
    )
    task = run(send(acme, "planner", "two deploys"))
    held = Interaction.objects.get(task=task)
    assert (held.group_id, held.listed) == ("", True)
    # The allowed call is not journalled ahead: it is applied after the held one, as before.
    assert Effect.objects.filter(task=task).count() == 1
    decide(held, approved=True)
    assert run(task).state == "TASK_STATE_COMPLETED"
    assert DemoRecord.objects.count() == 2


def test_a_refusal_of_one_call_decides_none_of_the_group(acme, llm):
    planner(acme.tenant, policy={"deploy/deploy_build": {"action": "approve", "risk": "high"}})
    task, calls = held_group(acme, llm)
    with pytest.raises(StepUpRequired):
        group_decide(acme.tenant, calls[0].group_id, approved=True)
    for c in calls:
        c.refresh_from_db()
        assert c.state == Interaction.State.OPEN
    assert not Receipt.objects.exists()
    assert not AuditEvent.objects.filter(interaction__in=calls).exists()
    # A denial needs no step-up: both denied at once, the model told of each.
    group_decide(acme.tenant, calls[0].group_id, approved=False)
    assert run(task).state == "TASK_STATE_COMPLETED"
    results = tool_results(llm.requests[1]["body"])
    assert [r["ok"] for _, r in results] == [False, False]
    assert not DemoRecord.objects.exists()


def test_a_group_decision_binds_the_calls_shown(acme, llm):
    task, (first, second) = held_group(acme, llm)
    hashes = dict(Effect.objects.filter(task=task).values_list("public_id", "arguments_hash"))
    group_id = first.group_id
    with pytest.raises(InvalidParams) as missing:
        group_decide(
            acme.tenant, group_id, approved=True, shown={first.public_id: hashes[first.public_id]}
        )
    assert (
        missing.value.field == "argumentsHashes" and second.public_id in missing.value.description
    )
    with pytest.raises(InvalidParams):
        group_decide(acme.tenant, group_id, approved=True, shown={**hashes, "eff_other": None})
    with pytest.raises(InvalidParams):  # a hash that is not the call's
        group_decide(
            acme.tenant, group_id, approved=True, shown={**hashes, first.public_id: "0" * 64}
        )
    assert not Interaction.objects.filter(task=task).exclude(state="open").exists()
    # Someone decided the first call meanwhile: the group's decision is not applied.
    decide(first, by="user:admin@acme.test", approved=False)
    with pytest.raises(AlreadyDecided) as already:
        group_decide(acme.tenant, group_id, approved=True, shown=hashes)
    assert already.value.interaction.public_id == first.public_id
    second.refresh_from_db()
    assert second.state == Interaction.State.OPEN
    # What is left can still be decided at once, as now shown.
    group_decide(
        acme.tenant, group_id, approved=True, shown={second.public_id: hashes[second.public_id]}
    )
    second.refresh_from_db()
    assert second.state == Interaction.State.ANSWERED
    with pytest.raises(AlreadyDecided):
        group_decide(acme.tenant, group_id, approved=True)


def test_a_group_decision_that_does_not_fit_is_refused(acme, llm, agents):
    _, calls = held_group(acme, llm)
    decider = Decider(subject=OPERATOR)
    for decision, field in (
        (Decision(value="yes"), "value"),
        (Decision(), "approved"),
        (Decision(approved=True, arguments={"build": "x"}), "arguments"),
    ):
        with pytest.raises(DecisionMisfit) as refused:
            group_decision_take(
                tenant=acme.tenant,
                group_id=calls[0].group_id,
                decider=decider,
                decision=decision,
                channel=PAGE,
            )
        assert refused.value.field == field
    # Another tenant's group is a missing one.
    with pytest.raises(TaskNotFound):
        group_decide(agents.b.tenant, calls[0].group_id, approved=True)
    with pytest.raises(TaskNotFound):
        group_decide(acme.tenant, "", approved=True)


def test_a_call_that_needs_two_people_keeps_the_group_waiting(acme, llm):
    planner(acme.tenant, policy={"deploy/deploy_build": {"action": "approve", "required": 2}})
    task, (first, second) = held_group(acme, llm)
    decided = group_decide(acme.tenant, first.group_id, approved=True, by="user:operator@acme.test")
    # Each call has one approval of two: recorded, both still open, the task waits.
    assert [c.public_id for c in decided.waiting] == [first.public_id, second.public_id]
    task.refresh_from_db()
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    decide(first, by="user:admin@acme.test", approved=True)
    task.refresh_from_db()
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert task.status_ext[ext.INTERACTIONS]["interactionId"] == second.public_id
    decide(second, by="user:admin@acme.test", approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    assert DemoRecord.objects.count() == 2


def test_the_expiry_of_every_call_resumes_the_turn_once_with_each_denied(acme, llm):
    task, calls = held_group(acme, llm)
    later = timezone.now() + timedelta(days=30)
    assert interactions_expire(now=later) == 2
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    results = tool_results(llm.requests[1]["body"])
    assert [(r["ok"], r["reason"]) for _, r in results] == [(False, "expired"), (False, "expired")]


def test_a_canceled_task_closes_its_group_and_sends_nothing(acme, llm):
    task, calls = held_group(acme, llm)
    task_stop(
        tenant=acme.tenant, task_id=task.public_id, by=OPERATOR, via="page", reason="wrong plan"
    )
    for c in calls:
        c.refresh_from_db()
        assert c.state == Interaction.State.CANCELED
    assert set(Effect.objects.filter(task=task).values_list("state", flat=True)) == {"denied"}
    assert not DemoRecord.objects.exists()


def test_a_void_approval_reopens_its_call_alone_as_the_groups_item(acme, llm):
    task, (first, second) = held_group(acme, llm)
    group_decide(acme.tenant, first.group_id, approved=True)
    # The rule that held the calls changes before they are sent: both approvals are void.
    planner(
        acme.tenant,
        policy={"deploy/deploy_build": {"action": "approve", "title": "Deploy {build}"}},
    )
    task = run(task)
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    first.refresh_from_db()
    assert first.state == Interaction.State.OPEN and first.detail["voided"] is True
    # The reopened call is the group's one item in the inbox again.
    assert list(Interaction.objects.filter(task=task, listed=True)) == [first]
    assert not DemoRecord.objects.exists()
    decide(first, approved=True)
    task = run(task)
    # The second call's approval is void in its turn: it reopens, the first was sent.
    second.refresh_from_db()
    assert second.state == Interaction.State.OPEN
    assert list(Interaction.objects.filter(task=task, listed=True)) == [second]
    assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [first.public_id]
    decide(second, approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    assert DemoRecord.objects.count() == 2
