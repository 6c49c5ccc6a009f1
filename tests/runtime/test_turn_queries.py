"""What a turn costs the database (issue 9, item 2): one transaction to claim, one to finish,
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

from runtime.agentfile import AgentSpec
from runtime.models import Effect, TaskState
from runtime.services.agents import agent_upsert
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
def test_a_turn_that_answers_at_once_is_one_transaction_of_seven_statements(agents, make_agent):
    make_agent("greeter", [{"reply": "Hello, {{ text }}."}])
    task = send(agents.a, "greeter", "world")

    cost = turn_cost(task)

    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED
    # An in-process model waits on nothing: claim, reply and finish commit together.
    assert cost.transactions == 1, cost
    # The claim (its locked read, which also asks whether an earlier turn of the context is
    # still open), two status events (WORKING, COMPLETED), the task's push configs (read
    # once for both), the context's next queued turn, one save of the row, one NOTIFY.
    assert len(cost.statements) == 7, cost
    assert cost.count("UPDATE") == 1 and cost.count("SELECT pg_notify") == 1, cost


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
    # Claim: locked read, WORKING event, its push configs, save, NOTIFY. The model's
    # credential (read while the turn's connection is given back). Finish: the row's lock
    # (still this run's?), the model's price, COMPLETED event, its push configs, the
    # context's next queued turn, save, NOTIFY.
    assert len(cost.statements) == 13, cost
    assert cost.count("UPDATE") == 2 and cost.count("SELECT pg_notify") == 2, cost


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
    # The demo deploy server's own two statements (is this effect recorded? record it) are
    # the tool's, not the turn's.
    tool = sum(1 for s in cost.statements if "runtime_demorecord" in s)
    assert tool == 2, cost
    # Take: locked read, the effect, its interaction, effect approved, the approval's receipt
    # (does it still bind? issue 13), effect sending, save.
    # Finish: the row's lock, effect closed, three status events, the task's push configs,
    # the context's next queued turn, save, NOTIFY.
    assert len(cost.statements) - tool == 16, cost
