"""The two-person rule under a race: twenty deciders approve the same held call at once
(threads, each on its own PostgreSQL connection). Exactly two distinct people's approvals
count, the task resumes once, and the tool is sent once."""

import threading

import pytest
from django.db import connection, connections

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction, InteractionApproval
from runtime.kernel.errors import AlreadyDecided, DeciderRefused
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, flow_answer, run, send

DECIDERS = 20
ROUNDS = 3


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("the race needs PostgreSQL's row locks across connections (DATABASE_URL)")


def decide(index, interaction, barrier, outcomes):
    # Ten people, each deciding twice (two tabs, a page and a program): the same person's
    # second approval must never count as the second person's.
    person = f"user:op{index % 10}@acme.test"
    try:
        barrier.wait(timeout=30)
        try:
            decided = flow_answer(
                tenant=interaction.tenant,
                interaction_id=interaction.public_id,
                answer={"approved": True},
                by=person,
                via="page" if index % 2 else "rest",
                decider=Decider(subject=person, role="operator"),
            )
            outcomes.append(("recorded" if decided.state == "open" else "closed", person))
        except AlreadyDecided:
            outcomes.append(("lost", person))
        except DeciderRefused:
            outcomes.append(("again", person))
        except Exception as exc:  # noqa: BLE001 - any other outcome fails the test below
            outcomes.append((f"error: {exc!r}", person))
    finally:
        connections.close_all()


@pytest.mark.postgres
def test_twenty_deciders_two_distinct_approvals_and_the_tool_sent_once(
    postgres_only, transactional_db, make_agent, agents
):
    side = agents.a
    make_agent(
        "two",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "required": 2}},
    )
    for _ in range(ROUNDS):
        task = run(send(side, "two"))
        interaction = Interaction.objects.select_related("task", "task__agent").get(
            task=task, state="open"
        )
        barrier = threading.Barrier(DECIDERS)
        outcomes: list[tuple[str, str]] = []
        threads = [
            threading.Thread(target=decide, args=(i, interaction, barrier, outcomes))
            for i in range(DECIDERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        kinds = [kind for kind, _ in outcomes]
        assert len(outcomes) == DECIDERS, outcomes
        assert kinds.count("recorded") == 1, outcomes
        assert kinds.count("closed") == 1, outcomes
        assert set(kinds) <= {"recorded", "closed", "lost", "again"}, outcomes
        counted = [person for kind, person in outcomes if kind in ("recorded", "closed")]
        assert len(set(counted)) == 2, outcomes

        interaction.refresh_from_db()
        assert interaction.state == Interaction.State.ANSWERED
        assert sorted(a["by"] for a in interaction.approvals) == sorted(counted)
        assert InteractionApproval.objects.filter(interaction=interaction).count() == 2
        assert list(
            AuditEvent.objects.filter(interaction=interaction)
            .order_by("id")
            .values_list("action", flat=True)
        ) == ["approval_recorded", "approved"]

        # The last approval resumed the turn; running it again changes nothing.
        task = run(task)
        assert task.state == TaskState.COMPLETED
        run(task)
        assert DemoRecord.objects.filter(effect_id=interaction.public_id).count() == 1
    assert DemoRecord.objects.count() == ROUNDS


def decide_or_program(index, interaction, barrier, outcomes):
    """Every fifth decider is a program (an operator token): never one of the two people."""
    if index % 5:
        return decide(index, interaction, barrier, outcomes)
    program = f"program:bot{index}"
    try:
        barrier.wait(timeout=30)
        try:
            flow_answer(
                tenant=interaction.tenant,
                interaction_id=interaction.public_id,
                answer={"approved": True},
                by=program,
                via="rest",
                decider=Decider.of_program(program),
            )
            outcomes.append(("program counted", program))
        except (AlreadyDecided, DeciderRefused):
            outcomes.append(("program refused", program))
        except Exception as exc:  # noqa: BLE001 - any other outcome fails the test below
            outcomes.append((f"error: {exc!r}", program))
    finally:
        connections.close_all()


@pytest.mark.postgres
def test_a_policy_tightened_to_two_people_holds_under_a_race_of_people_and_programs(
    postgres_only, transactional_db, make_agent, agents
):
    """Issue 28, findings 4 and 6: approvals opened for one person, the policy then asks for
    two; twenty deciders (sixteen people's tabs, four programs) approve at once. Exactly two
    distinct people's approvals count, no program's, and the tool is sent once."""
    side = agents.a
    agent = make_agent(
        "two",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "approve"},
    )
    for round_ in range(ROUNDS):
        agent.tool_policy = {"deploy/deploy_build": "approve"}
        agent.save()
        task = run(send(side, "two"))
        interaction = Interaction.objects.select_related("task", "task__agent").get(
            task=task, state="open"
        )
        assert interaction.approvals_required == 1
        agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "required": 2}}
        agent.save()
        barrier = threading.Barrier(DECIDERS)
        outcomes: list[tuple[str, str]] = []
        threads = [
            threading.Thread(target=decide_or_program, args=(i, interaction, barrier, outcomes))
            for i in range(DECIDERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        kinds = [kind for kind, _ in outcomes]
        assert len(outcomes) == DECIDERS, outcomes
        assert kinds.count("recorded") == 1 and kinds.count("closed") == 1, outcomes
        assert kinds.count("program refused") == DECIDERS // 5, outcomes
        assert set(kinds) <= {"recorded", "closed", "lost", "again", "program refused"}, outcomes
        counted = [who for kind, who in outcomes if kind in ("recorded", "closed")]
        assert len(set(counted)) == 2 and all(c.startswith("user:") for c in counted), outcomes

        interaction.refresh_from_db()
        assert interaction.state == Interaction.State.ANSWERED
        assert interaction.approvals_required == 2
        assert sorted(a["by"] for a in interaction.approvals) == sorted(counted)
        task = run(task)
        assert task.state == TaskState.COMPLETED, round_
        run(task)
        assert DemoRecord.objects.filter(effect_id=interaction.public_id).count() == 1
