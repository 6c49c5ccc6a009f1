"""Races on an approval group, on PostgreSQL's row locks: two operators
deciding the two calls of one group at the same moment both win and the turn resumes exactly
once; one operator deciding the whole group while another decides one of its calls: each call
gets exactly one decision, and the turn resumes once, when the last call has its own."""

import json
import threading

import pytest
from django.db import connections
from django.test import Client

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.flow import Decision
from runtime.decisions.group_flow import group_decision_take
from runtime.kernel.errors import AlreadyDecided
from runtime.kernel.task_models import AuditEvent, TaskState
from tenants.models import ApiToken
from tenants.tokens import api_token_create
from tests.core import flow_answer, run
from tests.groups import held_group, model_stub, planner

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROUNDS = 8


@pytest.fixture
def llm(settings, monkeypatch):
    with model_stub(settings, monkeypatch) as stub:
        yield stub


def at_once(work: list) -> list[str]:
    """Run each callable in its own thread, released together; what each came to."""
    barrier = threading.Barrier(len(work))
    outcomes: list[str] = [""] * len(work)

    def go(index: int, act) -> None:
        try:
            barrier.wait(timeout=30)
            try:
                act()
                outcomes[index] = "won"
            except AlreadyDecided:
                outcomes[index] = "lost"
            except Exception as exc:  # noqa: BLE001 - any other outcome fails the test
                outcomes[index] = f"error: {exc!r}"
        finally:
            connections.close_all()

    threads = [threading.Thread(target=go, args=(i, act)) for i, act in enumerate(work)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def one_call(side, interaction, by: str, approved: bool = True):
    return lambda: flow_answer(
        tenant=side.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": approved},
        by=by,
        via="page",
    )


def whole_group(side, group_id: str, shown: dict):
    return lambda: group_decision_take(
        tenant=side.tenant,
        group_id=group_id,
        decider=Decider(subject="user:operator@acme.test"),
        decision=Decision(approved=True, reason="all of it"),
        channel="page",
        shown=shown,
    )


def resumed(task) -> int:
    """How many status updates put the task back to work after its group paused it."""
    events = list(task.events.filter(kind="status").order_by("seq").values_list("state", flat=True))
    paused = events.index(TaskState.AUTH_REQUIRED)
    return events[paused:].count(TaskState.WORKING)


def test_two_operators_deciding_the_two_calls_at_once_resume_the_turn_once(
    postgres_only, agents, llm
):
    side = agents.a
    planner(side.tenant)
    for _ in range(ROUNDS):
        task, (first, second) = held_group(side, llm)
        outcomes = at_once(
            [
                one_call(side, first, "user:operator@acme.test"),
                one_call(side, second, "user:admin@acme.test"),
            ]
        )
        assert outcomes == ["won", "won"], outcomes
        task.refresh_from_db()
        assert task.state == TaskState.WORKING
        assert resumed(task) == 1
        assert AuditEvent.objects.filter(interaction__in=[first, second]).count() == 2
        assert Interaction.objects.filter(task=task, listed=True).count() == 1
        task = run(task)
        assert task.state == TaskState.COMPLETED
        assert (
            DemoRecord.objects.filter(effect_id__in=[first.public_id, second.public_id]).count()
            == 2
        )


def test_the_whole_group_against_one_of_its_calls_each_call_is_decided_once(
    postgres_only, agents, llm
):
    side = agents.a
    planner(side.tenant)
    for round_number in range(ROUNDS):
        task, (first, second) = held_group(side, llm)
        shown = dict(Effect.objects.filter(task=task).values_list("public_id", "arguments_hash"))
        group = whole_group(side, first.group_id, shown)
        # Odd rounds: the one call is the first, even: the second.
        single = first if round_number % 2 else second
        outcomes = at_once([group, one_call(side, single, "user:admin@acme.test", approved=False)])
        assert sorted(outcomes) == ["lost", "won"], outcomes
        calls = [Interaction.objects.get(pk=c.pk) for c in (first, second)]
        for call in calls:
            assert AuditEvent.objects.filter(interaction=call).count() == (
                0 if call.state == Interaction.State.OPEN else 1
            )
        task.refresh_from_db()
        if outcomes[0] == "won":
            # The group first: both approved at once; the single decision was not applied.
            assert [c.answered_by for c in calls] == ["user:operator@acme.test"] * 2
            assert resumed(task) == 1
        else:
            # The call first: the group's decision was not applied to the other call.
            other = next(c for c in calls if c.pk != single.pk)
            assert other.state == Interaction.State.OPEN
            assert task.state == TaskState.AUTH_REQUIRED
            assert resumed(task) == 0
            one_call(side, other, "user:operator@acme.test")()
            task.refresh_from_db()
            assert resumed(task) == 1
        task = run(task)
        assert task.state == TaskState.COMPLETED
        approved = [
            c.public_id for c in Interaction.objects.filter(task=task, answer__approved=True)
        ]
        assert sorted(
            DemoRecord.objects.filter(
                effect_id__in=[first.public_id, second.public_id]
            ).values_list("effect_id", flat=True)
        ) == sorted(approved)


def over_rest(work: list) -> list[int]:
    """Post each (path, body, client) in its own thread, released together: the statuses."""
    barrier = threading.Barrier(len(work))
    statuses: list = [None] * len(work)

    def go(index: int, path: str, body: dict, client) -> None:
        try:
            barrier.wait(timeout=30)
            response = client.post(path, json.dumps(body), content_type="application/json")
            statuses[index] = response.status_code
        except Exception as exc:  # noqa: BLE001 - any other outcome fails the test
            statuses[index] = f"error: {exc!r}"
        finally:
            connections.close_all()

    threads = [threading.Thread(target=go, args=(i, *item)) for i, item in enumerate(work)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return statuses


def test_two_operators_approving_the_group_and_one_deciding_a_call_over_rest_at_once(
    postgres_only, agents, llm
):
    """Over /api/v1 (real requests in threads, each on its own PostgreSQL connection): one
    operator approves the group bound to the calls it was shown, another approves it as it
    stands, and an admin denies one call on its own, all at the same moment. Whatever the
    order, no 5xx, each call gets exactly one decision, the decisions the 200s report are
    those made, and the turn resumes exactly once, when the last call has its own."""
    side = agents.a
    planner(side.tenant)
    _, other_token = api_token_create(
        tenant=side.tenant,
        subject="program:acme-ops-2",
        name="second ops bot",
        kind=ApiToken.Kind.OPERATOR,
    )
    bound = Client(HTTP_AUTHORIZATION=f"Bearer {side.extra['operator_token']}")
    unbound = Client(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    admin = side.client_for(side.admin)
    for round_number in range(ROUNDS):
        task, calls = held_group(side, llm)
        shown = dict(Effect.objects.filter(task=task).values_list("public_id", "arguments_hash"))
        single = calls[round_number % 2]
        group_path = f"/api/v1/groups/{calls[0].group_id}/answer"
        statuses = over_rest(
            [
                (group_path, {"approved": True, "argumentsHashes": shown}, bound),
                (group_path, {"approved": True, "reason": "as it stands"}, unbound),
                (
                    f"/api/v1/interactions/{single.public_id}/answer",
                    {"approved": False, "reason": "not this one"},
                    admin,
                ),
            ]
        )
        assert set(statuses) <= {200, 409}, statuses
        decided = [Interaction.objects.get(pk=c.pk) for c in calls]
        won = {c.answered_by for c in decided if c.state == Interaction.State.ANSWERED}
        # Each call decided exactly once, by one of those whose request was a 200.
        for call in decided:
            assert AuditEvent.objects.filter(interaction=call).count() == 1, statuses
            assert Receipt.objects.filter(effect_public_id=call.public_id).count() == 1
        answered_by = {
            "program:acme-ops": statuses[0],
            "program:acme-ops-2": statuses[1],
            side.admin.subject: statuses[2],
        }
        assert all(answered_by[who] == 200 for who in won), (statuses, won)
        assert [who for who, status in answered_by.items() if status == 200] == sorted(
            won, key=list(answered_by).index
        ), (statuses, won)
        # A group decision is all of its open calls: a group's 200 decided every call the
        # single answer did not.
        for who in ("program:acme-ops", "program:acme-ops-2"):
            if answered_by[who] == 200:
                assert all(c.answered_by in (who, side.admin.subject) for c in decided)
        task.refresh_from_db()
        assert task.state == TaskState.WORKING and resumed(task) == 1, statuses
        task = run(task)
        assert task.state == TaskState.COMPLETED
        approved = [c.public_id for c in decided if c.answer.get("approved")]
        assert sorted(
            DemoRecord.objects.filter(effect_id__in=[c.public_id for c in calls]).values_list(
                "effect_id", flat=True
            )
        ) == sorted(approved)
