"""Forms of the notification settings; the services check again (they are the rule)."""

import re

from django import forms
from django.core.validators import validate_email

from notifications.ladders import ROLES
from notifications.models import Channel
from runtime.decisions.decision_models import Interaction

# The fields of a channel that belong to one medium (notifications.transports, ``fields``),
# and the filters every channel has.
MEDIUM_FIELDS = ("email_roles", "email_addresses", "slack_channel", "url")
FILTER_FIELDS = ("kinds", "agents", "tools", "omit_arguments")
_TOOL = re.compile(r"^[A-Za-z0-9_.-]{1,100}(/[A-Za-z0-9_.-]{1,100})?$")


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s,]+", text or "") if w]


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=Channel.Kind.choices)
    enabled = forms.BooleanField(required=False, initial=True)
    email_roles = forms.MultipleChoiceField(
        choices=[(r, r) for r in ROLES], required=False, widget=forms.CheckboxSelectMultiple
    )
    email_addresses = forms.CharField(
        required=False, max_length=2000, help_text="Comma- or space-separated e-mail addresses."
    )
    url = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Incoming webhooks: the URL (kept encrypted; leave empty to keep the current one).",
        widget=forms.PasswordInput(render_value=False),
    )
    slack_channel = forms.CharField(
        required=False,
        max_length=40,
        label="Slack channel ID",
        help_text="Slack app: the ID of the channel to post to (C0123…, in the channel's details); "
        "invite the app to it.",
    )
    kinds = forms.MultipleChoiceField(
        choices=Interaction.Kind.choices, required=False, widget=forms.CheckboxSelectMultiple
    )
    agents = forms.CharField(required=False, max_length=1000, help_text="Agent slugs; empty: all.")
    tools = forms.CharField(
        required=False, max_length=1000, help_text='"server/tool" or "server"; empty: all.'
    )
    member = forms.EmailField(
        required=False,
        label="A member's own channel",
        help_text="The e-mail of the member whose own channel this is (their Slack DM, their "
        "Teams chat); empty: the team's. While they are away their delegate is told instead.",
    )
    omit_arguments = forms.BooleanField(
        required=False,
        label="Omit arguments",
        help_text="Keep held calls' arguments (and the summary made of them) out of this "
        "channel: its notifications name the tool only.",
    )

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name or "\x00" in name:
            raise forms.ValidationError("Give the channel a name.")
        return name

    def clean_email_addresses(self):
        addresses = _words(self.cleaned_data["email_addresses"])
        for address in addresses:
            try:
                validate_email(address)
            except forms.ValidationError:
                raise forms.ValidationError(f"{address[:80]} is not an e-mail address.") from None
        return addresses

    def clean_url(self):
        url = self.cleaned_data["url"].strip()
        if "\x00" in url:
            raise forms.ValidationError("Not a URL.")
        return url

    def clean_slack_channel(self):
        return self.cleaned_data["slack_channel"].strip()

    def clean_agents(self):
        slugs = _words(self.cleaned_data["agents"])
        for slug in slugs:
            if not re.match(r"^[-a-zA-Z0-9_]{1,63}$", slug):
                raise forms.ValidationError(f"{slug[:80]} is not an agent slug.")
        return slugs

    def clean_tools(self):
        tools = _words(self.cleaned_data["tools"])
        for tool in tools:
            if not _TOOL.match(tool):
                raise forms.ValidationError(f'{tool[:80]} is not "server/tool" or "server".')
        return tools


class PreferenceForm(forms.Form):
    email_enabled = forms.BooleanField(required=False, label="E-mail me")
    digest_minutes = forms.IntegerField(
        min_value=0,
        max_value=7 * 24 * 60,
        label="Digest every N minutes",
        help_text="0: one e-mail per item.",
    )
