"""Push notifications (A2A §4.3; profile v2 "Push notifications"): configs, deliveries, attempts.

A config belongs to one task and to the subject that created it. Each status or artifact
event of the task (runtime.kernel.task_models.TaskEvent, the outbox) becomes one PushDelivery per active
config in the same transaction as the event, so no event is lost between a change and its
delivery; Celery workers then POST them, a config's deliveries strictly in event order.

The ``runtime`` app's models (they were ``a2a_endpoint``'s): their tables kept
their names (``db_table``), and no row moved (runtime/migrations/0023_push_models_from_a2a_endpoint.py).
"""

import base64
import logging
import secrets
from datetime import timedelta

from django.db import models
from django.utils import timezone

from connections.crypto import InvalidToken, secret_decrypt, secret_encrypt
from runtime.kernel.task_models import Task, TaskEvent
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def new_webhook_secret() -> str:
    # Standard Webhooks' format: "whsec_" + base64 of 24-64 random bytes.
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_webhook_secret_encrypted() -> str:
    """A new signing secret, as PushSettings stores it."""
    return secret_encrypt(new_webhook_secret())


class PushSettings(models.Model):
    """A tenant's push signing secret (rotatable) and the receiver hosts it allows.

    The secrets are stored Fernet-encrypted (connections.crypto), as every secret at rest;
    ``secret`` and ``previous_secret`` are their plaintexts, which requests are signed with
    and the tenant's admin reads in Django admin to set up a receiver."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="push_settings")
    secret_encrypted = models.TextField(
        default=new_webhook_secret_encrypted, help_text="Fernet-encrypted"
    )
    previous_secret_encrypted = models.TextField(blank=True, help_text="Fernet-encrypted")
    previous_valid_until = models.DateTimeField(null=True, blank=True)
    allowed_hosts = models.TextField(
        blank=True,
        help_text="Receiver hosts push may be sent to, one per line: example.com, "
        "*.example.com, or * for any public host. Empty: none.",
    )
    rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "a2a_endpoint_pushsettings"
        verbose_name_plural = "push settings"

    def __str__(self) -> str:
        return f"push settings of {self.tenant.slug}"

    @property
    def host_patterns(self) -> list[str]:
        return [line.strip() for line in self.allowed_hosts.splitlines() if line.strip()]

    @property
    def secret(self) -> str:
        """The signing secret; raises SecretUnreadable when no key opens it."""
        return _plaintext(self.secret_encrypted, self.tenant_id)

    @property
    def previous_secret(self) -> str:
        return _plaintext(self.previous_secret_encrypted, self.tenant_id)

    def signing_secrets(self, now=None) -> list[str]:
        """The secrets to sign with: the current one, and the previous one in its grace period
        (receivers that still hold the old secret keep verifying)."""
        now = now or timezone.now()
        out = [self.secret]
        if (
            self.previous_secret_encrypted
            and self.previous_valid_until
            and self.previous_valid_until > now
        ):
            out.append(self.previous_secret)
        return out

    def rotate(self, grace: timedelta) -> None:
        now = timezone.now()
        self.previous_secret_encrypted = self.secret_encrypted
        self.previous_valid_until = now + grace
        self.secret_encrypted = new_webhook_secret_encrypted()
        self.rotated_at = now


class SecretUnreadable(Exception):
    """A stored secret that none of the configured keys opens (CONNECTIONS_ENCRYPTION_KEY
    changed without rotate_secrets)."""


def _plaintext(ciphertext: str, tenant_id: int) -> str:
    if not ciphertext:
        return ""
    try:
        return secret_decrypt(ciphertext)
    except InvalidToken:
        raise SecretUnreadable(
            f"the push signing secret of tenant {tenant_id} cannot be decrypted (the encryption "
            "key changed?); rotate it in admin"
        ) from None


class PushConfig(models.Model):
    """A TaskPushNotificationConfig (flat in A2A 1.0) of one task, for one subject."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="push_configs")
    subject = models.CharField(max_length=200)
    public_id = models.CharField(max_length=200)
    url = models.URLField(max_length=2000)
    receiver = models.CharField(max_length=300, help_text="host:port; concurrency is per receiver")
    # The receiver's notification token, Fernet-encrypted (runtime.kernel.push.push_configs caps the
    # plaintext at 1000 characters; the ciphertext is longer, hence a TextField).
    token = models.TextField(blank=True, help_text="Fernet-encrypted")
    auth_scheme = models.CharField(max_length=100, blank=True)
    auth_credentials = models.TextField(blank=True, help_text="Fernet-encrypted")
    # The A2A-Extensions the creating request activated: the receiver gets their data.
    activated = models.JSONField(default=list, blank=True)
    # The A2A version the config was registered in: its bodies are written in that dialect
    # (push_delivery: "0.3" receivers get the 0.3 Task, "1.0" a StreamResponse).
    dialect = models.CharField(max_length=8, default="1.0")
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    # The task's first event this config is given (1: it came with the message that made the
    # task), and every event after it (push_delivery.push_deliveries_fill).
    from_seq = models.PositiveIntegerField(default=1)
    # One worker delivers a config at a time, which keeps its events in order.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "a2a_endpoint_pushconfig"
        constraints = [
            models.UniqueConstraint(fields=["task", "public_id"], name="pushconfig_id_per_task")
        ]
        # A2A's "push notification config", as an admin reads it.
        verbose_name = "push subscription"
        verbose_name_plural = "push subscriptions"

    def __str__(self) -> str:
        return f"{self.public_id} → {self.url}"

    def token_plaintext(self) -> str:
        """The notification token as the caller gave it; "" when there is none, or when it
        cannot be decrypted (the encryption key changed), which is logged."""
        if not self.token:
            return ""
        try:
            return secret_decrypt(self.token)
        except InvalidToken:
            logger.error("push config %s: the token cannot be decrypted", self.public_id)
            return ""


class PushDelivery(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "pending"
        DELIVERED = "delivered", "delivered"
        GAVE_UP = "gave_up", "gave up"
        CANCELED = "canceled", "canceled (config disabled or deleted)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    config = models.ForeignKey(PushConfig, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(TaskEvent, on_delete=models.CASCADE, related_name="+")
    seq = models.PositiveIntegerField()  # the event's seq, for ordering without a join
    webhook_id = models.CharField(max_length=64, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "a2a_endpoint_pushdelivery"
        constraints = [
            models.UniqueConstraint(fields=["config", "event"], name="pushdelivery_once")
        ]
        indexes = [
            models.Index(fields=["config", "state", "seq"], name="pushdelivery_next"),
            models.Index(fields=["state", "next_attempt_at"], name="pushdelivery_sweep"),
        ]
        ordering = ["config", "seq"]
        verbose_name_plural = "push deliveries"

    def __str__(self) -> str:
        return f"{self.config_id}#{self.seq} {self.state}"


class PushAttempt(models.Model):
    delivery = models.ForeignKey(PushDelivery, on_delete=models.CASCADE, related_name="tries")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "a2a_endpoint_pushattempt"
        ordering = ["delivery", "at", "id"]

    def __str__(self) -> str:
        return f"{self.delivery_id} {self.status_code or self.error}"


class PushReceiverSlot(models.Model):
    """One of a receiver's N concurrency slots; a delivering worker holds one with a lease.

    A table of slots claimed with conditional updates works the same on SQLite and
    PostgreSQL and with any broker, and a dead worker's slot frees itself when its lease
    runs out.
    """

    receiver = models.CharField(max_length=300)
    slot = models.PositiveSmallIntegerField()
    holder = models.CharField(max_length=100, blank=True)
    until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "a2a_endpoint_pushreceiverslot"
        constraints = [models.UniqueConstraint(fields=["receiver", "slot"], name="pushslot_unique")]

    def __str__(self) -> str:
        return f"{self.receiver}[{self.slot}]"
