"""An approval group in Slack and by e-mail: each call of the group is its
own message, saying which call of how many it is, with its own buttons and one-time links,
decided call by call through the one decision flow; the turn goes on once the last call has
its decision. (The group at once is decided on its page, over REST or in bulk.)"""

import json
import re

import pytest
from django.core import mail
from django.test import Client

from notifications.channel_settings import channel_save
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import TaskState
from tests.core import run, send
from tests.groups import model_stub, planner, two_deploys
from tests.integrations.conftest import OPERATOR, SLACK_CHANNEL
from tests.integrations.slack.standin import click

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm(settings, monkeypatch):
    with model_stub(settings, monkeypatch) as stub:
        yield stub


@pytest.fixture
def group(agents, llm, django_capture_on_commit_callbacks):
    """A group of two held deploys of acme, its notifications sent (eagerly)."""

    def hold():
        planner(agents.a.tenant)
        two_deploys(llm, then="Staging yes, production no.")
        with django_capture_on_commit_callbacks(execute=True):
            task = run(send(agents.a, "planner", "deploy b-1 everywhere"))
        return list(Interaction.objects.filter(task=task).order_by("group_position"))

    return hold


def links_of(message) -> dict:
    found = dict(re.findall(r"^(Approve|Deny): (\S+)$", message.body, re.M))
    return {k.lower(): v.removeprefix("https://countersign.example") for k, v in found.items()}


def test_each_call_of_a_group_is_mailed_with_its_own_links_and_decided_on_its_own(
    agents, notify, group, django_capture_on_commit_callbacks
):
    channel_save(tenant=agents.a.tenant, name="ops mail", kind="email", email_roles=["operator"])
    first, second = group()
    mails = [m for m in mail.outbox if m.to == ["operator@acme.test"]]
    assert len(mails) == 2
    subjects = sorted(m.subject for m in mails)
    assert all("of 2 of one reply" in s for s in subjects), subjects
    by_call = {
        c.public_id: next(m for m in mails if f"/inbox/{c.public_id}/" in m.body)
        for c in (first, second)
    }
    assert "(call 1 of 2 of one reply)" in by_call[first.public_id].subject
    assert '"environment": "production"' in by_call[second.public_id].body

    client = Client()
    approve = links_of(by_call[first.public_id])["approve"]
    page = client.get(approve)
    shown = re.search(r'name="shown_hash" value="([0-9a-f]{64})"', page.content.decode())[1]
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(approve, {"shown_hash": shown}).status_code == 200
    first.refresh_from_db()
    assert (first.state, first.answered_via) == ("answered", "email")
    first.task.refresh_from_db()
    assert first.task.state == TaskState.AUTH_REQUIRED  # the other call still waits
    deny = links_of(by_call[second.public_id])["deny"]
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(deny, {}).status_code == 200
    second.refresh_from_db()
    assert (second.state, second.answer["approved"]) == ("answered", False)
    # The last decision resumed the turn (eagerly, here): the staging deploy went out.
    second.task.refresh_from_db()
    assert second.task.state == TaskState.COMPLETED
    assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [first.public_id]


def test_each_call_of_a_group_is_a_slack_message_decided_on_its_own(slack_app, group, slack_post):
    first, second = group()
    posted = [(ts, m) for ts, m in slack_app.messages.items() if m["channel"] == SLACK_CHANNEL]
    assert len(posted) == 2
    messages = {}
    for ts, message in posted:
        text = json.dumps(message)
        call = first if first.public_id in text else second
        assert f"(call {call.group_position + 1} of 2 of one reply)" in text
        messages[call.public_id] = (ts, message)
    ts, message = messages[second.public_id]
    assert slack_post(click(message, "cs_approve", user=OPERATOR, ts=ts)).status_code == 200
    second.refresh_from_db()
    assert (second.state, second.answered_via) == ("answered", "slack")
    first.refresh_from_db()
    assert first.state == Interaction.State.OPEN
    ts, message = messages[first.public_id]
    assert slack_post(click(message, "cs_approve", user=OPERATOR, ts=ts)).status_code == 200
    first.refresh_from_db()
    assert first.state == Interaction.State.ANSWERED
    first.task.refresh_from_db()
    assert first.task.state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 2
