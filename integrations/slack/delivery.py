"""Notifications through the tenant's Slack app: an item's message posted (chat.postMessage)
when it opens, reminds or escalates, and every message posted of it updated (chat.update)
after each follow-up: decided, expired, voided, canceled, one approval of several in.

An update shows the item as it stands when it is sent, not as the event said: follow-ups of
one item may arrive out of order (a decision, then the void right after it), and the last
update is always right.
"""

from integrations.slack.api import SlackFailed, slack_call
from integrations.slack.blocks import item_message
from integrations.slack.models import SlackApp
from integrations.slack.mrkdwn import slack_escape
from notifications.content import FOLLOW_UPS
from notifications.models import Delivery
from runtime.decisions.decision_models import Interaction


def slack_app_of(tenant_id: int) -> SlackApp:
    app = SlackApp.objects.filter(tenant_id=tenant_id).first()
    if app is None:
        raise SlackFailed("the tenant has no Slack app: set it up first", final=True)
    return app


def _ref(message_ref: str) -> tuple[str, str]:
    channel, _, ts = message_ref.partition(":")
    return channel, ts


def messages_refresh(*, app: SlackApp, interaction: Interaction, content: dict, channel_pk=None):
    """Update every message the app posted of the item (of one notification channel, or of
    all) to show it as it stands now."""
    posted = Delivery.objects.filter(
        tenant_id=interaction.tenant_id,
        interaction=interaction,
        follow_up__isnull=True,
        state=Delivery.State.DELIVERED,
    ).exclude(message_ref="")
    if channel_pk is not None:
        posted = posted.filter(channel_id=channel_pk)
    message = item_message(interaction=interaction, content=content)
    for message_ref in sorted(set(posted.values_list("message_ref", flat=True))):
        channel, ts = _ref(message_ref)
        try:
            slack_call(app, "chat_update", channel=channel, ts=ts, **message)
        except SlackFailed as exc:
            if "message_not_found" in str(exc):
                continue  # deleted in Slack: nothing left to update
            raise


def slack_app_send(delivery: Delivery, content: dict) -> dict:
    """Send one delivery through the Slack app; the Delivery fields to keep (the message's
    reference when one was posted). Raises SlackFailed."""
    app = slack_app_of(delivery.tenant_id)
    channel = delivery.channel.slack_channel
    interaction = delivery.interaction
    if interaction is None:
        slack_call(
            app,
            "chat_postMessage",
            channel=channel,
            text=slack_escape(f"{content['title']}: {content['prompt']}"),
        )
        return {}
    if delivery.event in FOLLOW_UPS:
        messages_refresh(
            app=app, interaction=interaction, content=content, channel_pk=delivery.channel_id
        )
        return {}
    message = item_message(interaction=interaction, content=content)
    posted = slack_call(
        app, "chat_postMessage", channel=channel, unfurl_links=False, unfurl_media=False, **message
    )
    return {"message_ref": f"{posted.get('channel', channel)}:{posted.get('ts', '')}"}
