"""The Slack app's settings form (the service checks again: it is the rule)."""

from django import forms


class SlackAppForm(forms.Form):
    bot_token = forms.CharField(
        required=False,
        max_length=300,
        label="Bot User OAuth Token",
        help_text="xoxb-…, from OAuth & Permissions (kept encrypted; empty keeps the current one).",
        widget=forms.PasswordInput(render_value=False),
    )
    signing_secret = forms.CharField(
        required=False,
        max_length=200,
        label="Signing Secret",
        help_text="From Basic Information → App Credentials (kept encrypted; empty keeps it).",
        widget=forms.PasswordInput(render_value=False),
    )
