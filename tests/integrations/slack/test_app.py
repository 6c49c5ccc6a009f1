"""Approve and deny from Slack, through the real slack_sdk against a local
stand-in for Slack's Web API, and Slack's signed requests to the interactivity endpoint."""

import json
import time

import pytest

from integrations.models import SlackUser
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, status_text
from tests.integrations.conftest import ADMIN, BUILD, OPERATOR, SLACK_CHANNEL, STRANGER, VIEWER
from tests.integrations.slack.standin import button, click, submission

pytestmark = pytest.mark.django_db


def posted(slack) -> tuple[str, dict]:
    """The one message the app posted: its ts and its body."""
    [message] = slack.called("chat.postMessage")
    [(ts, _)] = [(ts, m) for ts, m in slack.messages.items() if m["channel"] == SLACK_CHANNEL]
    return ts, message


def action_ids(message: dict) -> list[str]:
    return [
        element.get("action_id")
        for block in message["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
    ]


def told(slack, user: str) -> list[str]:
    return [e["text"] for e in slack.called("chat.postEphemeral") if e["user"] == user]


def test_an_approval_in_slack_is_decided_by_the_member_who_clicked_and_the_message_says_so(
    slack_app, held, slack_post, agents
):
    interaction = held()
    ts, message = posted(slack_app)
    assert message["channel"] == SLACK_CHANNEL
    text = json.dumps(message)
    # The summary and the arguments, the agent, the caller; Approve and Deny.
    assert f"Deploy {BUILD} to staging" in text and '\\"environment\\": \\"staging\\"' in text
    assert "*Caller:* partner:acme-client" in text and "*Agent:* deployer" in text
    assert "*Expires:* <!date^" in text  # in each reader's time zone
    assert {"cs_approve", "cs_deny", "cs_open"} <= set(action_ids(message))
    approve = json.loads(button(message, "cs_approve")["value"])
    # The item, the arguments shown and the opening they are for (a void opens it again).
    assert approve == {"i": interaction.public_id, "h": interaction_hash(interaction), "o": 1}

    response = slack_post(click(message, "cs_approve", user=OPERATOR, ts=ts))
    assert response.status_code == 200 and response.content == b""

    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by, interaction.answered_via) == (
        "answered",
        "user:operator@acme.test",
        "slack",
    )
    interaction.task.refresh_from_db()
    assert interaction.task.state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 1
    receipt = Receipt.objects.get()
    assert (receipt.channel, receipt.channel_user, receipt.decider) == (
        "slack",
        OPERATOR,
        "user:operator@acme.test",
    )
    assert receipt.arguments_hash == approve["h"]
    audit = AuditEvent.objects.get(action="approved")
    assert (audit.via, audit.detail["channelUser"]) == ("slack", OPERATOR)
    export = agents.a.client_for(agents.a.admin).get("/audit/receipts.jsonl")
    [line] = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    assert (line["channel"], line["channelUser"]) == ("slack", OPERATOR)
    audit_page = agents.a.client_for(agents.a.admin).get("/audit/").content.decode()
    assert f"as <code>{OPERATOR}</code>" in audit_page
    # The message now says who decided, how and when, and its buttons are gone.
    [update] = slack_app.called("chat.update")
    assert (update["channel"], update["ts"]) == (SLACK_CHANNEL, ts)
    updated = json.dumps(update)
    assert "Approved by operator@acme.test via slack" in updated and "<!date^" in updated
    assert action_ids(update) == ["cs_open"]
    # users.info once; the next click reads the cache.
    assert [u["user"] for u in slack_app.called("users.info")] == [OPERATOR]
    assert SlackUser.objects.get().email == "operator@acme.test"


def interaction_hash(interaction: Interaction) -> str:
    from runtime.decisions.decision_selectors import held_call_for

    return held_call_for(interaction=interaction).arguments_hash


def test_a_bad_signature_an_old_timestamp_a_stranger_and_a_second_click_decide_nothing(
    slack_app, held, slack_post
):
    interaction = held()
    ts, message = posted(slack_app)
    approve = click(message, "cs_approve", user=OPERATOR, ts=ts)

    assert slack_post(approve, secret="not-the-signing-secret").status_code == 401
    six_minutes_ago = time.time() - 6 * 60
    assert slack_post(approve, at=six_minutes_ago).status_code == 401
    assert slack_post(approve, tenant="globex").status_code == 404  # no app there
    assert slack_post(click(message, "cs_approve", user=STRANGER, ts=ts)).status_code == 200
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()
    assert "no member of Acme Corp" in told(slack_app, STRANGER)[0]
    assert "someone@elsewhere.test" in told(slack_app, STRANGER)[0]
    # A viewer is a member, but cannot decide.
    slack_post(click(message, "cs_approve", user=VIEWER, ts=ts))
    assert "Viewers can see but not decide" in told(slack_app, VIEWER)[0]
    interaction.refresh_from_db()
    assert interaction.state == "open" and not slack_app.called("chat.update")

    slack_post(approve)
    slack_post(approve)  # a second click, or Slack's replay of the first
    slack_post(click(message, "cs_deny", user=ADMIN, ts=ts))  # a late click on another button
    assert Receipt.objects.count() == 1 and DemoRecord.objects.count() == 1
    assert told(slack_app, OPERATOR) == [
        "Nothing changed: it was decided already, by operator@acme.test via slack."
    ]
    assert "decided already" in told(slack_app, ADMIN)[0]
    assert not slack_app.called("views.open")


def test_a_request_that_is_not_slacks_is_refused_and_bad_bodies_are_not_errors(
    slack_app, held, client
):
    held()
    url = "/integrations/slack/acme/interactions"
    assert client.post(url, {"payload": "{}"}).status_code == 401
    assert client.get(url).status_code == 405
    for timestamp in ("", "abc", "9" * 40):
        response = client.post(
            url,
            "payload=%7B%7D",
            content_type="application/x-www-form-urlencoded",
            HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp,
            HTTP_X_SLACK_SIGNATURE="v0=00",
        )
        assert response.status_code == 401


def test_signed_nonsense_is_answered_and_decides_nothing(slack_app, held, slack_post):
    interaction = held()
    for payload in (
        {"type": "block_actions"},
        {"type": "block_actions", "actions": ["x"], "user": "U"},
        {"type": "block_actions", "actions": [{"action_id": "cs_approve", "value": "{"}]},
        {"type": "view_submission", "view": {"callback_id": "cs_deny", "state": []}},
        {"type": "view_submission", "view": "x", "user": ["U0OPERATOR"]},
        {
            "type": "view_submission",
            "user": {"id": OPERATOR},
            "view": {
                "callback_id": "cs_answer",
                "private_metadata": json.dumps({"i": interaction.public_id, "c": "C0DEPLOY"}),
                "state": {"values": {"custom": {"custom": {"value": 5}}, "choice": []}},
            },
        },
        {
            "type": "view_submission",
            "user": {"id": OPERATOR},
            "view": {
                "callback_id": "cs_similar",
                "private_metadata": "[1]",
                "state": {"values": {"duration": {"duration": {"selected_option": "1d"}}}},
            },
        },
        {"type": "shortcut"},
        ["not", "an", "object"],
    ):
        assert slack_post(payload).status_code == 200
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()


def test_ids_slack_never_sends_are_answered_and_decide_nothing(slack_app, held, slack_post):
    interaction = held()
    ts, message = posted(slack_app)
    lone = "\ud800"  # a lone surrogate: valid JSON, and no text PostgreSQL can compare
    hostile = []
    for action in ("cs_approve", "cs_deny", "cs_similar"):
        payload = click(message, action, user=OPERATOR, ts=ts)
        value = json.loads(payload["actions"][0]["value"])
        payload["actions"][0]["value"] = json.dumps(
            {**value, "i": f"{interaction.public_id}{lone}"}
        )
        hostile.append(payload)
        if action == "cs_approve":
            continue  # the channel and ts only say where to answer: an approval stands
        for where, key in (("channel", "id"), ("container", "message_ts")):
            payload = click(message, action, user=OPERATOR, ts=ts)
            payload[where][key] = f"{payload[where][key]}{lone}"
            hostile.append(payload)
            payload = click(message, action, user=OPERATOR, ts=ts)
            payload[where][key] = f"{payload[where][key]}\x00"
            hostile.append(payload)
    metadata = {"i": f"{interaction.public_id}{lone}", "c": SLACK_CHANNEL}
    reason = {"reason": {"reason": {"type": "plain_text_input", "value": "no"}}}
    hostile.append(
        submission(
            {"callback_id": "cs_deny", "private_metadata": json.dumps(metadata)},
            user=OPERATOR,
            values=reason,
        )
    )
    for payload in hostile:
        assert slack_post(payload).status_code == 200
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()


def test_a_choice_number_that_is_not_ascii_digits_is_no_choice(
    slack_app, held, slack_post, make_agent
):
    from tests.core import CHOOSER

    make_agent("chooser", CHOOSER)
    interaction = held("chooser", "go")
    ts, message = posted(slack_app)
    metadata = json.dumps({"i": interaction.public_id, "c": SLACK_CHANNEL})
    # "²" and "٣" are digits to str.isdigit; int() refuses the first and reads the second;
    # 5,000 digits are past int()'s limit.
    for number in ("²", "٣", "1" * 5000, "-1", "2"):
        payload = click(message, "cs_choice:0", user=OPERATOR, ts=ts)
        payload["actions"][0]["action_id"] = f"cs_choice:{number}"
        assert slack_post(payload).status_code == 200
        option = {
            "choice": {"choice": {"type": "radio_buttons", "selected_option": {"value": number}}}
        }
        answered = slack_post(
            submission(
                {"callback_id": "cs_answer", "private_metadata": metadata},
                user=OPERATOR,
                values=option,
            )
        )
        assert answered.status_code == 200
        assert answered.json()["errors"] == {"choice": "Pick one of the choices."}
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()


def test_a_deny_with_a_reason_from_the_modal_reaches_the_model(slack_app, held, slack_post):
    interaction = held()
    ts, message = posted(slack_app)
    assert slack_post(click(message, "cs_deny", user=ADMIN, ts=ts)).status_code == 200
    [opened] = slack_app.called("views.open")
    assert opened["trigger_id"] == "1337.42.abcdef"
    modal = opened["view"]
    assert modal["callback_id"] == "cs_deny" and interaction.public_id in modal["private_metadata"]
    assert interaction.refresh_from_db() or interaction.state == "open"  # opening decides nothing

    reason = "staging is frozen <!channel> until Friday"
    values = {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}
    assert slack_post(submission(modal, user=ADMIN, values=values)).status_code == 200
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer["approved"]) == ("answered", False)
    assert interaction.answered_by == "user:admin@acme.test"
    task = interaction.task
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED and not DemoRecord.objects.exists()
    assert reason in status_text(task)  # the model got the reason and said why
    [update] = slack_app.called("chat.update")
    updated = json.dumps(update)
    assert "Denied by admin@acme.test via slack" in updated
    # The reason is escaped in Slack: no mention can be made of it.
    assert "&lt;!channel&gt;" in updated and "<!channel>" not in updated


def test_a_too_long_reason_is_a_modal_error(slack_app, held, slack_post):
    interaction = held()
    ts, message = posted(slack_app)
    slack_post(click(message, "cs_deny", user=ADMIN, ts=ts))
    modal = slack_app.called("views.open")[0]["view"]
    values = {"reason": {"reason": {"type": "plain_text_input", "value": "x" * 1001}}}
    response = slack_post(submission(modal, user=ADMIN, values=values))
    assert response.json() == {
        "response_action": "errors",
        "errors": {"reason": "At most 1000 characters."},
    }
    interaction.refresh_from_db()
    assert interaction.state == "open"


def test_a_deny_reason_postgres_cannot_keep_is_a_modal_error(slack_app, held, slack_post):
    """A NUL answered 200 and then failed the decision (a DataError, logged, not retried):
    the person was never told and the item stayed open."""
    interaction = held()
    ts, message = posted(slack_app)
    slack_post(click(message, "cs_deny", user=ADMIN, ts=ts))
    modal = slack_app.called("views.open")[0]["view"]
    for reason, problem in (("no\x00way", "NUL"), ("lone \ud800 half", "surrogate")):
        values = {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}
        response = slack_post(submission(modal, user=ADMIN, values=values))
        assert response.status_code == 200
        assert response.json()["response_action"] == "errors"
        assert problem in response.json()["errors"]["reason"]
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()


def test_a_nul_reason_that_reaches_the_decision_is_refused_and_the_clicker_told(slack_app, held):
    """Whatever let it through (a click queued before the modal checked it), the flow refuses
    it: nothing is lost, and the person hears why."""
    from integrations.slack.decide import slack_click_take

    interaction = held()
    click_ = {"user": ADMIN, "channel": SLACK_CHANNEL, "interaction": interaction.public_id}
    slack_click_take(
        tenant_id=interaction.tenant_id,
        click={**click_, "decision": {"approved": False, "reason": "no\x00way"}},
    )
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()
    assert told(slack_app, ADMIN) == [
        "Nothing was decided: reason: must not contain NUL characters"
    ]


@pytest.mark.parametrize("bad_id", ["e_\x00", "\x00", "e_\ud800"])
def test_an_item_id_that_names_nothing_is_answered_and_the_clicker_told(
    slack_app, held, slack_post, bad_id
):
    """Signed payloads whose item id holds a NUL were a 500 (PostgreSQL refuses the NUL):
    each is a 200, the person hears there is no such item, and nothing changes."""
    from integrations.slack.decide import NO_SUCH_ITEM

    interaction = held()
    ts, message = posted(slack_app)
    payloads = []
    for action in ("cs_approve", "cs_deny", "cs_similar", "cs_choice:0", "cs_answer"):
        payload = click(message, "cs_deny", user=OPERATOR, ts=ts)
        payload["actions"][0].update(action_id=action, value=json.dumps({"i": bad_id, "h": ""}))
        payloads.append(payload)
    metadata = json.dumps({"i": bad_id, "h": "", "c": SLACK_CHANNEL})
    for callback, values in (
        ("cs_deny", {"reason": {"reason": {"value": "no"}}}),
        ("cs_answer", {"custom": {"custom": {"value": "main"}}}),
        ("cs_similar", {"duration": {"duration": {"selected_option": {"value": "1d"}}}}),
    ):
        view = {"callback_id": callback, "private_metadata": metadata}
        payloads.append(submission(view, user=OPERATOR, values=values))
    for payload in payloads:
        assert slack_post(payload).status_code == 200, payload
    assert told(slack_app, OPERATOR) == [NO_SUCH_ITEM] * len(payloads)
    assert not slack_app.called("views.open")
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()


def test_a_nul_in_slacks_own_ids_decides_nothing_and_is_no_error(slack_app, held, slack_post):
    interaction = held()
    ts, message = posted(slack_app)
    for field in ("user", "channel", "ts"):
        payload = click(message, "cs_deny", user=OPERATOR, ts=ts)
        if field == "user":
            payload["user"]["id"] = "U0OPER\x00ATOR"
        elif field == "channel":
            payload["channel"]["id"] = "C0DEP\x00LOY"
        else:
            payload["container"]["message_ts"] = "1.\x00"
        assert slack_post(payload).status_code == 200
        approve = click(message, "cs_approve", user=OPERATOR, ts=ts)
        approve["user"]["id"] = "U0OPER\x00ATOR"
        assert slack_post(approve).status_code == 200
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()


@pytest.fixture
def two_person(make_agent):
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "required": 2}},
    )


def test_a_two_person_item_needs_two_distinct_slack_users_who_are_two_people(
    slack_app, held, slack_post, two_person
):
    interaction = held("dep", "go")
    ts, message = posted(slack_app)
    # A second Slack account of the same person (another workspace's, say).
    slack_app.user("U0OPERATOR2", "operator@acme.test")

    slack_post(click(message, "cs_approve", user=OPERATOR, ts=ts))
    interaction.refresh_from_db()
    assert interaction.state == "open" and len(interaction.approvals) == 1
    assert "Your approval is in (1 of 2)" in told(slack_app, OPERATOR)[0]
    update = json.dumps(slack_app.called("chat.update")[-1])
    assert "Approved by operator@acme.test via slack: 1 of 2" in update
    assert "cs_approve" in update  # still open: the buttons stay

    slack_post(click(message, "cs_approve", user=OPERATOR, ts=ts))
    slack_post(click(message, "cs_approve", user="U0OPERATOR2", ts=ts))
    interaction.refresh_from_db()
    assert interaction.state == "open" and len(interaction.approvals) == 1
    assert "You approved this already" in told(slack_app, OPERATOR)[1]
    assert "You approved this already" in told(slack_app, "U0OPERATOR2")[0]

    slack_post(click(message, "cs_approve", user=ADMIN, ts=ts))
    interaction.refresh_from_db()
    assert interaction.state == "answered" and len(interaction.approvals) == 2
    assert {a["by"] for a in interaction.approvals} == {
        "user:operator@acme.test",
        "user:admin@acme.test",
    }
    assert DemoRecord.objects.count() == 1
    assert "Approved by admin@acme.test via slack" in json.dumps(
        slack_app.called("chat.update")[-1]
    )


def test_risk_high_and_edit_then_approve_open_the_browser(slack_app, held, slack_post, make_agent):
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={
            "deploy/deploy_build": {"action": "approve", "risk": "high", "editable": True}
        },
    )
    interaction = held("dep", "go")
    ts, message = posted(slack_app)
    ids = action_ids(message)
    assert "cs_approve" not in ids and "cs_similar" not in ids and "cs_deny" in ids
    browser = button(message, "cs_approve_browser")
    assert browser["url"] == f"https://countersign.example/inbox/{interaction.public_id}/"
    # A forged Approve click (the button is not there) is refused: step-up is a browser act.
    forged = click(message, "cs_deny", user=ADMIN, ts=ts)
    forged["actions"][0]["action_id"] = "cs_approve"
    slack_post(forged)
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()
    assert (
        "risk: high" in told(slack_app, ADMIN)[0] and "in the browser" in told(slack_app, ADMIN)[0]
    )


def test_editable_tools_offer_edit_in_the_browser_and_approve_as_is(
    slack_app, held, slack_post, make_agent
):
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "editable": True}},
    )
    interaction = held("dep", "go")
    _, message = posted(slack_app)
    edit = button(message, "cs_edit")
    assert edit["url"].endswith(f"/inbox/{interaction.public_id}/") and "value" not in edit
    assert "cs_approve" in action_ids(message)


def test_approve_and_allow_similar_makes_a_standing_rule_from_the_modal(
    slack_app, held, slack_post, make_agent
):
    make_agent("dep", [deploy_step(), *REPORT_RESULT], tools=[DEPLOY_TOOL])
    interaction = held("dep", "go")
    ts, message = posted(slack_app)
    slack_post(click(message, "cs_similar", user=ADMIN, ts=ts))
    modal = slack_app.called("views.open")[0]["view"]
    assert modal["callback_id"] == "cs_similar"
    values = {
        "duration": {"duration": {"selected_option": {"value": "7d"}}},
        "scope": {"scope": {"selected_options": [{"value": "caller_only"}]}},
        "conditions": {"conditions": {"selected_options": [{"value": "environment"}]}},
    }
    slack_post(submission(modal, user=ADMIN, values=values))
    interaction.refresh_from_db()
    assert interaction.state == "answered" and interaction.answered_via == "slack"
    from runtime.decisions.decision_models import StandingRule

    rule = StandingRule.objects.get()
    assert rule.conditions == [{"field": "environment", "op": "equals", "value": "staging"}]
    assert rule.caller == "partner:acme-client" and rule.created_by == "user:admin@acme.test"
    assert "A standing rule now allows similar calls" in told(slack_app, ADMIN)[0]


def test_a_question_is_answered_with_its_choice_buttons(slack_app, held, slack_post, make_agent):
    from tests.core import CHOOSER

    make_agent("chooser", CHOOSER)
    interaction = held("chooser", "go")
    ts, message = posted(slack_app)
    assert {"cs_choice:0", "cs_choice:1"} <= set(action_ids(message))
    assert button(message, "cs_choice:1")["text"]["text"] == "production"
    slack_post(click(message, "cs_choice:1", user=OPERATOR, ts=ts))
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == ("answered", {"value": "production"})
    interaction.task.refresh_from_db()
    assert "Chose production." in status_text(interaction.task)


def test_caller_and_model_text_cannot_make_links_or_mentions_in_slack(
    slack_app, held, slack_post, receivers_for_slack
):
    hook = receivers_for_slack()
    held(text="deploy build <http://evil.example|Open_in_Countersign><!channel>@here to staging")
    for message in (slack_app.called("chat.postMessage")[0], hook.events[0]):
        text = json.dumps(message)
        assert "<http://evil" not in text and "<!channel>" not in text and "<!here" not in text
        assert "&lt;http://evil.example|Open_in_Countersign&gt;&lt;!channel&gt;" in text
        assert "@here" not in text  # a word joiner keeps it from being read as one


@pytest.fixture
def receivers_for_slack(agents):
    from notifications.channel_settings import channel_save
    from tests.a2a_endpoint.receiver import Receiver

    started = []

    def make():
        receiver = Receiver(path="/slack").start()
        started.append(receiver)
        channel_save(tenant=agents.a.tenant, name="hook", kind="slack", url=receiver.url)
        return receiver

    yield make
    for receiver in started:
        receiver.stop()


def test_the_message_follows_decisions_elsewhere_voids_and_the_expiry(
    slack_app, held, django_capture_on_commit_callbacks
):
    from runtime.agents.agent_models import Agent
    from tests.core import decide, run

    capture = django_capture_on_commit_callbacks
    interaction = held()
    ts, _ = posted(slack_app)
    decide(interaction, approved=True)  # on the page; the turn is not resumed yet
    agent = Agent.objects.get(tenant=interaction.tenant, slug="deployer")
    # The rule that holds the call changes (another tool's entry would void nothing).
    Agent.objects.filter(pk=agent.pk).update(
        tool_policy={
            **agent.tool_policy,
            "deploy/deploy_build": {"action": "approve", "editable": True},
        }
    )
    with capture(execute=True):
        run(interaction.task)  # void: the policy changed since the approval
    # Each update shows the item as it stands when sent: open again, with its buttons.
    update = slack_app.messages[ts]
    assert "cs_approve" in action_ids(update)
    assert "The approval given before is void" in json.dumps(update)

    with capture(execute=True):
        decide(interaction, by="user:admin@acme.test", approved=False)
    assert "Denied by admin@acme.test via page" in json.dumps(slack_app.messages[ts])
    assert action_ids(slack_app.messages[ts]) == ["cs_open"]


def test_an_expired_item_s_message_says_so(slack_app, held, django_capture_on_commit_callbacks):
    from django.utils import timezone

    from runtime.decisions.interaction_state import interactions_expire

    interaction = held()
    ts, _ = posted(slack_app)
    Interaction.objects.filter(pk=interaction.pk).update(expires_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        assert interactions_expire() == 1
    assert "Expired without a decision" in json.dumps(slack_app.messages[ts])
    assert action_ids(slack_app.messages[ts]) == ["cs_open"]


def test_decisions_are_counted_per_channel(slack_app, held, slack_post):
    from prometheus_client import REGISTRY

    def counted(channel: str, outcome: str) -> float:
        labels = {"channel": channel, "outcome": outcome}
        return REGISTRY.get_sample_value("countersign_decisions_total", labels) or 0.0

    before = counted("slack", "approved"), counted("slack", "denied")
    held()
    ts, message = posted(slack_app)
    slack_post(click(message, "cs_approve", user=OPERATOR, ts=ts))
    slack_post(click(message, "cs_approve", user=ADMIN, ts=ts))  # decided already: not counted
    assert (counted("slack", "approved"), counted("slack", "denied")) == (before[0] + 1, before[1])


def test_another_tenants_item_is_no_such_item(slack_app, held, slack_post, agents):
    theirs = held(side=agents.b)
    assert not slack_app.called("chat.postMessage")  # globex has no Slack app
    ours = held()
    ts, message = posted(slack_app)
    forged = click(message, "cs_approve", user=ADMIN, ts=ts)
    forged["actions"][0]["value"] = json.dumps({"i": theirs.public_id, "h": ""})
    slack_post(forged)
    theirs.refresh_from_db()
    assert theirs.state == "open" and not Receipt.objects.exists()
    assert told(slack_app, ADMIN) == ["Nothing was decided: Countersign has no such item."]
    ours.refresh_from_db()
    assert ours.state == "open"


def test_a_tool_servers_form_is_filled_in_on_its_page_not_in_slack(
    slack_app, agents, make_agent, django_capture_on_commit_callbacks
):
    """An MCP elicitation's question (runtime.turn.elicitation) has fields of its own: Slack
    offers no free-text answer for it, only the page."""
    from django.db import transaction

    from runtime.decisions.interaction_state import interaction_open
    from runtime.kernel.task_models import Task, TaskState
    from tests.core import CHOOSER, send

    make_agent("asker", CHOOSER)
    task = send(agents.a, "asker", "go")
    form = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        locked = Task.objects.select_for_update().select_related("agent", "tenant").get(pk=task.pk)
        interaction_open(
            task=locked,
            kind="question",
            public_id="q_formform0001",
            prompt="Which day?",
            detail={"server": "tables", "tool": "book", "elicitation": "form", "form": form},
            request={"step": 1, "elicitation": "form", "form": form},
            state=TaskState.INPUT_REQUIRED,
        )
    _, message = posted(slack_app)
    assert action_ids(message) == ["cs_open"]


def void_and_reopen(interaction: Interaction, capture) -> None:
    """Approve ``interaction`` on the page, then change the rule that holds its call before
    the turn sends it: the approval is void and the item opens again (approval_void)."""
    from runtime.agents.agent_models import Agent
    from tests.core import decide, run

    decide(interaction, approved=True)  # the turn is not resumed yet
    agent = Agent.objects.get(tenant=interaction.tenant, slug=interaction.task.agent.slug)
    Agent.objects.filter(pk=agent.pk).update(
        tool_policy={
            **agent.tool_policy,
            "deploy/deploy_build": {"action": "approve", "editable": True},
        }
    )
    with capture(execute=True):
        run(interaction.task)
    interaction.refresh_from_db()
    assert interaction.state == "open" and interaction.detail.get("voided")


def test_a_button_of_the_first_opening_never_decides_the_reopened_approval(
    slack_app, held, slack_post, django_capture_on_commit_callbacks
):
    interaction = held()
    ts, first = posted(slack_app)  # the message as first posted, with its buttons
    void_and_reopen(interaction, django_capture_on_commit_callbacks)

    # A click on the first opening's buttons (a client that missed the update, a replay):
    # nothing binding, and the clicker hears that the item changed.
    slack_post(click(first, "cs_approve", user=ADMIN, ts=ts))
    slack_post(click(first, "cs_deny", user=ADMIN, ts=ts))
    slack_post(click(first, "cs_similar", user=ADMIN, ts=ts))
    assert not slack_app.called("views.open")
    interaction.refresh_from_db()
    assert interaction.state == "open" and interaction.approvals == []
    said = told(slack_app, ADMIN)
    assert len(said) == 3 and all("changed since" in text for text in said), said
    # A modal opened from the first opening and submitted after the void decides nothing.
    old_metadata = json.dumps({**json.loads(button(first, "cs_deny")["value"]), "c": SLACK_CHANNEL})
    deny = {"callback_id": "cs_deny", "private_metadata": old_metadata}
    values = {"reason": {"reason": {"value": "no"}}}
    assert slack_post(submission(deny, user=ADMIN, values=values)).status_code == 200
    interaction.refresh_from_db()
    assert interaction.state == "open" and "changed since" in told(slack_app, ADMIN)[-1]

    # The message as it stands now (updated at the void) decides the new opening.
    slack_post(click(slack_app.messages[ts], "cs_approve", user=ADMIN, ts=ts))
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_via) == ("answered", "slack")


def _string_leaves(value, path=()):
    """The paths of a payload's strings, those inside its JSON strings (a button's value, a
    modal's private_metadata) included: ``("json", ...)`` steps into one."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _string_leaves(inner, (*path, key))
    elif isinstance(value, list):
        for n, inner in enumerate(value):
            yield from _string_leaves(inner, (*path, n))
    elif isinstance(value, str):
        yield path
        try:
            decoded = json.loads(value)
        except ValueError:
            return
        if isinstance(decoded, dict):
            for inner in _string_leaves(decoded):
                yield (*path, "json", *inner)


def _with_leaf(value, path, bad: str):
    if not path:
        return bad
    if path[0] == "json":
        return json.dumps(_with_leaf(json.loads(value), path[1:], bad))
    copied = list(value) if isinstance(value, list) else dict(value)
    copied[path[0]] = _with_leaf(value[path[0]], path[1:], bad)
    return copied


def test_a_nul_or_a_lone_surrogate_anywhere_in_a_signed_payload_is_never_an_error(
    slack_app, held, slack_post
):
    """Every string of every click and submission the app can receive, one at a time,
    with a NUL or a lone surrogate in it: each is answered (200), never a 500 or a decision
    task that fails (a 503 here, where it runs at once)."""
    interaction = held()
    ts, message = posted(slack_app)
    metadata = json.dumps({"i": interaction.public_id, "h": interaction_hash(interaction)})
    payloads = [click(message, a, user=ADMIN, ts=ts) for a in ("cs_approve", "cs_deny")]
    for callback, values in (
        ("cs_deny", {"reason": {"reason": {"value": "no"}}}),
        ("cs_similar", {"duration": {"duration": {"selected_option": {"value": "1d"}}}}),
    ):
        view = {"callback_id": callback, "private_metadata": metadata}
        payloads.append(submission(view, user=ADMIN, values=values))
    posted_count = 0
    for payload in payloads:
        for path in _string_leaves(payload):
            for bad in ("a\x00b", "\ud800"):
                response = slack_post(_with_leaf(payload, path, bad))
                assert response.status_code == 200, (path, bad)
                posted_count += 1
    assert posted_count > 100
    assert Receipt.objects.count() <= 1  # a NUL where it means nothing may still decide
