"""Notification channels of a tenant, their deliveries (with every attempt), reminder and
escalation ladders, and each member's own preferences."""

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from tenants.models import Membership, Tenant


def new_channel_id() -> str:
    return f"nch_{secrets.token_hex(8)}"


class Channel(models.Model):
    """Where a tenant's notifications go: e-mail (with one-time decision links), the tenant's
    Slack app (interactive: approve and deny in Slack), a Slack-compatible or Microsoft Teams
    incoming webhook, or a generic webhook signed with Standard Webhooks."""

    class Kind(models.TextChoices):
        EMAIL = "email", "E-mail"
        SLACK_APP = "slack_app", "Slack app (approve and deny in Slack)"
        SLACK = "slack", "Slack-compatible incoming webhook"
        TEAMS = "teams", "Microsoft Teams incoming webhook"
        WEBHOOK = "webhook", "Webhook (Standard Webhooks, JSON)"

    public_id = models.CharField(max_length=40, unique=True, default=new_channel_id)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    enabled = models.BooleanField(default=True)
    # E-mail: the members of these roles (admin, operator, viewer), and these addresses.
    email_roles = models.JSONField(default=list, blank=True)
    email_addresses = models.JSONField(default=list, blank=True)
    # Slack app: the Slack channel its messages go to (its ID, C0123...); the app's token and
    # signing secret are the tenant's (integrations.SlackApp).
    slack_channel = models.CharField(max_length=40, blank=True)
    # Incoming webhooks: the URL is a secret of its own (a Slack hook URL is its credential).
    url_encrypted = models.TextField(blank=True, editable=False)
    url_hint = models.CharField(max_length=120, blank=True, editable=False)
    signing_secret_encrypted = models.TextField(blank=True, editable=False)
    # Filters: empty means every kind / agent / tool.
    kinds = models.JSONField(default=list, blank=True)
    agents = models.JSONField(default=list, blank=True, help_text="Agent slugs.")
    tools = models.JSONField(default=list, blank=True, help_text='"server/tool" or "server".')
    # A member's own channel (their Slack DM, their Teams chat, their own address): while
    # they are away it is skipped, and their delegate's own channels of the same kind are
    # told instead (notifications.routing). Empty: a channel of the team.
    member = models.ForeignKey(
        Membership,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Whose own channel this is (empty: the team's). While they are away their "
        "delegate's own channel is told instead.",
    )
    omit_arguments = models.BooleanField(
        default=False,
        help_text="Keep a held call's arguments (and the summary made of them) out of this "
        "channel's notifications: they then name the tool only.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="notify_channel_name_unique")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class FollowUp(models.Model):
    """The follow-up of one event of an interaction after it opened ran: decided, expired,
    voided, canceled, or one approval of several recorded (notifications.follow_ups).

    Keyed by the audit row the event wrote (a task's cancel writes one for all its
    interactions): a late or repeated message finds it and sends nothing twice; should the
    message be lost, the sweep (``follow_ups_missing``) asks again. ``facts``: what the event
    said (who, how, when, the receipt), read once, as every channel tells it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    interaction = models.ForeignKey(Interaction, on_delete=models.CASCADE, related_name="+")
    audit_event_id = models.BigIntegerField()
    event = models.CharField(max_length=16)
    facts = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)
    deliveries = models.PositiveIntegerField(default=0)
    swept = models.BooleanField(default=False, help_text="Asked for by the sweep.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["audit_event_id", "interaction"], name="notify_follow_up_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} of {self.interaction_id}: {self.deliveries} delivery(ies)"


class Delivery(models.Model):
    """One notification of one channel about one interaction (or a test), with its attempts."""

    class Event(models.TextChoices):
        OPENED = "opened", "opened"
        REMINDER = "reminder", "reminder"
        ESCALATION = "escalation", "escalation"
        TEST = "test", "test"
        # Follow-ups (FollowUp): what became of an item the channel told of.
        DECIDED = "decided", "decided"
        EXPIRED = "expired", "expired"
        VOIDED = "voided", "voided"
        CANCELED = "canceled", "canceled"
        RECORDED = "recorded", "one approval of several recorded"
        # Deadlines: a warning before it (a ladder's warn step: an opening, it asks for a
        # decision), an operator's extension (a follow-up), an escalation on expiry (it asks
        # the roles it reaches for a decision).
        EXPIRING = "expiring", "expiring soon"
        EXTENDED = "extended", "deadline extended"
        ESCALATED = "escalated", "escalated on expiry"

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "given up"
        # An opening of an item decided before it could be sent: it would ask for nothing.
        SKIPPED = "skipped", "not sent: decided before"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    interaction = models.ForeignKey(
        Interaction, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    event = models.CharField(max_length=16, choices=Event.choices)
    follow_up = models.ForeignKey(
        FollowUp, on_delete=models.CASCADE, null=True, blank=True, related_name="delivery_rows"
    )
    step = models.PositiveSmallIntegerField(default=0, help_text="The ladder step (0: opened).")
    # An escalation reaches these roles' members on e-mail channels (empty: the channel's).
    roles = models.JSONField(default=list, blank=True)
    webhook_id = models.CharField(max_length=60)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # E-mail: the addresses it was sent to (a follow-up tells the same people).
    recipients = models.JSONField(default=list, blank=True)
    # Slack app: the message it posted ("<channel>:<ts>"), which follow-ups update.
    message_ref = models.CharField(max_length=100, blank=True)

    class Meta:
        constraints = [
            # A held call notifies each matching channel once per event and ladder step, however
            # often the fan-out runs.
            models.UniqueConstraint(
                fields=["channel", "interaction", "event", "step"],
                condition=Q(interaction__isnull=False, follow_up__isnull=True),
                name="notify_delivery_once",
            ),
            # And each channel it told once of each follow-up.
            models.UniqueConstraint(
                fields=["channel", "follow_up"],
                condition=Q(follow_up__isnull=False),
                name="notify_follow_up_delivery_once",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"], condition=Q(state="pending"), name="notify_due"
            )
        ]
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.event} via {self.channel_id} ({self.state})"


class FanOut(models.Model):
    """The fan-out of an interaction's opening ran (whether or not a channel matched).

    Its request is a broker message sent after the turn's commit; should that message be
    lost, no row appears, and the sweep (``fan_outs_missing``) asks again. One row per
    interaction: a late first message finds it and sends nothing twice."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    interaction = models.OneToOneField(Interaction, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(default=timezone.now)
    deliveries = models.PositiveIntegerField(default=0)
    swept = models.BooleanField(default=False, help_text="Asked for by the sweep, not on open.")

    def __str__(self) -> str:
        return f"fan-out of {self.interaction_id}: {self.deliveries} delivery(ies)"


class Attempt(models.Model):
    """One try of a delivery: what happened, never a secret."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveSmallIntegerField()
    at = models.DateTimeField(default=timezone.now)
    ok = models.BooleanField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["number"]

    def __str__(self) -> str:
        return f"attempt {self.number}: {'ok' if self.ok else self.error}"


class Ladder(models.Model):
    """Reminders and escalation for an agent's (or one tool's) open interactions.

    ``steps``: ``[{"after": "15m", "action": "remind"}, {"after": "1h", "action": "escalate",
    "roles": ["admin"]}]``, times counted from when the interaction opened (runtime.policy.ladders;
    no expire step: expiry is the agent's). An agent's AGENT.md may carry ladders too
    (``Agent.ladder``); at the same scope this one wins (notifications.services.ladder_for).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(
        Agent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty: every agent of the tenant.",
    )
    tool = models.CharField(
        max_length=201, blank=True, help_text='"server/tool" (approvals of that tool only).'
    )
    steps = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # One ladder per scope. The agent is null for the tenant's own ladder, and a unique
        # constraint lets nulls differ: the tenant-wide scope has a constraint of its own
        # (partial indexes, which SQLite enforces too; nulls_distinct=False it ignored).
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "agent", "tool"],
                condition=models.Q(agent__isnull=False),
                name="notify_ladder_unique_agent",
                violation_error_message="This agent has a ladder for this tool already.",
            ),
            models.UniqueConstraint(
                fields=["tenant", "tool"],
                condition=models.Q(agent__isnull=True),
                name="notify_ladder_unique_tenant",
                violation_error_message="The tenant has a ladder for this tool already.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug if self.agent else 'every agent'} {self.tool}".strip()


class LadderStep(models.Model):
    """A ladder step taken for an interaction: where the item stands."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    interaction = models.ForeignKey(Interaction, on_delete=models.CASCADE, related_name="+")
    step = models.PositiveSmallIntegerField()
    action = models.CharField(max_length=16)  # remind, escalate, warn
    roles = models.JSONField(default=list, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["interaction", "step"], name="notify_ladder_step_once")
        ]
        ordering = ["step"]

    def __str__(self) -> str:
        return f"step {self.step}: {self.action}"


class Preference(models.Model):
    """A member's own choice: e-mail on or off, and a digest every N minutes instead of one
    message per item."""

    membership = models.OneToOneField(
        Membership, on_delete=models.CASCADE, related_name="notification_preference"
    )
    email_enabled = models.BooleanField(default=True)
    digest_minutes = models.PositiveIntegerField(
        default=0, help_text="0: one e-mail per item; otherwise one digest every N minutes."
    )
    last_digest_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "notification preference"
        verbose_name_plural = "notification preferences"

    def __str__(self) -> str:
        return f"preferences of {self.membership}"


class DigestItem(models.Model):
    """A notification held for a member's next digest."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    interaction = models.ForeignKey(Interaction, on_delete=models.CASCADE, related_name="+")
    event = models.CharField(max_length=16)
    line = models.CharField(max_length=500)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["user", "sent_at"], name="notify_digest_pending")]

    def __str__(self) -> str:
        return self.line
