"""Microsoft Teams incoming webhooks (or a Teams Workflows "when a webhook request is
received" URL): an Adaptive Card with the item and "Open in Countersign" (Teams cannot take a
click back here). The caller's and the model's text go in TextRuns, which read no Markdown:
it cannot make a link or a heading."""

from datetime import datetime

from integrations.hooks import HookTransport
from notifications.content import FOLLOW_UPS, arguments_text
from notifications.models import Delivery


def _runs(*texts: tuple[str, bool]) -> dict:
    # TextRuns read no Markdown: the caller's text cannot make a link or a heading.
    return {
        "type": "RichTextBlock",
        "inlines": [
            {"type": "TextRun", "text": text, **({"weight": "Bolder"} if bold else {})}
            for text, bold in texts
        ],
    }


def teams_card(content: dict) -> dict:
    """A Teams incoming webhook's (or Workflows') message: an Adaptive Card with the item and
    "Open in Countersign" (Teams cannot take a click back here either)."""
    body = [_runs((content["title"], True))]
    if content.get("impact"):
        body.append(_runs((str(content["impact"]), False)))
    if "kind" in content and content.get("event") not in FOLLOW_UPS:
        for label, key in (
            ("Agent", "agentName"),
            ("Caller", "caller"),
            ("Tool", "tool"),
            ("Expires", "expiresAt"),
        ):
            if content.get(key):
                body.append(_runs((f"{label}: ", True), (str(content[key]), False)))
        if "arguments" in content:
            body.append(
                {
                    "type": "RichTextBlock",
                    "inlines": [
                        {
                            "type": "TextRun",
                            "text": arguments_text(content),
                            "fontType": "Monospace",
                        }
                    ],
                }
            )
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": [
            {"type": "Action.OpenUrl", "title": "Open in Countersign", "url": content["url"]}
        ],
    }
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
        ],
    }


class TeamsTransport(HookTransport):
    command_name = "teams"

    def send(self, delivery: Delivery, content: dict, now: datetime) -> dict:
        return self.post_json(delivery, teams_card(content))
