"""The two-person rule under a race: twenty deciders approve the same held call at once
(threads, each on its own PostgreSQL connection). Exactly two distinct people's approvals
count, the task resumes once, and the tool is sent once."""

import threading

import pytest
from django.db import connections

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction, InteractionApproval
from runtime.kernel.errors import AlreadyDecided, DeciderRefused
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, flow_answer, run, send

DECIDERS = 20
ROUNDS = 3


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
    """Approvals opened for one person, the policy then asks for
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


def race(interaction, deciders):
    """Every decider ``(subject, Decider)`` approves ``interaction`` at once, each on its own
    connection; returns [(outcome, subject)]."""
    barrier = threading.Barrier(len(deciders))
    outcomes: list[tuple[str, str]] = []

    def take(subject, decider):
        try:
            barrier.wait(timeout=30)
            try:
                decided = flow_answer(
                    tenant=interaction.tenant,
                    interaction_id=interaction.public_id,
                    answer={"approved": True},
                    by=subject,
                    via="page",
                    decider=decider,
                )
                outcomes.append(("recorded" if decided.state == "open" else "closed", subject))
            except AlreadyDecided:
                outcomes.append(("lost", subject))
            except DeciderRefused as exc:
                outcomes.append(("refused: " + exc.message, subject))
            except Exception as exc:  # noqa: BLE001 - any other outcome fails the test below
                outcomes.append((f"error: {exc!r}", subject))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=take, args=pair) for pair in deciders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == len(deciders), outcomes
    assert not [o for o in outcomes if o[0].startswith("error")], outcomes
    return outcomes


def person(name, role="operator") -> tuple[str, Decider]:
    subject = f"user:{name}@acme.test"
    return subject, Decider(subject=subject, role=role)


def program(name) -> tuple[str, Decider]:
    return f"program:{name}", Decider.of_program(f"program:{name}")


@pytest.mark.postgres
def test_a_quorum_of_three_under_a_race_counts_three_distinct_people(
    postgres_only, transactional_db, make_agent, agents
):
    """Twenty deciders (eight people, each in two tabs, and four programs)
    approve a required: 3 call at once: exactly three distinct people count, no program, and
    the tool is sent once."""
    side = agents.a
    make_agent(
        "three",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "required": 3}},
    )
    for _ in range(ROUNDS):
        task = run(send(side, "three"))
        interaction = Interaction.objects.select_related("task", "task__agent").get(
            task=task, state="open"
        )
        deciders = [person(f"op{i % 8}") for i in range(16)] + [
            program(f"bot{i}") for i in range(4)
        ]
        outcomes = race(interaction, deciders)
        kinds = [kind for kind, _ in outcomes]
        assert kinds.count("recorded") == 2 and kinds.count("closed") == 1, outcomes
        counted = [who for kind, who in outcomes if kind in ("recorded", "closed")]
        assert len(set(counted)) == 3 and all(c.startswith("user:") for c in counted), outcomes
        programs = [kind for kind, who in outcomes if who.startswith("program:")]
        assert all(k == "lost" or "not a person" in k for k in programs), outcomes

        interaction.refresh_from_db()
        assert interaction.state == Interaction.State.ANSWERED
        assert sorted(a["by"] for a in interaction.approvals) == sorted(counted)
        assert InteractionApproval.objects.filter(interaction=interaction).count() == 3
        task = run(task)
        assert task.state == TaskState.COMPLETED
        run(task)
        assert DemoRecord.objects.filter(effect_id=interaction.public_id).count() == 1


@pytest.mark.postgres
def test_two_stages_under_a_race_count_two_operators_then_an_admin(
    postgres_only, transactional_db, make_agent, agents
):
    """Two operators, then an admin. Operators (each in two tabs), admins
    and programs approve at once: stage 1 takes exactly two distinct operators, stage 2
    exactly one admin (an admin who came early is refused, and tries again), no program
    counts, nobody counts twice, and the tool is sent once."""
    side = agents.a
    make_agent(
        "staged",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={
            "deploy/deploy_build": {
                "action": "approve",
                "stages": [
                    {"approvers": ["operator"], "required": 2},
                    {"approvers": ["admin"], "required": 1},
                ],
            }
        },
    )
    for _ in range(ROUNDS):
        task = run(send(side, "staged"))
        interaction = Interaction.objects.select_related("task", "task__agent").get(
            task=task, state="open"
        )
        admins = [person(f"boss{i}", role="admin") for i in range(4)]
        deciders = (
            [person(f"op{i % 6}") for i in range(12)]
            + admins
            + [program(f"bot{i}") for i in range(4)]
        )
        outcomes = race(interaction, deciders)
        interaction.refresh_from_db()
        if interaction.state == Interaction.State.OPEN:
            # Every admin came while stage 1 was open: they were refused and come back.
            outcomes += race(interaction, admins)
            interaction.refresh_from_db()
        assert interaction.state == Interaction.State.ANSWERED, outcomes
        by_stage = [(a["stage"], a["by"]) for a in interaction.approvals]
        assert [stage for stage, _ in by_stage] == [1, 1, 2], by_stage
        first, second = {who for stage, who in by_stage if stage == 1}, by_stage[2][1]
        assert len(first) == 2 and all(who.startswith("user:op") for who in first), by_stage
        assert second.startswith("user:boss"), by_stage
        refused = [kind for kind, _ in outcomes if kind.startswith("refused")]
        assert all(
            "stage" in kind or "approved this already" in kind or "not a person" in kind
            for kind in refused
        ), outcomes
        assert InteractionApproval.objects.filter(interaction=interaction).count() == 3
        task = run(task)
        assert task.state == TaskState.COMPLETED
        run(task)
        assert DemoRecord.objects.filter(effect_id=interaction.public_id).count() == 1
