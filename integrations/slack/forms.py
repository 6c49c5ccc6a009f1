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
    app_token = forms.CharField(
        required=False,
        max_length=300,
        label="App-Level Token (Socket Mode, optional)",
        help_text="xapp-…, from Basic Information → App-Level Tokens, with connections:write: "
        "the worker then takes the clicks over Socket Mode, with no public Request URL "
        "(kept encrypted; empty keeps the current one).",
        widget=forms.PasswordInput(render_value=False),
    )
    app_token_remove = forms.BooleanField(
        required=False,
        label="Stop using Socket Mode (forget the app-level token)",
    )
