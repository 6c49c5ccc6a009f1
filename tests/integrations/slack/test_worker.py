"""A click in Slack through the whole stack: uvicorn answers Slack's signed request at once,
and the decision, the resumed turn and the message's update happen in a Celery worker (a
real broker), against the stand-in for Slack's Web API."""

import json
import uuid

import httpx
import pytest

from integrations.slack.settings import slack_app_save
from notifications.channel_settings import channel_save
from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import Task, TaskState
from tests.core import send
from tests.integrations.slack.standin import BOT_TOKEN, SIGNING_SECRET, SlackStandIn, click, signed
from tests.live import LiveStack, wait_until


@pytest.fixture
def slack_stack(transactional_db, settings, tmp_path):
    standin = SlackStandIn().start()
    standin.user("U0OPERATOR", "operator@acme.test")
    queue = f"test-slack-{uuid.uuid4().hex[:8]}"
    stack = LiveStack(
        tmp_path,
        extra_env={
            "CELERY_QUEUE": queue,
            "SLACK_API_URL": standin.url,
            "PUBLIC_BASE_URL": "http://127.0.0.1",
        },
    )
    stack.start()
    # What this test process enqueues (the turn's fan-out) goes to that worker too.
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    try:
        yield stack, standin
    finally:
        stack.quiesce()
        stack.stop()
        standin.stop()


@pytest.mark.django_db(transaction=True)
def test_a_slack_click_is_answered_at_once_and_decided_in_the_worker(agents, slack_stack):
    stack, slack = slack_stack
    slack_app_save(tenant=agents.a.tenant, bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
    channel_save(tenant=agents.a.tenant, name="deploys", kind="slack_app", slack_channel="C0DEPLOY")
    task = send(agents.a, "deployer", "deploy build 2026.10.06-1 to staging")
    # The turn, its fan-out and the Slack message: all in the worker.
    posted = wait_until(
        lambda: slack.called("chat.postMessage"), 60, what=f"the Slack message\n{stack.logs()}"
    )[0]
    ts = next(ts for ts, m in slack.messages.items() if m is posted)
    interaction = Interaction.objects.get(task=task, state="open")

    request = signed(click(posted, "cs_approve", user="U0OPERATOR", ts=ts))
    response = httpx.post(
        f"{stack.url}/integrations/slack/acme/interactions",
        content=request["data"],
        headers={
            "Content-Type": request["content_type"],
            "X-Slack-Request-Timestamp": request["HTTP_X_SLACK_REQUEST_TIMESTAMP"],
            "X-Slack-Signature": request["HTTP_X_SLACK_SIGNATURE"],
        },
        timeout=10,
    )
    assert response.status_code == 200 and response.content == b""

    def updated():
        return [u for u in slack.called("chat.update") if "Approved by" in json.dumps(u)]

    wait_until(updated, 60, what=f"the message's update\n{stack.logs()}")
    wait_until(
        lambda: Task.objects.get(pk=task.pk).state == TaskState.COMPLETED, 60, what="the task"
    )
    interaction.refresh_from_db()
    assert (interaction.answered_by, interaction.answered_via) == (
        "user:operator@acme.test",
        "slack",
    )
