"""Channels of the tenant's Slack app (kind ``slack_app``): each item posted to a Slack
channel with buttons that decide (integrations.slack.delivery), its message updated after
each follow-up; the app itself is set up once per tenant (integrations.slack.settings), on
its own page, in Django admin or by ``manage.py channels add slack``."""

import json
import re
from datetime import datetime

from django.template.loader import render_to_string

from integrations.slack.api import SlackFailed
from integrations.slack.delivery import slack_app_send
from integrations.slack.models import SlackApp
from integrations.slack.settings import SlackAppError, request_url, slack_app_save, slack_manifest
from notifications.models import Channel, Delivery
from notifications.transports import ChannelError, ChannelFields, SendFailed, Transport

# A Slack channel's ID (public C…, private G…, or a direct message D…), as its details show.
SLACK_CHANNEL = re.compile(r"^[CGD][A-Z0-9]{2,39}$")


class SlackAppTransport(Transport):
    command_name = "slack"
    command_options = (
        ("--bot-token", "slack: the app's xoxb-… bot token."),
        ("--signing-secret", "slack: the app's signing secret."),
        (
            "--app-token",
            "slack: the app's xapp-… app-level token: clicks come over Socket Mode (the "
            "worker connects), no public Request URL needed.",
        ),
    )
    command_actions = (("slack-manifest", "Print the Slack app's manifest (JSON)."),)
    fields = ("slack_channel",)
    fields_title = "Slack app: where it posts"

    def send(self, delivery: Delivery, content: dict, now: datetime) -> dict:
        try:
            return slack_app_send(delivery, content)
        except SlackFailed as exc:
            raise SendFailed(str(exc), status=exc.status, final=exc.final) from None

    def check(self, *, tenant, channel: Channel | None, given: ChannelFields) -> None:
        if not SlackApp.objects.filter(tenant=tenant).exists():
            raise ChannelError(
                "set up the tenant's Slack app first (its bot token and signing secret)",
                field="slack_channel",
            )
        if not SLACK_CHANNEL.match(given.slack_channel or ""):
            raise ChannelError(
                "give the Slack channel's ID (C0123…: the channel's details in Slack show it), "
                "not its name",
                field="slack_channel",
            )

    def store(self, *, channel: Channel, given: ChannelFields) -> str:
        channel.slack_channel = given.slack_channel
        return ""

    def where(self, channel: Channel) -> str:
        return channel.slack_channel

    def settings_section(self, *, request, is_admin: bool) -> str:
        tenant = request.membership.tenant
        context = {
            "slack_app": SlackApp.objects.filter(tenant=tenant).first(),
            "slack_request_url": request_url(tenant),
            "is_admin": is_admin,
        }
        return render_to_string(
            "integrations/slack/settings_section.html", context, request=request
        )

    def command_prepare(self, *, tenant, options: dict) -> None:
        bot_token, signing_secret = options.get("bot_token"), options.get("signing_secret")
        app_token = options.get("app_token")
        if bot_token or signing_secret or app_token:
            try:
                slack_app_save(
                    tenant=tenant,
                    bot_token=bot_token or "",
                    signing_secret=signing_secret or "",
                    app_token=app_token or "",
                )
            except SlackAppError as exc:
                raise ChannelError(f"Slack app not saved: {exc}") from None

    def command_added(self, *, tenant, channel: Channel, summary: str) -> list[str]:
        posts = f"{summary}: it posts to Slack channel {channel.slack_channel}."
        if SlackApp.objects.filter(tenant=tenant).exclude(app_token_encrypted="").exists():
            return [
                posts,
                "Clicks come over Socket Mode: the worker connects with the app-level token, "
                "no Request URL needed.",
            ]
        return [
            posts,
            "Paste this interactivity Request URL into the Slack app (Interactivity & Shortcuts):",
            request_url(tenant),
        ]

    def command_overview(self, *, tenant) -> str:
        app = SlackApp.objects.filter(tenant=tenant).first()
        if app is None:
            return ""
        if app.app_token_encrypted:
            return f"Slack app: bot token {app.bot_token_hint}, Socket Mode ({app.app_token_hint})"
        return f"Slack app: bot token {app.bot_token_hint}, {request_url(tenant)}"

    def command_run(self, action: str, *, tenant) -> str:
        if action != "slack-manifest":
            raise NotImplementedError(action)
        return json.dumps(slack_manifest(tenant), indent=2)
