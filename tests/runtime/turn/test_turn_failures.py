"""Turns are never stuck: an error that can never succeed fails the turn
at once, with a reason for the partner and the task page; any other is retried at most
TURN_MAX_ATTEMPTS times in all; and every line the turn logs names its task and tenant."""

import logging

import pytest
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import Task, TaskState
from runtime.turn.runner import turn_run
from tests.a2a_endpoint.test_files import FileServer
from tests.agent_server import AgentServer
from tests.core import send, status_text
from tests.llm_stub import LLMStub, call, completion

pytestmark = pytest.mark.django_db(transaction=True)

READER = {"provider": "scripted", "script": [{"steps": [{"reply": "Read: {{ files.0.text }}"}]}]}


def sweep_again(task: Task) -> None:
    """What the sweep does for a turn whose worker died: its lease runs out, another claims."""
    Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now())
    turn_run(task_pk=task.pk, worker_id="w-next")


def failed_with(task: Task, partner_text: str) -> Task:
    task.refresh_from_db()
    assert task.state == TaskState.FAILED, (task.state, task.status_message)
    assert partner_text in status_text(task)
    return task


class CountingFileServer(FileServer):
    def __init__(self, routes):
        super().__init__(routes)
        self.hits = 0
        handler = self.server.RequestHandlerClass
        do_get = handler.do_GET

        def counted(h):
            self.hits += 1
            do_get(h)

        handler.do_GET = counted


@pytest.mark.usefixtures("postgres_only")  # PostgreSQL refuses NUL in JSON
def test_a_url_part_whose_file_holds_a_nul_byte_fails_the_turn_at_once(agents, settings, caplog):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    Agent.objects.create(
        tenant=agents.a.tenant, slug="reader", name="Reader", description="r", model=READER
    )
    server = CountingFileServer({"/nul.txt": ("text/plain", b"before\x00after")})
    try:
        url = server.url("/nul.txt")
        task = send(
            agents.a,
            "reader",
            "read",
            parts=[{"text": "read"}, {"url": url, "mediaType": "text/plain"}],
        )
        with caplog.at_level(logging.INFO):
            turn_run(task_pk=task.pk, worker_id="w1")  # no exception escapes to Celery
        task = failed_with(task, "cannot be stored")
        sweep_again(task)  # a failed turn is not claimed again: the file is not fetched again
    finally:
        server.stop()
    assert server.hits == 1
    # The task page shows the reason (the status message); the admin finds the error itself
    # on the transcript's last entry.
    last = task.transcript[-1]
    assert last["action"]["kind"] == "fail" and "DataError" in last["action"]["error"]
    lines = [r for r in caplog.records if r.name.startswith("runtime")]
    assert lines and all((r.task_id, r.tenant) == (task.public_id, "acme") for r in lines)


@pytest.fixture
def byo(agents, settings, monkeypatch):
    """An http agent (provider: http) on a loopback server of the test's."""
    import base64
    import secrets

    from runtime import llm
    from runtime.agents.agentfile import AgentSpec, agent_upsert

    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    settings.CREDENTIAL_ENV_NAMES = [*settings.CREDENTIAL_ENV_NAMES, "BYO_SECRET"]
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    monkeypatch.setenv("BYO_SECRET", secret)
    monkeypatch.setattr(llm.http_agent, "RETRY_BASE_SECONDS", 0.01)
    server = AgentServer(secret).start()
    spec = AgentSpec(
        slug="byo",
        name="Bring your own",
        description="An agent behind a URL.",
        model={"provider": "http", "url": server.url, "secret": "BYO_SECRET", "timeout": 5},
    )
    agent_upsert(tenant=agents.a.tenant, spec=spec)
    yield server
    server.stop()


@pytest.mark.usefixtures("postgres_only")  # PostgreSQL refuses NUL in JSON
def test_an_http_agents_reply_holding_a_nul_character_fails_the_turn_at_once(agents, byo):
    byo.script = [{"action": "reply", "text": "half\u0000way"}] * 3
    task = send(agents.a, "byo", "hello")

    turn_run(task_pk=task.pk, worker_id="w1")

    failed_with(task, "cannot be stored")
    sweep_again(task)
    assert len(byo.requests) == 1  # asked once, not on every retry


def test_an_http_agents_deeply_nested_reply_fails_the_turn_at_once(agents, byo):
    deep = b'{"action": "reply", "text": "x", "metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    byo.script = [(200, deep)] * 3
    task = send(agents.a, "byo", "hello")

    turn_run(task_pk=task.pk, worker_id="w1")

    task.refresh_from_db()
    assert task.state == TaskState.FAILED, task.status_message
    sweep_again(task)
    assert len(byo.requests) == 1


def test_model_tool_arguments_sent_as_an_object_do_not_stick_the_turn(
    agents, settings, monkeypatch
):
    from runtime.agents.agentfile import AgentSpec, agent_upsert
    from tests.core import DEPLOY_TOOL

    stub = LLMStub().start()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "q" * 32)
        settings.OPENAI_BASE_URL = stub.url
        # The arguments as an object, not the JSON string the API documents.
        as_object = {
            **call("deploy__deploy_build", {}),
            "function": {
                "name": "deploy__deploy_build",
                "arguments": {"build": "b-1", "environment": "staging"},
            },
        }
        stub.play(completion(calls=[as_object]), completion("Done."))
        spec = AgentSpec(
            slug="hosted",
            name="hosted",
            description="An agent on a hosted model.",
            model={"provider": "openai", "model": "gpt-4o-mini"},
            tools=[DEPLOY_TOOL],
            tool_policy={"deploy/deploy_build": "allow"},
        )
        agent_upsert(tenant=agents.a.tenant, spec=spec)
        task = send(agents.a, "hosted", "deploy b-1 to staging")

        turn_run(task_pk=task.pk, worker_id="w1")
    finally:
        stub.stop()
    task.refresh_from_db()
    assert (task.state, status_text(task)) == (TaskState.COMPLETED, "Done.")


class Crashing:
    """A model with a bug: every ask raises (not an error the turn can do anything about)."""

    in_process = True

    def __init__(self):
        self.asked = 0

    def next_action(self, view):
        self.asked += 1
        raise RuntimeError("a bug in a provider")


def test_a_turn_that_keeps_crashing_fails_after_turn_max_attempts(
    agents, make_agent, monkeypatch, settings, caplog
):
    settings.TURN_MAX_ATTEMPTS = 3
    make_agent("crasher", [{"reply": "never used"}])
    task = send(agents.a, "crasher", "go")
    model = Crashing()
    monkeypatch.setattr("runtime.turn.runner.model_for", lambda agent: model)

    with caplog.at_level(logging.INFO):
        turn_run(task_pk=task.pk, worker_id="w1")
        for _ in range(5):  # the sweep, again and again
            task.refresh_from_db()
            if task.state == TaskState.FAILED:
                break
            sweep_again(task)

    assert model.asked == 3
    failed_with(task, "3 attempts")
    crashed = [r for r in caplog.records if r.getMessage() == "the turn crashed"]
    assert len(crashed) == 3 and all(r.exc_info for r in crashed)
    lines = [r for r in caplog.records if r.name.startswith("runtime")]
    assert all((r.task_id, r.tenant) == (task.public_id, "acme") for r in lines)


def test_a_paused_turn_resumed_starts_its_attempts_afresh(agents, settings):
    from tests.core import decide, open_interaction, start

    settings.TURN_MAX_ATTEMPTS = 1
    task = start(agents.a, "deployer", "deploy build 2026.10.06-1 to staging")  # one attempt
    decide(open_interaction(task), approved=True)

    turn_run(task_pk=task.pk, worker_id="w1")  # a second claim, of a run that goes on

    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED


def test_a_turn_whose_worker_died_is_run_again_within_the_cap(agents, make_agent, settings):
    from runtime.turn.claim import turn_claim

    settings.TURN_MAX_ATTEMPTS = 2
    make_agent("greeter", [{"reply": "Hello."}])
    task = send(agents.a, "greeter", "hi")
    assert turn_claim(task_pk=task.pk, worker_id="dead") is not None  # and it died

    sweep_again(task)

    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED


def test_a_crash_before_the_claim_commits_is_counted_too(agents, make_agent, monkeypatch, settings):
    # The claim's transaction is the first steps' too: a crash there rolls the claim back,
    # and the attempt must still count, or the turn would be retried forever.
    settings.TURN_MAX_ATTEMPTS = 2
    make_agent("crasher", [{"reply": "never used"}])
    task = send(agents.a, "crasher", "go")
    model = Crashing()
    monkeypatch.setattr("runtime.turn.runner.model_for", lambda agent: model)

    for worker in ("w1", "w2", "w3"):
        turn_run(task_pk=task.pk, worker_id=worker)

    assert model.asked == 2
    failed_with(task, "2 attempts")


def test_the_crash_of_a_claim_that_never_read_its_task_still_names_it(
    agents, make_agent, monkeypatch, caplog
):
    make_agent("greeter", [{"reply": "Hello."}])
    task = send(agents.a, "greeter", "hi")

    def broken(task_pk, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr("runtime.turn.claim.task_claim_read", broken)
    with caplog.at_level(logging.ERROR):
        turn_run(task_pk=task.pk, worker_id="w1")

    [crashed] = [r for r in caplog.records if r.getMessage() == "the turn crashed"]
    assert (crashed.task_id, crashed.tenant) == (task.public_id, "acme")


def test_a_tool_schema_whose_ref_resolves_to_nothing_does_not_stick_the_turn(agents, make_agent):
    from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step

    dangling = {
        **DEPLOY_TOOL,
        "schema": {
            "type": "object",
            "properties": {"build": {"$ref": "#/definitions/missing"}},
        },
    }
    make_agent(
        "dangling",
        [deploy_step(), *REPORT_RESULT],
        tools=[dangling],
        tool_policy={"deploy/deploy_build": "allow"},
    )
    task = send(agents.a, "dangling", "go")

    turn_run(task_pk=task.pk, worker_id="w1")

    task.refresh_from_db()
    # Failed at once, or (should the schema's check come to say so) the model told; never a
    # crash that the sweep retries.
    assert task.state in (TaskState.FAILED, TaskState.COMPLETED), task.state
    if task.state == TaskState.FAILED:
        assert "$ref" in status_text(task)


def test_which_errors_can_never_succeed():
    import psycopg.errors
    import referencing.exceptions
    from django.db import DataError, IntegrityError, OperationalError

    from runtime.turn.outcomes import cannot_succeed

    def caused(outer, inner):
        try:
            try:
                raise inner
            except Exception as exc:
                raise outer from exc
        except Exception as exc:
            return exc

    assert cannot_succeed(DataError("NUL")) is not None
    assert cannot_succeed(RecursionError()) is not None
    assert cannot_succeed(referencing.exceptions.Unresolvable(ref="#/x")) is not None
    assert (
        cannot_succeed(caused(IntegrityError("null"), psycopg.errors.NotNullViolation()))
        is not None
    )
    # A row another writer made first: a retry reads it.
    assert cannot_succeed(caused(IntegrityError("dup"), psycopg.errors.UniqueViolation())) is None
    assert cannot_succeed(OperationalError("the server went away")) is None
    assert cannot_succeed(RuntimeError("a bug")) is None
