"""The tenant's Slack app and what Slack said of its users, in the ``integrations`` app
(re-exported by integrations.models)."""

from django.db import models
from django.utils import timezone

from tenants.models import Tenant


class SlackApp(models.Model):
    """A tenant's Slack app: its bot token (``xoxb-…``: posts and updates messages, opens
    modals, reads who clicked) and its signing secret (proves that a click came from Slack),
    both stored encrypted (connections.crypto), and optionally its app-level token for Socket
    Mode. One per tenant: its interactivity Request URL is the tenant's
    (integrations.slack.settings.request_url). Messages go to the Slack
    channels of the tenant's notification channels of kind ``slack_app``."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="+")
    bot_token_encrypted = models.TextField(editable=False)
    bot_token_hint = models.CharField(max_length=40, editable=False)
    signing_secret_encrypted = models.TextField(editable=False)
    # The app-level token (``xapp-…``, scope connections:write), or "": with it the worker
    # opens a Socket Mode connection for the app (integrations.slack.socket_mode) and clicks
    # arrive over it, so that no public HTTPS Request URL is needed.
    app_token_encrypted = models.TextField(editable=False, blank=True, default="")
    app_token_hint = models.CharField(max_length=40, editable=False, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "Slack app"

    def __str__(self) -> str:
        return f"Slack app of {self.tenant}"


class SlackUser(models.Model):
    """What Slack's ``users.info`` said of one of its users: their confirmed e-mail address
    ("" when Slack gave none), kept for SLACK_USER_CACHE_SECONDS so that a click costs no
    call to Slack. Which member that address is, is read at every decision."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    slack_user_id = models.CharField(max_length=40)
    email = models.CharField(max_length=254, blank=True)
    checked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slack_user_id"], name="slack_user_once")
        ]
        verbose_name = "Slack user"
        verbose_name_plural = "Slack users"

    def __str__(self) -> str:
        return f"{self.slack_user_id} ({self.email or 'no confirmed e-mail'})"
