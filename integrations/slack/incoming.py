"""Slack-compatible incoming webhooks (kind ``slack``). They live beside the Slack app: both
speak Slack's mrkdwn and Block Kit and escape the caller's text one way
(integrations.slack.mrkdwn)."""

from datetime import datetime
from typing import Any

from integrations.hooks import HookTransport
from integrations.slack.mrkdwn import slack_arguments_block, slack_cut, slack_escape, slack_fields
from notifications.content import FOLLOW_UPS
from notifications.models import Delivery


def slack_webhook_message(content: dict) -> dict:
    """A Slack-compatible incoming webhook's message: the item, and a link button to its page
    (a webhook cannot take a click back: nothing is decided from it)."""
    title = slack_escape(content["title"])
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(f"*{title}*")}}
    ]
    if "kind" in content and content.get("event") not in FOLLOW_UPS:
        blocks.append({"type": "section", "fields": slack_fields(content)})
        arguments = slack_arguments_block(content)
        if arguments:
            blocks.append(arguments)
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Open in Countersign"},
                    "url": content["url"],
                }
            ],
        }
    )
    return {"text": slack_cut(f"{title} {content['url']}"), "blocks": blocks}


class SlackWebhookTransport(HookTransport):
    command_name = "slack-webhook"

    def send(self, delivery: Delivery, content: dict, now: datetime) -> dict:
        return self.post_json(delivery, slack_webhook_message(content))
