"""Slack's buttons with no public URL: Socket Mode. With an app-level token the worker opens
a connection to Slack (slack_sdk's SocketModeClient, asking apps.connections.open at
SLACK_API_URL for its address) and clicks come over it, acknowledged, into the same decision
path as the Request URL's; against a local stand-in for Slack's Socket Mode server."""

import json
import uuid

import pytest

from integrations.slack.settings import slack_app_save, slack_manifest
from integrations.slack.socket_mode import SocketModeConnections
from notifications.channel_settings import channel_save
from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import Task, TaskState
from tests.core import send
from tests.integrations.conftest import OPERATOR
from tests.integrations.slack.standin import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    SlackStandIn,
    SocketModeStandIn,
    click,
    submission,
)
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def socket(slack):
    """Slack's Socket Mode server, given out by the Web API stand-in's apps.connections.open."""
    server = SocketModeStandIn().start()
    slack.socket = server
    yield server
    server.stop()


@pytest.fixture
def connections():
    """This process's Socket Mode connections, as a worker holds them."""
    held = SocketModeConnections()
    yield held
    held.stop()


def message_of(slack) -> tuple[str, dict]:
    [message] = slack.called("chat.postMessage")
    [ts] = [ts for ts, m in slack.messages.items() if m is message or m == message]
    return ts, message


def test_a_click_over_socket_mode_is_acknowledged_and_decides_the_item(
    agents, slack_app, socket, connections, held
):
    slack_app_save(tenant=agents.a.tenant, app_token=APP_TOKEN)
    connections.sync()
    wait_until(socket.connected, 10, what="the Socket Mode connection")
    interaction = held()
    ts, message = message_of(slack_app)

    envelope = socket.send(click(message, "cs_approve", user=OPERATOR, ts=ts))

    assert wait_until(lambda: socket.ack(envelope), 10, what="the acknowledgement") == {
        "envelope_id": envelope
    }
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by, interaction.answered_via) == (
        "answered",
        "user:operator@acme.test",
        "slack",
    )
    assert Task.objects.get(pk=interaction.task_id).state == TaskState.COMPLETED
    assert any("Approved by" in json.dumps(u) for u in slack_app.called("chat.update"))


def test_a_modals_refusal_comes_back_in_the_acknowledgement(
    agents, slack_app, socket, connections, held
):
    slack_app_save(tenant=agents.a.tenant, app_token=APP_TOKEN)
    connections.sync()
    wait_until(socket.connected, 10, what="the Socket Mode connection")
    interaction = held()
    ts, message = message_of(slack_app)
    socket.send(click(message, "cs_deny", user=OPERATOR, ts=ts))
    [opened] = wait_until(lambda: slack_app.called("views.open"), 10, what="the deny modal")
    reason = {"reason": {"reason": {"type": "plain_text_input", "value": "x\x00y"}}}

    envelope = socket.send(submission(opened["view"], user=OPERATOR, values=reason))

    ack = wait_until(lambda: socket.ack(envelope), 10, what="the acknowledgement")
    assert ack["envelope_id"] == envelope
    assert ack["payload"]["response_action"] == "errors" and "reason" in ack["payload"]["errors"]
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN


def test_a_removed_app_token_closes_the_connection_and_the_manifest_follows(
    agents, slack_app, socket, connections
):
    tenant = agents.a.tenant
    assert slack_manifest(tenant)["settings"]["socket_mode_enabled"] is False
    slack_app_save(tenant=tenant, app_token=APP_TOKEN)
    manifest = slack_manifest(tenant)["settings"]
    assert manifest["socket_mode_enabled"] is True
    assert "request_url" not in manifest["interactivity"]
    connections.sync()
    wait_until(socket.connected, 10, what="the Socket Mode connection")
    # A second look changes nothing: one connection per app.
    connections.sync()
    assert socket.connected() == 1 and len(slack_app.called("apps.connections.open")) == 1

    slack_app_save(tenant=tenant, app_token_remove=True)
    connections.sync()
    wait_until(lambda: socket.connected() == 0, 10, what="the connection closed")
    assert connections.clients == {}


def test_a_refused_app_token_opens_nothing_and_is_said(
    agents, slack_app, socket, connections, caplog
):
    slack_app_save(tenant=agents.a.tenant, app_token="xapp-1-A0001-revoked-token-000")
    connections.sync()
    assert connections.clients == {} and socket.connected() == 0
    assert "no Socket Mode connection (invalid_auth)" in caplog.text


# --- the worker -----------------------------------------------------------------------------


@pytest.fixture
def socket_stack(transactional_db, settings, tmp_path):
    standin = SlackStandIn().start()
    standin.user("U0OPERATOR", "operator@acme.test")
    standin.socket = SocketModeStandIn().start()
    queue = f"test-slack-socket-{uuid.uuid4().hex[:8]}"
    stack = LiveStack(
        tmp_path,
        extra_env={
            "CELERY_QUEUE": queue,
            "SLACK_API_URL": standin.url,
            "SLACK_SOCKET_SYNC_SECONDS": "1",
            "PUBLIC_BASE_URL": "http://127.0.0.1",
        },
    )
    stack.start()
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    try:
        yield stack, standin
    finally:
        stack.quiesce()
        stack.stop()
        standin.socket.stop()
        standin.stop()


def test_the_worker_connects_when_an_app_token_is_set_and_a_click_decides_the_item(
    agents, socket_stack
):
    stack, slack = socket_stack
    socket = slack.socket
    tenant = agents.a.tenant
    slack_app_save(
        tenant=tenant, bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, app_token=APP_TOKEN
    )
    channel_save(tenant=tenant, name="deploys", kind="slack_app", slack_channel="C0DEPLOY")
    wait_until(socket.connected, 30, what=f"the worker's connection\n{stack.logs()}")
    task = send(agents.a, "deployer", "deploy build 2026.10.06-1 to staging")
    posted = wait_until(
        lambda: slack.called("chat.postMessage"), 60, what=f"the Slack message\n{stack.logs()}"
    )[0]
    ts = next(ts for ts, m in slack.messages.items() if m is posted)

    envelope = socket.send(click(posted, "cs_approve", user="U0OPERATOR", ts=ts))

    wait_until(lambda: socket.ack(envelope), 30, what=f"the acknowledgement\n{stack.logs()}")
    wait_until(
        lambda: Task.objects.get(pk=task.pk).state == TaskState.COMPLETED, 60, what="the task"
    )
    interaction = Interaction.objects.get(task=task)
    assert (interaction.answered_by, interaction.answered_via) == (
        "user:operator@acme.test",
        "slack",
    )
