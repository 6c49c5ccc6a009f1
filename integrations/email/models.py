"""E-mail's one-time decision links (integrations.email.links), in the ``integrations`` app
(re-exported by integrations.models)."""

from django.db import models
from django.utils import timezone

from runtime.decisions.decision_models import Interaction
from tenants.models import Membership, Tenant


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
        verbose_name = "e-mail decision link"
        verbose_name_plural = "e-mail decision links"

    def __str__(self) -> str:
        return f"link for {self.email} ({'used' if self.used_at else 'unused'})"
