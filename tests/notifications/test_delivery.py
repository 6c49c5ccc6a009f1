"""Channels: a held call notifies each matching channel once, through real local receivers."""

import json

import pytest
from django.core import mail

from notifications.models import Attempt, Channel, Delivery
from notifications.services import notifications_fan_out
from notifications.tasks import sweep_notifications as sweep_notifications_task
from runtime.decisions.decision_models import Interaction
from tests.core import send, start
from tests.notifications.conftest import BUILD, HOLD

pytestmark = pytest.mark.django_db


def hold(side, capture, agent="deployer", text=HOLD) -> Interaction:
    """Run a turn to its pause with on-commit callbacks (the fan-out) executed."""
    with capture(execute=True):
        start(side, agent, text)
    return Interaction.objects.get(tenant=side.tenant, state="open")


def test_a_held_call_notifies_each_matching_channel_once(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    slack = receivers(path="/slack")
    hook = receivers(path="/hook")
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator"])
    channel(agents.a.tenant, "ops slack", "slack", url=slack.url)
    _, secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    hook.secret = secret
    other = receivers(path="/other")
    channel(agents.b.tenant, "globex hook", "slack", url=other.url)

    interaction = hold(agents.a, django_capture_on_commit_callbacks)

    assert [m.to for m in mail.outbox] == [["operator@acme.test"]]
    body = mail.outbox[0].body
    link = f"https://countersign.example/inbox/{interaction.public_id}/"
    assert link in body and "deployer" in body.lower() and agents.a.subject in body
    # The held call's summary and arguments go with it by default.
    assert f"Deploy {BUILD} to staging" in mail.outbox[0].subject
    assert f'"build": "{BUILD}"' in body and '"environment": "staging"' in body

    assert len(slack.events) == 1
    message = slack.events[0]
    assert "Approve deploy / deploy_build?" in message["text"]
    button = message["blocks"][-1]["elements"][0]
    assert button["type"] == "button" and button["url"] == link
    assert "action_id" not in button and BUILD in json.dumps(message)

    assert hook.bad_signatures == 0 and len(hook.events) == 1
    event = hook.events[0]
    assert event["type"] == "interaction.opened"
    assert event["data"]["interactionId"] == interaction.public_id
    assert event["data"]["caller"] == agents.a.subject
    assert event["data"]["tool"] == "deploy/deploy_build"
    assert event["data"]["url"] == link
    assert event["data"]["arguments"] == {"build": BUILD, "environment": "staging"}
    assert event["data"]["summary"] == f"Deploy {BUILD} to staging"
    assert hook.requests[0]["headers"]["webhook-id"].startswith("msg_")

    # The fan-out again (a redelivered message) sends nothing twice.
    with django_capture_on_commit_callbacks(execute=True):
        notifications_fan_out(interaction_pk=interaction.pk)
    assert len(slack.events) == 1 and len(hook.events) == 1 and len(mail.outbox) == 1
    assert set(Delivery.objects.values_list("state", flat=True)) == {"delivered"}
    assert other.arrived == 0  # the other tenant's channel heard nothing


def test_a_channel_that_omits_arguments_keeps_them_and_their_summary_out(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    hook = receivers()
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url, omit_arguments=True)
    channel(agents.a.tenant, "mail", "email", email_addresses=["oncall@acme.test"])
    slack = receivers(path="/slack")
    channel(agents.a.tenant, "chat", "slack", url=slack.url, omit_arguments=True)
    hold(agents.a, django_capture_on_commit_callbacks)
    data = hook.events[0]["data"]
    assert (
        "arguments" not in data and "summary" not in data and data["tool"] == "deploy/deploy_build"
    )
    assert BUILD not in json.dumps(hook.events[0]) and BUILD not in json.dumps(slack.events[0])
    # The channel that does not omit them sends them (both parts of the e-mail).
    message = mail.outbox[0]
    assert BUILD in message.body and BUILD in message.alternatives[0][0]


def test_a_failing_receiver_is_retried_and_every_attempt_recorded(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    hook = receivers(script=[500, 503])
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    interaction = hold(agents.a, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("pending", 1, "HTTP 500")
    # The turn paused regardless: a failing receiver never blocks it.
    assert interaction.task.state == "TASK_STATE_AUTH_REQUIRED"

    assert sweep_notifications_task() == 1
    assert sweep_notifications_task() == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("delivered", 3)
    assert list(Attempt.objects.values_list("ok", "status_code", "error")) == [
        (False, 500, "HTTP 500"),
        (False, 503, "HTTP 503"),
        (True, None, ""),
    ]
    assert len(hook.events) == 1 and hook.bad_signatures == 0
    assert sweep_notifications_task() == 0

    page = agents.a.client_for(agents.a.operator).get(f"/inbox/{interaction.public_id}/")
    text = page.content.decode()
    assert "HTTP 500" in text and "HTTP 503" in text and "delivered" in text


def test_a_receiver_that_refuses_for_good_is_given_up(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    slack = receivers(script=[404])
    channel(agents.a.tenant, "gone", "slack", url=slack.url)
    hold(agents.a, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.last_error) == ("failed", "HTTP 404")
    assert sweep_notifications_task() == 0


def test_a_receiver_on_a_private_address_is_refused_by_the_outbound_guard(
    agents, notify, receivers, channel, settings, django_capture_on_commit_callbacks
):
    slack = receivers()
    channel(agents.a.tenant, "local", "slack", url=slack.url)
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    hold(agents.a, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert delivery.state == "failed" and delivery.last_error.startswith("refused:")
    assert slack.arrived == 0


@pytest.mark.parametrize(
    "filters, notified",
    [
        ({}, True),
        ({"kinds": ["question"]}, False),
        ({"kinds": ["approval"]}, True),
        ({"agents": ["support"]}, False),
        ({"agents": ["deployer"]}, True),
        ({"tools": ["deploy/rollback"]}, False),
        ({"tools": ["deploy"]}, True),
        ({"tools": ["deploy/deploy_build"], "agents": ["support"]}, False),
    ],
)
def test_a_channel_filter_excludes_what_it_should(
    agents, notify, channel, filters, notified, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "mail", "email", email_addresses=["oncall@acme.test"], **filters)
    hold(agents.a, django_capture_on_commit_callbacks)
    assert Delivery.objects.exists() is notified
    assert len(mail.outbox) == (1 if notified else 0)


def test_a_question_passes_a_tool_filter_never(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "tools", "email", email_addresses=["a@acme.test"], tools=["deploy"])
    channel(
        agents.a.tenant, "questions", "email", email_addresses=["q@acme.test"], kinds=["question"]
    )
    hold(agents.a, django_capture_on_commit_callbacks, agent="code-reviewer", text="Review this")
    assert [m.to for m in mail.outbox] == [["q@acme.test"]]


def test_a_disabled_channel_sends_nothing(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "off", "email", email_addresses=["a@acme.test"], enabled=False)
    hold(agents.a, django_capture_on_commit_callbacks)
    assert not Delivery.objects.exists() and not mail.outbox


def test_nothing_is_sent_before_the_turn_commits(agents, notify, channel):
    channel(agents.a.tenant, "mail", "email", email_addresses=["a@acme.test"])
    task = send(agents.a, "deployer", HOLD)
    from tests.core import run

    run(task)  # under the test's transaction: no commit, so no notification
    assert not Delivery.objects.exists() and not mail.outbox


def test_the_link_in_a_notification_requires_a_login(
    agents, notify, channel, client, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "mail", "email", email_addresses=["a@acme.test"])
    interaction = hold(agents.a, django_capture_on_commit_callbacks)
    response = client.get(f"/inbox/{interaction.public_id}/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert Channel.objects.get().url_encrypted == ""
