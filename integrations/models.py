"""The mediums' rows for Django, each defined in its medium's folder and re-exported here (one
app label, ``integrations``: no table moved when the mediums got their folders)."""

from integrations.email.models import EmailLink
from integrations.slack.models import SlackApp, SlackUser

__all__ = ["EmailLink", "SlackApp", "SlackUser"]
