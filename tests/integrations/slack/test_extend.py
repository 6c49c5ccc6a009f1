"""Extend an item's deadline from Slack: the held call's message has an
Extend menu (30 minutes, 1 hour, 4 hours within INTERACTION_EXTEND_MAX_SECONDS); a pick is a
signed block_actions request to the interactivity endpoint, taken by the same service as the
REST route (who may decide it may extend it; audited; the caller told), the message updated
with the new deadline; a viewer's pick extends nothing."""

import json
import time
from datetime import timedelta

import pytest

from runtime.kernel import extensions as ext
from runtime.kernel.task_models import AuditEvent
from tests.integrations.conftest import OPERATOR, SLACK_CHANNEL, VIEWER

pytestmark = pytest.mark.django_db


def extend_menu(message: dict) -> dict:
    for block in message.get("blocks", []):
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == "cs_extend":
                return element
    raise AssertionError("no Extend menu in the message")


def pick(message: dict, ts: str, *, user: str, label: str) -> dict:
    """The block_actions payload of ``user`` picking ``label`` in the message's Extend menu."""
    [option] = [o for o in extend_menu(message)["options"] if o["text"]["text"] == label]
    return {
        "type": "block_actions",
        "user": {"id": user, "team_id": "T0001"},
        "team": {"id": "T0001"},
        "channel": {"id": SLACK_CHANNEL},
        "container": {"type": "message", "message_ts": ts, "channel_id": SLACK_CHANNEL},
        "trigger_id": "1337.42.abcdef",
        "actions": [
            {
                "type": "static_select",
                "action_id": "cs_extend",
                "block_id": "decide",
                "selected_option": option,
                "action_ts": str(time.time()),
            }
        ],
    }


def told(slack, user: str) -> list[str]:
    return [e["text"] for e in slack.called("chat.postEphemeral") if e["user"] == user]


def test_an_operator_extends_an_item_from_its_slack_message(slack_app, held, slack_post, settings):
    settings.INTERACTION_EXTEND_MAX_SECONDS = 2 * 3600
    interaction = held()
    deadline = interaction.expires_at
    [message] = slack_app.called("chat.postMessage")
    [ts] = list(slack_app.messages)
    labels = [o["text"]["text"] for o in extend_menu(message)["options"]]
    assert labels == ["30 minutes", "1 hour"]  # 4 hours is beyond the bound

    # A viewer may see the item but not extend it.
    assert slack_post(pick(message, ts, user=VIEWER, label="1 hour")).status_code == 200
    interaction.refresh_from_db()
    assert interaction.expires_at == deadline
    assert told(slack_app, VIEWER)[0].startswith("Nothing was extended: Viewers")

    events_before = interaction.task.events.count()
    assert slack_post(pick(message, ts, user=OPERATOR, label="1 hour")).status_code == 200
    interaction.refresh_from_db()
    assert interaction.expires_at == deadline + timedelta(hours=1)
    audit = AuditEvent.objects.get(action="extended", interaction=interaction)
    assert (audit.actor, audit.via) == ("user:operator@acme.test", "slack")
    assert told(slack_app, OPERATOR)[0].startswith("Extended by 1 hour: it now expires at ")
    # The caller is told (a status update with the new deadline) ...
    interaction.task.refresh_from_db()
    assert interaction.task.events.count() == events_before + 1
    progress = interaction.task.status_ext[ext.INTERACTIONS]["progress"]
    assert progress["expiresAt"].startswith(interaction.expires_at.strftime("%Y-%m-%dT%H:%M"))
    # ... and the message shows the new deadline, with what is left of the bound.
    update = slack_app.called("chat.update")[-1]
    assert f"<!date^{int(interaction.expires_at.timestamp())}^" in json.dumps(update)
    assert [o["text"]["text"] for o in extend_menu(update)["options"]] == ["30 minutes", "1 hour"]


def test_a_forged_pick_extends_nothing(slack_app, held, slack_post):
    interaction = held()
    [message] = slack_app.called("chat.postMessage")
    [ts] = list(slack_app.messages)
    forged = pick(message, ts, user=OPERATOR, label="30 minutes")
    option = forged["actions"][0]["selected_option"]
    option["value"] = json.dumps({"i": interaction.public_id, "by": "9999h"})
    assert slack_post(forged).status_code == 200
    assert told(slack_app, OPERATOR) == ["Nothing was extended: pick one of the durations."]
    option["value"] = json.dumps({"i": "eff_not_ours", "by": "30m"})
    slack_post(forged)
    assert told(slack_app, OPERATOR)[1] == "Nothing was extended: Countersign has no such item."
    assert not AuditEvent.objects.filter(action="extended").exists()
