"""A tool server's elicitation becomes a question, with a real MCP server
built with the official ``mcp`` package (tests.mcp_servers: FastMCP with sessions, on a
local port) whose tools ask a person something in the middle of a call and say what they
got back. The turn runs in a thread of its own, as in a worker, while the test answers as
the caller in band or as an operator on the question's page; the call stays open meanwhile,
the task keeps its lease, and the answer reaches the server."""

import json
import threading

import pytest
from django.db import connection
from django.urls import reverse

from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.errors import InvalidParams
from runtime.kernel.task_models import Task, TaskState
from runtime.kernel.wakeups import task_announcements_heard, task_changed
from runtime.turn.cancel import task_cancel
from runtime.turn.claim import turn_claim, turns_to_sweep
from runtime.turn.runner import turn_run
from tenants.tokens import api_token_create
from tests.a2a_client import assert_error, rpc
from tests.core import REPORT_RESULT, in_band, reply, run, send, status_text
from tests.mcp_servers import BOOKING_FORM, mcp_tool_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]
WORKER = "worker-1"


@pytest.fixture(autouse=True)
def _short_lease(settings):
    # A short lease: the question's wait renews it every second, and a run a failed test
    # leaves behind stops as soon as its lease is taken from it (``_runs_stopped``).
    settings.TURN_LEASE_SECONDS = 3


RUNS: list["Worker"] = []


@pytest.fixture(autouse=True)
def _runs_stopped():
    """The test's runs end with it: one still waiting loses its lease and stops."""
    yield
    for worker in RUNS:
        if worker.thread.is_alive():
            Task.objects.filter(pk=worker.task.pk).update(lease_owner="", lease_expires_at=None)
            worker.thread.join(30)
    RUNS.clear()


@pytest.fixture
def booker(agents, make_agent, stateful_mcp):
    mcp_tool_server(agents.a.tenant, stateful_mcp.url, "tables", discover=True)
    stateful_mcp.initializes = 0

    def make(tool="book", **args):
        return make_agent(
            "booker",
            [
                {"call": {"server": "tables", "tool": tool, "args": args}},
                {"call": {"server": "tables", "tool": "add", "args": {"a": 1, "b": 2}}},
                *REPORT_RESULT,
            ],
            tools=[{"server": "tables"}],
            tool_policy={"tables": "allow"},
        )

    return make


class Worker:
    """A run of the turn in a thread of its own, as a Celery worker's."""

    def __init__(self, task: Task, worker_id: str = WORKER):
        self.task, self.error = task, None
        self.thread = threading.Thread(target=self._run, args=(worker_id,), daemon=True)
        self.thread.start()
        RUNS.append(self)

    def _run(self, worker_id: str) -> None:
        try:
            turn_run(task_pk=self.task.pk, worker_id=worker_id)
        except BaseException as exc:  # handed to the test's thread
            self.error = exc
        finally:
            connection.close()

    def join(self) -> Task:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the turn did not finish"
        if self.error:
            raise self.error
        self.task.refresh_from_db()
        return self.task


def question_of(task: Task) -> Interaction:
    return wait_for(
        lambda: Interaction.objects.filter(task=task, state=Interaction.State.OPEN).first(),
        "the tool server's question",
    )


def effects(task: Task) -> list[tuple[str, str]]:
    return [(e.tool, e.state) for e in Effect.objects.filter(task=task).order_by("step")]


def received(task: Task) -> dict:
    """What the booking tool said it got (its result, as the model got it)."""
    effect = Effect.objects.get(task=task, tool__in=("book", "confirm", "open_page"))
    return json.loads(effect.outcome["result"]["text"])["received"]


ANSWER = {"date": "2026-05-01", "guests": 4, "seating": "out", "extras": ["cake"]}


def test_an_elicitation_is_a_question_answered_in_band_and_the_answer_reaches_the_server(
    agents, booker, stateful_mcp
):
    booker(place="Chez Nous")
    task = send(agents.a, "booker", "book a table")
    worker = Worker(task)
    question = question_of(task)
    task.refresh_from_db()

    # The question: the server's message, its schema as the form (interactions/v1).
    assert task.state == TaskState.INPUT_REQUIRED
    assert question.kind == Interaction.Kind.QUESTION
    assert question.prompt == "Booking at Chez Nous: which day, and for how many?"
    opened = task.status_ext[ext.INTERACTIONS]
    assert opened["interactionId"] == question.public_id and opened["kind"] == "question"
    form = opened["detail"]["form"]
    assert opened["detail"]["server"] == "tables" and opened["detail"]["tool"] == "book"
    assert form["required"] == ["date", "guests"]
    assert form["properties"]["guests"] == {
        "type": "integer",
        "title": "Guests",
        "minimum": 1,
        "maximum": 12,
    }
    assert form["properties"]["seating"]["oneOf"][1] == {"const": "out", "title": "Outside"}
    assert form["properties"]["extras"]["items"]["anyOf"][0] == {"const": "cake", "title": ""}
    assert form == {**form, "type": "object"} and set(form["properties"]) == set(
        BOOKING_FORM["properties"]
    )
    # The call is open, and the run keeps the turn: no sweep, no second run.
    assert effects(task) == [("book", Effect.State.SENDING)]
    assert task.lease_owner == WORKER
    assert task.pk not in turns_to_sweep()
    assert turn_claim(task_pk=task.pk, worker_id="worker-2") is None

    reply(task, "here", metadata=in_band(question, value=ANSWER))
    task = worker.join()
    assert task.state == TaskState.COMPLETED, status_text(task)
    assert stateful_mcp.elicited == [{"action": "accept", "content": ANSWER}]
    assert received(task) == {"action": "accept", "content": ANSWER}
    assert effects(task) == [("book", Effect.State.SUCCEEDED), ("add", Effect.State.SUCCEEDED)]
    # One session for the turn's two calls, the question in between.
    assert stateful_mcp.initializes == 1
    question.refresh_from_db()
    assert question.state == Interaction.State.ANSWERED and question.answered_via == "inband"
    assert question.answer == {"value": {"action": "accept", "content": ANSWER}}


def test_an_answer_that_does_not_fit_the_form_is_refused_and_the_question_stays_open(
    agents, booker, stateful_mcp
):
    booker(place="Chez Nous")
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question = question_of(task)
    with pytest.raises(InvalidParams) as refused:
        reply(task, "x", metadata=in_band(question, value={"date": "May", "guests": 40}))
    assert refused.value.field == "value.date" and "date" in refused.value.description
    with pytest.raises(InvalidParams) as refused:
        reply(task, "x", metadata=in_band(question, value={"date": "2026-05-01"}))
    assert refused.value.field == "value.guests" and refused.value.description == "is required"
    question.refresh_from_db()
    assert question.state == Interaction.State.OPEN and stateful_mcp.elicited == []

    reply(task, "no", metadata=in_band(question, value={"action": "decline"}))
    task = worker.join()
    assert stateful_mcp.elicited == [{"action": "decline", "content": None}]
    assert received(task) == {"action": "decline", "content": None}


def test_an_answer_naming_the_question_in_metadata_may_carry_its_value_as_the_data_part(
    agents, booker, stateful_mcp
):
    booker(place="Chez Nous")
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question = question_of(task)
    # Named, but with nothing to answer: refused, the question stays open.
    with pytest.raises(InvalidParams) as refused:
        reply(task, None, parts=[{"text": " "}], metadata=in_band(question))
    assert "needs value, or the answer in a data or text part" in refused.value.description
    # A value that does not fit the form is refused as it is in ``value``.
    with pytest.raises(InvalidParams) as refused:
        reply(task, None, parts=[{"data": {"date": "May"}}], metadata=in_band(question))
    assert refused.value.field == "value.date"
    question.refresh_from_db()
    assert question.state == Interaction.State.OPEN and stateful_mcp.elicited == []
    reply(task, None, parts=[{"data": ANSWER}], metadata=in_band(question))
    task = worker.join()
    assert stateful_mcp.elicited == [{"action": "accept", "content": ANSWER}]
    question.refresh_from_db()
    assert question.answer == {"value": {"action": "accept", "content": ANSWER}}


def test_an_answer_from_a_caller_who_is_not_the_tasks_is_refused_and_changes_nothing(
    agents, booker, stateful_mcp, make_agent, client
):
    """Another subject of the same tenant, and another tenant's caller (on its own agent of
    the same name), name the task and the question: the task is not theirs to find
    (TaskNotFound, -32001), the question stays open and the server hears nothing; the
    task's own caller then answers."""
    booker(place="Chez Nous")
    make_agent("booker", [{"reply": "hi"}], tenant=agents.b.tenant)
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question = question_of(task)
    _, stranger = api_token_create(
        tenant=agents.a.tenant, subject="partner:someone-else", name="another partner"
    )
    answer = {
        "messageId": "m-stranger",
        "role": "ROLE_USER",
        "taskId": task.public_id,
        "contextId": task.wire_context_id,
        "parts": [{"data": ANSWER}],
        "metadata": in_band(question, value=ANSWER),
    }
    for path, token in (
        ("/a2a/acme/booker", stranger),
        ("/a2a/globex/booker", agents.b.token),
    ):
        response = rpc(client, path, "SendMessage", {"message": answer}, token=token)
        assert_error(response, -32001, "TASK_NOT_FOUND")
    # On this tenant's endpoint, another tenant's token finds no agent at all.
    response = rpc(
        client, "/a2a/acme/booker", "SendMessage", {"message": answer}, token=agents.b.token
    )
    assert_error(response, -32000, "AGENT_NOT_FOUND", status=404)
    # Nor does another tenant's operator find the question, on its page or over REST.
    page = reverse("approvals:interaction", args=[question.public_id])
    theirs = agents.b.client_for(agents.b.operator)
    assert theirs.get(page).status_code == 404
    sent = {"decision": "answer", "form-date": "2026-05-01", "form-guests": "2"}
    assert theirs.post(page, sent).status_code == 404
    rest = theirs.post(
        f"/api/v1/interactions/{question.public_id}/answer",
        {"value": ANSWER},
        content_type="application/json",
    )
    assert rest.status_code == 404
    question.refresh_from_db()
    task.refresh_from_db()
    assert question.state == Interaction.State.OPEN and question.answer is None
    assert task.state == TaskState.INPUT_REQUIRED and stateful_mcp.elicited == []
    assert not any(m.get("messageId") == "m-stranger" for m in task.history)

    reply(task, None, parts=[{"data": ANSWER}], metadata=in_band(question, value=ANSWER))
    worker.join()
    assert stateful_mcp.elicited == [{"action": "accept", "content": ANSWER}]


def test_an_operator_answers_the_form_on_the_question_page(agents, booker, stateful_mcp):
    booker(place="Chez Nous")
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question = question_of(task)
    client = agents.a.client_for(agents.a.operator)
    url = reverse("approvals:interaction", args=[question.public_id])

    page = client.get(url).content.decode()
    assert "tables / book asks, during a call" in page
    assert 'name="form-date"' in page and 'type="date"' in page
    assert "Guests (required)" in page and 'name="form-guests"' in page
    assert '<option value="out">Outside</option>' in page
    assert 'name="form-vegetarian"' in page and 'type="checkbox"' in page
    assert 'value="flowers"' in page and 'id="elicitation-decline"' in page

    # A bad value is put on its field, and nothing is decided.
    bad = client.post(url, {"decision": "answer", "form-date": "2026-05-01", "form-guests": "40"})
    assert bad.status_code == 400
    assert "Ensure this value is less than or equal to 12" in bad.content.decode()
    question.refresh_from_db()
    assert question.state == Interaction.State.OPEN

    sent = client.post(
        url,
        {
            "decision": "answer",
            "form-date": "2026-05-01",
            "form-guests": "2",
            "form-seating": "in",
            "form-vegetarian": "on",
            "form-extras": ["cake", "music"],
        },
    )
    assert sent.status_code == 302
    task = worker.join()
    content = {
        "date": "2026-05-01",
        "guests": 2,
        "seating": "in",
        "vegetarian": True,
        "extras": ["cake", "music"],
    }
    assert stateful_mcp.elicited == [{"action": "accept", "content": content}]
    assert received(task) == {"action": "accept", "content": content}
    question.refresh_from_db()
    assert question.answered_by == agents.a.operator.subject and question.answered_via == "page"


def test_declined_on_the_page_the_server_hears_decline(agents, booker, stateful_mcp):
    booker(place="Chez Nous")
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question = question_of(task)
    client = agents.a.client_for(agents.a.operator)
    url = reverse("approvals:interaction", args=[question.public_id])
    assert client.post(url, {"decision": "decline"}).status_code == 302
    task = worker.join()
    assert received(task) == {"action": "decline", "content": None}
    assert task.state == TaskState.COMPLETED


def test_a_question_nobody_answers_in_time_expires_and_the_server_hears_cancel(
    agents, booker, stateful_mcp, settings
):
    settings.MCP_ELICITATION_TIMEOUT_SECONDS = 1
    booker(place="Chez Nous")
    task = run(send(agents.a, "booker", "book"), worker_id=WORKER)  # the wait runs out
    assert task.state == TaskState.COMPLETED, status_text(task)
    assert stateful_mcp.elicited == [{"action": "cancel", "content": None}]
    assert received(task) == {"action": "cancel", "content": None}
    question = Interaction.objects.get(task=task)
    assert question.state == Interaction.State.EXPIRED and question.answered_via == "expiry"
    # The turn went on to its next call, on the same session.
    assert effects(task) == [("book", Effect.State.SUCCEEDED), ("add", Effect.State.SUCCEEDED)]
    assert stateful_mcp.initializes == 1


def test_a_call_that_asks_twice_opens_two_questions_in_turn(agents, booker, stateful_mcp):
    booker(tool="confirm")
    task = send(agents.a, "booker", "confirm")
    worker = Worker(task)
    first = question_of(task)
    assert first.prompt == "Sure?"
    reply(task, "yes", metadata=in_band(first, value={"ok": True}))
    second = wait_for(
        lambda: (
            Interaction.objects.filter(task=task, state=Interaction.State.OPEN)
            .exclude(pk=first.pk)
            .first()
        ),
        "the second question",
    )
    assert second.prompt == "Really sure?"
    reply(task, "no")  # plain text: a form of one boolean field reads "no" as false
    task = worker.join()
    assert stateful_mcp.elicited == [
        {"action": "accept", "content": {"ok": True}},
        {"action": "accept", "content": {"ok": False}},
    ]


def test_a_page_to_open_is_a_question_the_person_accepts_or_declines(agents, booker, stateful_mcp):
    booker(tool="open_page")
    task = send(agents.a, "booker", "pay")
    worker = Worker(task)
    question = question_of(task)
    assert question.detail["elicitation"] == "url"
    assert question.detail["url"] == "https://bank.example.test/consent?id=7"
    page = agents.a.client_for(agents.a.operator).get(
        reverse("approvals:interaction", args=[question.public_id])
    )
    assert "https://bank.example.test/consent?id=7" in page.content.decode()
    reply(task, "done", metadata=in_band(question, approved=True))
    worker.join()
    assert stateful_mcp.elicited == [{"action": "accept"}]


def test_a_worker_that_loses_the_turn_mid_question_leaves_the_call_uncertain(
    agents, booker, stateful_mcp, settings
):
    """The worker's lease lapses while it waits (as when it died): it stops, and the call's
    outcome is lost. The answer resumes the turn in another worker, which finds the call
    sent and not closed: uncertain, for an operator, as after any crash mid-call."""
    settings.TURN_LEASE_SECONDS = 3  # the wait renews it every second
    booker(place="Chez Nous")
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question = question_of(task)
    Task.objects.filter(pk=task.pk).update(lease_owner="", lease_expires_at=None)
    worker.join()  # it found the lease gone, and stopped
    reply(task, "here", metadata=in_band(question, value=ANSWER))
    task = run(task, worker_id="worker-2")
    assert effects(task) == [("book", Effect.State.UNCERTAIN)]
    assert task.status_ext[ext.EFFECTS]["uncertain"]
    assert task.state == TaskState.WORKING


def test_a_task_canceled_mid_question_stops_the_run_and_the_server_hears_cancel(
    agents, booker, stateful_mcp
):
    booker(place="Chez Nous")
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question = question_of(task)
    task_cancel(tenant=task.tenant, agent=task.agent, subject=task.subject, task_id=task.public_id)
    task = worker.join()  # the wait found the question closed, and the run stopped
    assert task.state == TaskState.CANCELED
    question.refresh_from_db()
    assert question.state == Interaction.State.CANCELED
    # The run's sessions closed: the open question was answered cancel first.
    assert wait_for(lambda: stateful_mcp.elicited, "the server to hear it") == [
        {"action": "cancel", "content": None}
    ]


def test_the_cancel_reaches_the_server_before_the_session_ends_however_slow_the_answer(
    agents, booker, stateful_mcp
):
    # A busy worker process (or a new connection) makes the answer's POST slower than the
    # session's DELETE: here the server gets the answer only once the session has ended,
    # if the run ends it first, and then never hears it.
    server = stateful_mcp
    server.slow_answers = 1.0
    booker(place="Chez Nous")
    ended = server.session_ends  # the refresh's session
    task = send(agents.a, "booker", "book")
    worker = Worker(task)
    question_of(task)
    task_cancel(tenant=task.tenant, agent=task.agent, subject=task.subject, task_id=task.public_id)
    assert worker.join().state == TaskState.CANCELED
    assert server.session_ends == ended + 1  # the run's session ended as the run did
    assert server.elicited == [{"action": "cancel", "content": None}]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY")
def test_the_wait_for_an_answer_is_woken_by_the_tasks_announcement(agents, booker):
    booker()
    task = send(agents.a, "booker", "book")
    with task_announcements_heard() as heard:
        task_changed(task)  # what every answer does as it commits
        assert heard(task.pk, 60) is True
