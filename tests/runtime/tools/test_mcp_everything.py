"""The reference MCP server ``everything`` (the npm package @modelcontextprotocol/server-everything,
installed by ``make install`` into tests/mcp_everything) over streamable HTTP on a local port:
Countersign declares elicitation, so the server offers it its elicitation tools; a turn's
calls share one session (the server logs each session it opens and ends); its
``trigger-elicitation-request`` becomes a question with the server's form, and the caller's
answer reaches the server, which says what it got."""

import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from django.db import connection

from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task, TaskState
from runtime.turn.runner import turn_run
from tests.core import REPORT_RESULT, in_band, reply, send, status_text
from tests.mcp_servers import free_port, mcp_tool_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]

SERVER = (
    Path(__file__).resolve().parents[2]
    / "mcp_everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)


@pytest.fixture(autouse=True)
def _short_lease(settings):
    settings.TURN_LEASE_SECONDS = 3


class Everything:
    """The reference server in a process of its own; ``lines``: what it logged."""

    def __init__(self):
        assert shutil.which("node"), "Node.js runs the reference server (make install)"
        assert SERVER.exists(), f"{SERVER} is missing: run make install"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            ["node", str(SERVER), "streamableHttp"],
            env={"PORT": str(self.port), "PATH": "/usr/bin:/bin:/usr/local/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: any("listening on port" in line for line in self.lines), "the server")

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def count(self, text: str) -> int:
        return sum(1 for line in self.lines if text in line)

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def everything():
    server = Everything()
    yield server
    server.stop()


@pytest.fixture
def reference(agents, everything):
    return mcp_tool_server(agents.a.tenant, everything.url, "everything", discover=True)


def test_the_server_offers_its_elicitation_tools_to_countersign(reference):
    names = {tool["name"] for tool in reference.tools}
    # Its 13 tools for any client, and the 2 for a client that declares elicitation.
    assert len(names) == 15
    assert {"echo", "get-sum", "trigger-elicitation-request", "trigger-url-elicitation"} <= names
    # Sampling is not declared, so the server keeps its sampling tools to itself.
    assert "trigger-sampling-request" not in names


def test_one_session_serves_the_turn_and_the_elicitation_answer_reaches_the_server(
    agents, make_agent, everything, reference
):
    make_agent(
        "explorer",
        [
            {"call": {"server": "everything", "tool": "echo", "args": {"message": "hi"}}},
            {"call": {"server": "everything", "tool": "trigger-elicitation-request", "args": {}}},
            {"call": {"server": "everything", "tool": "get-sum", "args": {"a": 2, "b": 3}}},
            *REPORT_RESULT,
        ],
        tools=[{"server": "everything"}],
        tool_policy={"everything": "allow"},
    )
    opened_before = everything.count("Session initialized with ID")
    ended_before = everything.count("Received session termination request")
    task = send(agents.a, "explorer", "explore")
    failure = []

    def work():
        try:
            turn_run(task_pk=task.pk, worker_id="worker-1")
        except BaseException as exc:
            failure.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        question = wait_for(
            lambda: Interaction.objects.filter(task=task, state=Interaction.State.OPEN).first(),
            "the server's question",
        )
        task.refresh_from_db()
        assert task.state == TaskState.INPUT_REQUIRED
        assert question.prompt == "Please provide inputs for the following fields:"
        form = task.status_ext[ext.INTERACTIONS]["detail"]["form"]
        assert form["required"] == ["name"]
        assert form["properties"]["email"]["format"] == "email"
        assert form["properties"]["integer"]["minimum"] == 1
        assert {"const": "hero-2", "title": "Green Lantern"} in form["properties"][
            "titledSingleSelectEnum"
        ]["oneOf"]
        assert {"const": "pet-2", "title": "Dogs"} in form["properties"]["legacyTitledEnum"][
            "oneOf"
        ]
        reply(
            task,
            "here you are",
            metadata=in_band(
                question,
                value={"name": "Ada Lovelace", "check": True, "integer": 7, "email": "ada@x.test"},
            ),
        )
    finally:
        worker.join(30)
        if worker.is_alive():
            Task.objects.filter(pk=task.pk).update(lease_owner="")
            worker.join(30)
    assert not failure
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED, status_text(task)
    elicited = Effect.objects.get(task=task, tool="trigger-elicitation-request")
    text = elicited.outcome["result"]["text"]
    assert "User provided the requested information" in text
    assert "- Name: Ada Lovelace" in text and "- Favorite Integer: 7" in text
    assert "- Email: ada@x.test" in text
    assert status_text(task).startswith("ok: ") and "5" in status_text(task)
    # Three calls and a question, one session, closed at the end.
    assert everything.count("Session initialized with ID") - opened_before == 1
    wait_for(
        lambda: everything.count("Received session termination request") - ended_before == 1,
        "the session's end",
    )
