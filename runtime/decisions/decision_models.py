"""Decisions: interactions (the pauses of a turn), effects (the tool-call journal), the
approvals of a two-person rule, receipts, standing rules."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import Task, new_key
from tenants.appendonly import AppendOnlyModel
from tenants.models import Tenant


class Interaction(models.Model):
    """An open pause of a turn: an approval, a question or a connection (interactions/v1)."""

    class Kind(models.TextChoices):
        APPROVAL = "approval", "approval"
        QUESTION = "question", "question"
        CONNECTION = "connection", "connection"

    class State(models.TextChoices):
        OPEN = "open", "open"
        ANSWERED = "answered", "answered"
        EXPIRED = "expired", "expired"
        CANCELED = "canceled", "canceled"

    class Deciders(models.TextChoices):
        EITHER = "either", "the caller or an operator"
        OPERATORS = "operators", "operators only"

    class Risk(models.TextChoices):
        NORMAL = "normal", "normal"
        HIGH = "high", "high: approving needs a step-up"

    public_id = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="interactions")
    # The task's agent, copied when the interaction opens (a task never changes agent): the
    # inbox counts open items per agent and kind from one index, without joining the tasks.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    prompt = models.TextField()
    detail = models.JSONField(default=dict, blank=True)  # on the wire: never a call's arguments
    request = models.JSONField(
        default=dict, blank=True
    )  # server side: choices, allowCustom, question id
    subject = models.CharField(max_length=200, help_text="The caller who may answer in-band.")
    # Operators unless the tool policy says either or caller (runtime.policy.lookup.Policy).
    deciders = models.CharField(max_length=16, choices=Deciders.choices, default=Deciders.OPERATORS)
    # Who may decide an approval, as its policy said when it opened (runtime.decisions.approvers):
    # roles, ``group:<slug>`` and ``caller``; empty is the default (admins and operators).
    approvers = models.JSONField(default=list, blank=True)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    # The held call's risk as its tool said when it opened; a decision takes the stricter of
    # this and the tool's risk then (runtime.decisions.approvers.approval_needs).
    risk = models.CharField(max_length=8, choices=Risk.choices, default=Risk.NORMAL)
    # The approvals recorded so far when more than one is required: [{by, via, at, binds,
    # stage}] (``stage``: from 1, the stage it counted in). The stages an approval opened with,
    # and the rule that held its call, are in ``request`` (runtime.decisions.approvers).
    approvals = models.JSONField(default=list, blank=True)
    # Roles an escalation step added to the approvers (docs/how-to/policy.md, "Who may
    # decide").
    widened_to = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    answer = models.JSONField(null=True, blank=True)
    answered_by = models.CharField(max_length=200, blank=True)
    answered_via = models.CharField(
        max_length=16, blank=True
    )  # inband, page, rest, expiry, connection, cancel
    answered_at = models.DateTimeField(null=True, blank=True)
    answer_message_id = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    # What the inbox's search looks in (runtime.decisions.search): written when it opens,
    # never a redacted value; a trigram index on PostgreSQL (migration 0019).
    search_text = models.TextField(blank=True, default="", editable=False)
    # A held call's one-line summary, redacted (runtime.decisions.summaries), written with
    # search_text: what a list shows without reading the call's arguments.
    summary = models.CharField(max_length=250, blank=True, default="", editable=False)
    # What approving it does, in words, redacted: its policy rule's ``impact`` rendered when it
    # opens (runtime.decisions.summaries), shown under the summary; "" when the rule has none.
    impact = models.CharField(max_length=320, blank=True, default="", editable=False)
    # An approval group (runtime.decisions.approval_groups): the held calls of one model reply,
    # each its own interaction, open together and decided at once or call by call; the turn
    # resumes once every one has its decision. ``group_id`` is "" for an interaction on its
    # own; ``group_position`` is the call's place in the reply (from 0). ``listed``: the row
    # the inbox shows for its group (one per group: the first call still open, else the last
    # decided); always true for an interaction on its own.
    group_id = models.CharField(max_length=40, blank=True, default="")
    group_position = models.PositiveSmallIntegerField(default=0)
    listed = models.BooleanField(default=True)

    class Meta:
        indexes = [
            # Keyset pages, newest first (migration 0006): the REST list, whole or by state,
            # and the inbox (open only, whole or by kind); each page reads limit + 1 entries.
            models.Index(fields=["tenant", "-created_at", "-id"], name="interaction_tenant_keyset"),
            models.Index(
                fields=["tenant", "state", "-created_at", "-id"], name="interaction_state_keyset"
            ),
            models.Index(
                fields=["tenant", "kind", "-created_at", "-id"],
                condition=Q(state="open"),
                name="interaction_open_by_kind",
            ),
            # The inbox's open counts per agent and kind (runtime.decisions.inbox), read from the
            # index alone.
            # Listed rows only: a group is one item of the inbox (migration 0026).
            models.Index(
                fields=["tenant", "agent", "kind"],
                condition=Q(state="open", listed=True),
                name="interaction_listed_by_agent",
            ),
            models.Index(fields=["state", "expires_at"], name="interaction_expiry"),
            # A group's calls, found by its id (the REST channel's /api/v1/groups/<id>).
            models.Index(
                fields=["tenant", "group_id"],
                condition=~Q(group_id=""),
                name="interaction_group",
            ),
        ]
        constraints = [
            # A task waits on one interaction, or on the calls of one group (each at its own
            # position): never on two of either.
            models.UniqueConstraint(
                fields=["task", "group_position"],
                condition=Q(state="open"),
                name="interaction_one_open_per_task",
            )
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def opening(self) -> int:
        """Which opening of the item this is: 1, then one more each time its approval is
        voided and it opens again (runtime.turn.approval_check.approval_void). What a
        channel handed out for one opening (a Slack button, an e-mail's link) names it, and
        never decides a later one (runtime.decisions.flow)."""
        value = (self.request or {}).get("opening")
        return value if isinstance(value, int) and value > 1 else 1


class InteractionApproval(models.Model):
    """One person's approval of an approval that needs more than one (a quorum, or stages).

    Written under the task's row lock with the decision it belongs to; the unique constraint
    is the database's word that nobody approves the same interaction twice, in any stage.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    interaction = models.ForeignKey(
        Interaction, on_delete=models.CASCADE, related_name="approval_rows"
    )
    by = models.CharField(max_length=200)
    via = models.CharField(max_length=16)
    # What the approval approved: the SHA-256 of the version of the policy rule that held the
    # call and the call's arguments hash then (runtime.policy.needs.approval_binding). An approval counts only while both
    # still hold, so an approval voided by a policy or argument change never counts again.
    binds = models.CharField(max_length=64)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["interaction", "by", "binds"], name="interaction_approval_once_per_person"
            )
        ]
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.by} approved {self.interaction_id}"


class Effect(models.Model):
    """One tool call's journal entry: written and committed before the call is sent."""

    class State(models.TextChoices):
        HELD = "held", "held for a decision"
        APPROVED = "approved", "approved, not yet sent"
        DENIED = "denied", "denied"
        SENDING = "sending", "sent, outcome pending"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        UNCERTAIN = "uncertain", "outcome lost"

    public_id = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="effects")
    step = models.PositiveIntegerField(help_text="The transcript position of the call.")
    server = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict)
    arguments_hash = models.CharField(max_length=64)
    idempotent = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=State.choices)
    outcome = models.JSONField(null=True, blank=True)
    approved_by = models.CharField(max_length=200, blank=True)
    # What a ``mode: shadow`` rule of the policy that matched the call would have done
    # (runtime.decisions.replay.shadow_record): {"would", "rule", "heldBy"}; null when none did.
    shadow = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "step"], name="effect_one_per_step")]
        indexes = [models.Index(fields=["tenant", "state"], name="effect_state")]

    def __str__(self) -> str:
        return f"{self.public_id} {self.server} / {self.tool}"


def new_receipt_id() -> str:
    return new_key("rcp_", 12)


class Receipt(AppendOnlyModel):
    """What one decision on a held tool call bound: the call (tool and the SHA-256 of the
    canonical arguments shown, and of those to be sent when an operator edited them), the
    version of the policy entry or rule that held the call (another tool's entry changing
    leaves it valid), who decided, how, and when. The call is sent only while both hashes
    still match (runtime.turn.approval_check); a receipt is never changed: a void approval
    gets a receipt of its own (decision "void").

    Ids are kept as text, not foreign keys, so that deleting a task or an interaction never
    touches a receipt (append-only).
    """

    class Decision(models.TextChoices):
        APPROVED = "approved", "approved"
        DENIED = "denied", "denied"
        EXPIRED = "expired", "expired"
        VOID = "void", "void (the approval no longer matched)"
        # A gate's call its policy allows outright: the receipt a gate hands back even then.
        ALLOWED = "allowed", "allowed by the policy"

    public_id = models.CharField(max_length=40, unique=True, default=new_receipt_id)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent_slug = models.CharField(max_length=63)
    task_public_id = models.CharField(max_length=80)
    interaction_public_id = models.CharField(max_length=64, blank=True)
    effect_public_id = models.CharField(max_length=64, blank=True)
    server = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    decision = models.CharField(max_length=16, choices=Decision.choices)
    # The subject that decided (user:<email>, program:..., the caller's, system:..., rule:...).
    decider = models.CharField(max_length=200)
    # page, rest, inband, bulk, rule, expiry, system, slack, email
    channel = models.CharField(max_length=16)
    channel_user = models.CharField(
        max_length=200,
        blank=True,
        help_text="Who the channel knew the decider as: a Slack user id, the address an "
        "e-mail link was sent to.",
    )
    # A delegate deciding for an away member who could decide it too (tenants' out of
    # office): "by <decider> for <on_behalf_of>".
    on_behalf_of = models.CharField(max_length=200, blank=True)
    arguments_hash = models.CharField(max_length=64, help_text="SHA-256 of the arguments shown.")
    sent_arguments_hash = models.CharField(
        max_length=64, help_text="SHA-256 of the arguments to send (differs when edited)."
    )
    edited = models.BooleanField(default=False)
    # The values themselves, after the policy's ``redact`` (runtime.decisions.
    # summaries): an auditor tells staging from production without the database. Receipts
    # written before carry none ({}).
    arguments = models.JSONField(default=dict, blank=True, help_text="The arguments shown.")
    sent_arguments = models.JSONField(
        default=dict, blank=True, help_text="The arguments to send (differ when edited)."
    )
    # What approving it does, in words (its rule's ``impact`` over the arguments shown,
    # redacted): what the decider was told. "" when the rule has none, or written before.
    impact = models.CharField(
        max_length=320, blank=True, default="", help_text="What approving the call does."
    )
    policy_version = models.CharField(
        max_length=64,
        help_text="SHA-256 of the policy entry (or rule of it) that held the call: the "
        "tool's own, not the whole policy's.",
    )
    # Which entry and rule of the tool policy held the call (runtime.policy.rules): the
    # entry's key ("" when none did: the default, or the tenant's annotation default) and the
    # rule's number in a conditional entry (null: the entry is no list of rules).
    policy_entry = models.CharField(max_length=201, blank=True)
    policy_rule = models.PositiveSmallIntegerField(null=True, blank=True)
    stepped_up = models.BooleanField(default=False)
    rule_id = models.CharField(max_length=40, blank=True)
    reason = models.TextField(blank=True)
    # The receipt signed (runtime.decisions.signing): a compact JWS (EdDSA) of its claims,
    # checked by anyone against the keys at /.well-known/jwks.json. Blank on receipts written
    # before receipts were signed.
    jws = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-created_at", "-id"], name="receipt_tenant_keyset"),
            models.Index(fields=["tenant", "task_public_id"], name="receipt_by_task"),
            models.Index(fields=["tenant", "effect_public_id"], name="receipt_by_effect"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.decision} {self.server}/{self.tool}"

    @property
    def binds(self) -> bool:
        """An approval that lets the call be sent (while it still matches)."""
        return self.decision == self.Decision.APPROVED


def new_rule_id() -> str:
    return new_key("rule_", 12)


class StandingRule(models.Model):
    """ "Approve and allow similar calls": a held tool's later calls that match are allowed
    without a pause, journalled with the rule as their decider (docs/how-to/policy.md,
    "Standing rules").

    A rule names one agent's ``server/tool``, optionally one caller, and conditions on the
    arguments' fields, nested ones by path (runtime.policy.conditions); it expires by itself
    (no expiry only when an admin made it) and can be revoked. It matches only calls held by
    the policy rule it was made under (``policy_rule``), and allows one only while its maker
    could approve it under that rule as it is now, as they are now (runtime.decisions.standing_rules):
    never a call whose rule is ``risk: high`` or asks for more than one person, whatever the
    policy said when it was made, nor a call with a field its tool's schema does not declare.
    """

    class Maker(models.TextChoices):
        PERSON = "person", "a member"
        PROGRAM = "program", "an operator token"
        UNKNOWN = "", "not recorded"

    public_id = models.CharField(max_length=40, unique=True, default=new_rule_id)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="standing_rules")
    server = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    caller = models.CharField(
        max_length=200, blank=True, help_text="Only this caller's calls (empty: any caller)."
    )
    # [{"field": "environment", "op": "equals" | "in" | "prefix" | "lt" | ..., "value": ...}]
    conditions = models.JSONField(default=list, blank=True)
    created_by = models.CharField(max_length=200)
    created_from = models.ForeignKey(
        Interaction, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)  # null: until revoked (admins)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True)
    uses = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The rule of the tool policy that held the call it was made from, as an interaction keeps
    # it (runtime.policy.rules.PolicyRule.stored: entry, rule number, when, source,
    # version, label). {}: made before rules recorded it (docs/how-to/policy.md "Standing rules").
    policy_rule = models.JSONField(default=dict, blank=True)
    # Who made it, to ask at each use whether they may still approve the call: a member (their
    # role and groups as they are then) or a program (its operator token, while it is valid).
    maker_kind = models.CharField(max_length=16, choices=Maker.choices, default="", blank=True)
    maker_membership = models.ForeignKey(
        "tenants.Membership", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    maker_token = models.ForeignKey(
        "tenants.ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Why it no longer allows the calls it matches (its maker or its policy rule changed),
    # and since when; "" while it applies. Written when the reason changes, never per call.
    inapplicable_reason = models.CharField(max_length=500, blank=True)
    inapplicable_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["tenant", "agent", "server", "tool"],
                condition=Q(revoked_at__isnull=True),
                name="standing_rule_lookup",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.server}/{self.tool}"

    def is_active(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class CallSummary(models.Model):
    """A model's short summary of a held call (runtime.decisions.call_summaries), written
    after the call is held, by a worker, when the tenant has AI summaries on. Never the
    arguments: every surface shows it labelled as written by a model, beside them, and
    flagged when the deterministic check (runtime.decisions.summary_check) found values in
    it that the arguments do not hold (``problems``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    interaction = models.OneToOneField(
        Interaction, on_delete=models.CASCADE, related_name="model_summary"
    )
    text = models.TextField()
    # Which model wrote it, as its provider names it ("openai gpt-4o-mini", "scripted").
    model = models.CharField(max_length=200)
    problems = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"summary of {self.interaction_id} by {self.model}"

    @property
    def flagged(self) -> bool:
        return bool(self.problems)

    def wire(self) -> dict:
        """As the REST interaction carries it."""
        return {
            "text": self.text,
            "model": self.model,
            "flagged": self.flagged,
            "problems": list(self.problems or []),
        }


class SigningKey(models.Model):
    """An Ed25519 key that signs receipts (runtime.decisions.signing). One is active at a
    time; a rotated key (``rotate_secrets --signing-key``) stops signing and stays published
    in the JWKS, so that the receipts it signed still verify. The private key is kept only as
    Fernet ciphertext (connections.crypto), re-encrypted by ``rotate_secrets``."""

    kid = models.CharField(max_length=40, unique=True)
    # The public key as a JWK's ``x``: the raw 32 bytes, base64url without padding.
    public_x = models.CharField(max_length=64)
    private_encrypted = models.TextField()
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["active"], condition=Q(active=True), name="signing_key_one_active"
            )
        ]

    def __str__(self) -> str:
        return self.kid
