"""What a turn costs the database: one transaction to claim, one to finish,
and one more for each step that must be durable before it acts. The counts are pinned, so a
change that adds a query or a transaction to these turns fails here and has to say why.

Under ``django_db`` each transaction of the runner is a savepoint of the test's transaction:
the savepoints count the transactions, and are left out of the queries (in production they
are BEGIN and COMMIT, which the count of statements does not see either).
"""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Effect
from runtime.kernel.task_models import TaskState
from runtime.turn.runner import turn_run
from tests.core import decide, open_interaction, send, start
from tests.llm_stub import LLMStub, completion

pytestmark = pytest.mark.django_db

SAVEPOINT = re.compile(r'^(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT) "')


class TurnCost:
    def __init__(self, captured: list[dict]):
        sql = [q["sql"] for q in captured]
        # A savepoint opened for the demo tool server's own write (get_or_create) is the
        # tool's, not one of the turn's transactions.
        self.transactions = sum(
            1
            for i, s in enumerate(sql)
            if s.startswith("SAVEPOINT") and "runtime_demorecord" not in sql[i + 1]
        )
        self.statements = [s for s in sql if not SAVEPOINT.match(s)]

    def count(self, prefix: str) -> int:
        return sum(1 for s in self.statements if s.startswith(prefix))

    def __repr__(self) -> str:  # what a failing assertion shows
        return "\n".join([f"{self.transactions} transactions:", *self.statements])


def turn_cost(task) -> TurnCost:
    with CaptureQueriesContext(connection) as captured:
        turn_run(task_pk=task.pk, worker_id="w1")
    return TurnCost(captured.captured_queries)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts PostgreSQL's statements (NOTIFY)"
)
def test_a_turn_that_answers_at_once_is_one_transaction_of_two_statements(agents, make_agent):
    make_agent("greeter", [{"reply": "Hello, {{ text }}."}])
    task = send(agents.a, "greeter", "world")

    cost = turn_cost(task)

    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED
    # An in-process model waits on nothing: claim, reply and finish commit together.
    assert cost.transactions == 1, cost
    # The claim (its locked read, which also asks whether an earlier turn of the context is
    # still open), then one statement as the transaction commits: the two status events
    # (WORKING, COMPLETED) with their push deliveries (the task has no config, so none), the
    # save of the row with its NOTIFY, and the look for the context's next queued turn. No
    # statement reads push configs of its own.
    assert len(cost.statements) == 2, cost
    written = cost.statements[1]
    assert written.startswith('WITH "ev" AS (INSERT INTO "runtime_taskevent"'), cost
    assert '"a2a_endpoint_pushconfig"' in written and '"t" AS (UPDATE "runtime_task"' in written
    assert "RETURNING 1, pg_notify(" in written and '"turn" > ' in written, cost
    assert cost.count("INSERT") == 0 and cost.count("UPDATE") == 0, cost
    assert cost.count("SELECT pg_notify") == 0, cost


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts PostgreSQL's statements (NOTIFY)"
)
def test_a_turn_on_a_hosted_model_commits_before_the_call_and_once_after(
    agents, settings, monkeypatch
):
    stub = LLMStub().start()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "q" * 32)
        settings.OPENAI_BASE_URL = stub.url
        stub.play(completion("Hello."))
        spec = AgentSpec(
            slug="hosted",
            name="hosted",
            description="An agent on a hosted model.",
            skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
            instructions="Be brief.",
            model={"provider": "openai", "model": "gpt-4o-mini"},
        )
        agent_upsert(tenant=agents.a.tenant, spec=spec)
        task = send(agents.a, "hosted", "hi")

        cost = turn_cost(task)
    finally:
        stub.stop()

    task.refresh_from_db()
    assert (task.state, task.status_message["parts"][0]["text"]) == (
        TaskState.COMPLETED,
        "Hello.",
    )
    # The claim commits before the model is asked; the reply, its usage and the finish are
    # the second transaction.
    assert cost.transactions == 2, cost
    # Claim: locked read; the WORKING event (and its push deliveries: none) with the save
    # and its NOTIFY. The model's credential (read while the turn's connection is given
    # back). Finish: the row's lock (still this run's?), the model's price; the COMPLETED
    # event, the save with its NOTIFY and the context's next queued turn, in one statement.
    assert len(cost.statements) == 6, cost
    assert cost.count("UPDATE") == 0 and cost.count("SELECT pg_notify") == 0, cost
    assert sum(1 for s in cost.statements if "RETURNING 1, pg_notify(" in s) == 2, cost


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts PostgreSQL's statements (NOTIFY)"
)
def test_a_later_turn_of_a_context_reads_its_earlier_turns_once(agents, settings, monkeypatch):
    stub = LLMStub().start()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "q" * 32)
        settings.OPENAI_BASE_URL = stub.url
        stub.play(completion("Hello."), completion("Hello again."))
        spec = AgentSpec(
            slug="hosted",
            name="hosted",
            description="An agent on a hosted model.",
            skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
            instructions="Be brief.",
            model={"provider": "openai", "model": "gpt-4o-mini"},
        )
        agent_upsert(tenant=agents.a.tenant, spec=spec)
        first = send(agents.a, "hosted", "hi")
        turn_run(task_pk=first.pk, worker_id="w1")
        first.refresh_from_db()
        second = send(agents.a, "hosted", "hi again", contextId=first.wire_context_id)

        cost = turn_cost(second)
    finally:
        stub.stop()

    second.refresh_from_db()
    assert (second.turn, second.state) == (2, TaskState.COMPLETED)
    # Conversation memory: the first turn's 6 statements and one more, the read of
    # the context's earlier turns, in the claim's transaction (before the model is asked);
    # kept in the transcript, it is not read again for the turn's later steps.
    assert cost.transactions == 2, cost
    assert len(cost.statements) == 7, cost
    assert sum(1 for s in cost.statements if '"turn" >= ' in s) == 1, cost


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts PostgreSQL's statements (NOTIFY)"
)
def test_a_turn_resumed_by_an_approval_is_two_transactions(agents):
    task = start(agents.a, "deployer", "deploy build 2026.10.06-1 to staging")
    decide(open_interaction(task), approved=True)

    cost = turn_cost(task)

    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED
    assert Effect.objects.get(task=task).state == Effect.State.SUCCEEDED
    # One transaction takes the turn, approves the held call and journals it as sending,
    # and commits before the call leaves; the second closes it and runs the agent's last
    # steps (two plan updates, the reply) to the finish.
    assert cost.transactions == 2, cost
    # The demo deploy server's own statement (record it unless this effect is recorded;
    # it was two, a read and then the insert) is the tool's, not the turn's.
    tool = sum(1 for s in cost.statements if "runtime_demorecord" in s)
    assert tool == 1, cost
    # Take: locked read; the effect with its interaction and the approval's receipt (does it
    # still bind?) in one read (they were three, runtime.turn.calls._JournalRead);
    # the effect approved and sending in one write (they were two); save.
    # Finish: the row's lock; then the effect closed, three status events (with their push
    # deliveries: none), the save with its NOTIFY and the context's next queued turn, in
    # one statement (they were four).
    assert len(cost.statements) - tool == 6, cost
    effect_writes = [s for s in cost.statements if 'UPDATE "runtime_effect"' in s]
    assert len(effect_writes) == 2, cost  # held to sending, then sending to succeeded
    assert effect_writes[0].startswith('UPDATE "runtime_effect"'), cost
    assert effect_writes[1] == cost.statements[-1], cost  # with the finish's statement


# --- the run's row in memory: a change by someone else while the run waits wins ------------


class HostedModel:
    """A model asked over the network (not ``in_process``): the run commits before asking
    it, and ``meanwhile`` plays what someone else does while the call is out."""

    def __init__(self, meanwhile):
        self.meanwhile = meanwhile

    def next_action(self, view):
        from runtime.llm.actions import Reply

        self.meanwhile()
        return Reply("Done.")


def test_a_task_canceled_while_its_model_is_asked_stays_canceled(agents, make_agent, monkeypatch):
    from runtime.kernel.task_models import TaskEvent
    from runtime.turn.cancel import task_cancel

    agent = make_agent("hosted", [{"reply": "never used"}])
    task = send(agents.a, "hosted", "go")

    def cancel():
        task_cancel(
            tenant=agents.a.tenant, agent=agent, subject=agents.a.subject, task_id=task.public_id
        )

    monkeypatch.setattr("runtime.turn.runner.model_for", lambda agent: HostedModel(cancel))
    turn_run(task_pk=task.pk, worker_id="w1")

    task.refresh_from_db()
    # The run found the row no longer its own when it came back, and wrote nothing: no
    # reply, no COMPLETED event after the cancel's.
    assert task.state == TaskState.CANCELED
    assert task.status_message["parts"][0]["text"] == "Canceled by the caller."
    assert not [e for e in task.transcript if e["type"] == "action"]
    states = list(
        TaskEvent.objects.filter(task=task, kind="status")
        .order_by("seq")
        .values_list("state", flat=True)
    )
    assert states == [TaskState.SUBMITTED, TaskState.WORKING, TaskState.CANCELED]


def test_a_turn_taken_over_while_its_model_is_asked_is_left_to_the_new_run(
    agents, make_agent, monkeypatch
):
    from runtime.turn.claim import turn_claim

    make_agent("hosted", [{"reply": "never used"}])
    task = send(agents.a, "hosted", "go")
    taken = {}

    def taken_over():
        # The lease ran out (say the call outlasted TURN_HOLD_MAX_SECONDS) and the sweep gave
        # the turn to another worker, which claimed it: a new run id.
        from django.utils import timezone

        from runtime.kernel.task_models import Task

        Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now())
        taken["task"] = turn_claim(task_pk=task.pk, worker_id="w2")

    monkeypatch.setattr("runtime.turn.runner.model_for", lambda agent: HostedModel(taken_over))
    turn_run(task_pk=task.pk, worker_id="w1")

    task.refresh_from_db()
    assert taken["task"] is not None
    # The first run's reply was not written over the second run's claim.
    assert (task.state, task.lease_owner, task.run_id) == (
        TaskState.WORKING,
        "w2",
        taken["task"].run_id,
    )
    assert not [e for e in task.transcript if e["type"] == "action"]
