"""The tenant's Slack app, what Slack said of its users, and e-mail's one-time links."""

from django.db import models
from django.utils import timezone

from runtime.decisions.decision_models import Interaction
from tenants.models import Membership, Tenant


class SlackApp(models.Model):
    """A tenant's Slack app: its bot token (``xoxb-…``: posts and updates messages, opens
    modals, reads who clicked) and its signing secret (proves that a click came from Slack),
    both stored encrypted (connections.crypto). One per tenant: its interactivity Request
    URL is the tenant's (integrations.slack_settings.request_url). Messages go to the Slack
    channels of the tenant's notification channels of kind ``slack_app``."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="+")
    bot_token_encrypted = models.TextField(editable=False)
    bot_token_hint = models.CharField(max_length=40, editable=False)
    signing_secret_encrypted = models.TextField(editable=False)
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

    def __str__(self) -> str:
        return f"{self.slack_user_id} ({self.email or 'no confirmed e-mail'})"


class EmailLink(models.Model):
    """The one-time decision link of one e-mail to one member about one item: its Approve
    and Deny links share it, and either one used spends it. Only the SHA-256 of the token
    is kept; it expires with the item (``expires_at``, the item's expiry when it was sent)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    interaction = models.ForeignKey(Interaction, on_delete=models.CASCADE, related_name="+")
    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="+")
    email = models.CharField(max_length=254)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_for = models.CharField(max_length=16, blank=True)
    # The item's opening it was mailed for (Interaction.opening): once the approval is voided
    # and the item opens again, the link decides nothing (the void's e-mail has new links).
    opening = models.PositiveIntegerField(default=1)

    class Meta:
        indexes = [models.Index(fields=["tenant", "interaction"], name="email_link_by_item")]

    def __str__(self) -> str:
        return f"link for {self.email} ({'used' if self.used_at else 'unused'})"
