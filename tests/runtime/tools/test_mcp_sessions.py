"""One MCP session per tool server per run of a turn, with a stateful
server built with the official ``mcp`` package (FastMCP with sessions, on a local port) that
counts its initializations and session ends: a run's calls share one session (the server
keeps its state between them), the session closes when the run stops, and a resumed turn
opens a new one."""

import pytest

from runtime.decisions.decision_models import Effect
from tests.core import REPORT_RESULT, decide, open_interaction, run, start, status_text
from tests.mcp_servers import mcp_tool_server

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]


@pytest.fixture
def state(agents, stateful_mcp):
    row = mcp_tool_server(agents.a.tenant, stateful_mcp.url, "state", discover=True)
    stateful_mcp.initializes = stateful_mcp.session_ends = (
        0  # discovery's own session does not count
    )
    return row


def call(tool: str, **args) -> dict:
    return {"call": {"server": "state", "tool": tool, "args": args}}


def results(task) -> list:
    return [
        (e.tool, e.outcome.get("result")) for e in Effect.objects.filter(task=task).order_by("step")
    ]


def test_a_runs_calls_share_one_session_which_keeps_its_state(
    agents, make_agent, stateful_mcp, state
):
    make_agent(
        "counting",
        [call("counter"), call("add", a=2, b=3), call("counter"), *REPORT_RESULT],
        tools=[{"server": "state"}],
        tool_policy={"state": "allow"},
    )
    task = start(agents.a, "counting", "count")
    assert task.state == "TASK_STATE_COMPLETED"
    # One initialize for three calls, and the server's per-session state carried over.
    assert stateful_mcp.initializes == 1
    assert results(task) == [
        ("counter", {"result": 1}),
        ("add", {"result": 5}),
        ("counter", {"result": 2}),
    ]
    assert status_text(task) == 'ok: {"result": 2}'
    # Closed when the run stopped: the session's DELETE reached the server.
    assert stateful_mcp.session_ends == 1


def test_a_resumed_turn_opens_a_new_session(agents, make_agent, stateful_mcp, state):
    make_agent(
        "pausing",
        [call("counter"), call("add", a=1, b=1), call("counter"), call("counter"), *REPORT_RESULT],
        tools=[{"server": "state"}],
        tool_policy={"state": "allow", "state/add": "approve"},
    )
    task = start(agents.a, "pausing", "go")
    assert task.state == "TASK_STATE_AUTH_REQUIRED"  # add is held for a person
    # The run stopped at the pause, and its session with it.
    assert (stateful_mcp.initializes, stateful_mcp.session_ends) == (1, 1)

    decide(open_interaction(task), approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    # The resumed run: one new session for its three calls (the approved one and two more).
    assert (stateful_mcp.initializes, stateful_mcp.session_ends) == (2, 2)
    assert results(task) == [
        ("counter", {"result": 1}),
        ("add", {"result": 2}),
        ("counter", {"result": 1}),  # a new session: the server's state starts again
        ("counter", {"result": 2}),
    ]


def test_a_session_the_server_forgot_is_opened_anew_and_the_call_made_on_it(
    agents, make_agent, stateful_mcp, state
):
    """MCP: a request answered 404 for its session reached no session; the client starts a
    new session, and the call goes out on it (once)."""
    make_agent(
        "forgotten",
        [call("counter"), call("forget"), call("counter"), *REPORT_RESULT],
        tools=[{"server": "state"}],
        tool_policy={"state": "allow"},
    )
    task = start(agents.a, "forgotten", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == 'ok: {"result": 1}'  # counted in the new session
    assert stateful_mcp.initializes == 2
    assert [e.state for e in Effect.objects.filter(task=task)] == [Effect.State.SUCCEEDED] * 3
