"""The core's state: agents, contexts, tasks (one per turn), interactions, effects, events.

A task row carries its own wire history, status message and artifacts as ProtoJSON, so that
GetTask is one indexed query. Everything a paused turn needs to resume (its transcript) is in
the row too, and never leaves the server.
"""

import base64
import secrets
import uuid
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from config.tracing import current_trace_id
from connections.crypto import secret_encrypt
from connections.outbound import OutboundRefused, check_url
from tenants.appendonly import AppendOnlyModel
from tenants.models import Tenant


def new_key(prefix: str = "", nbytes: int = 12) -> str:
    return f"{prefix}{secrets.token_urlsafe(nbytes)}"


def new_context_key() -> str:
    # Part of every task id of the context. For an anonymous caller the task id is the only
    # credential (README, "Calling an agent"), so it carries 128 random bits.
    return secrets.token_urlsafe(16)


# The subject the A2A edge gives a caller without credentials (a public agent). It is a role,
# never an owner: each task such a caller starts gets a subject of its own (anonymous_subject).
ANONYMOUS = "anonymous"


def anonymous_subject() -> str:
    return f"{ANONYMOUS}:{secrets.token_urlsafe(16)}"


def is_anonymous_subject(subject: str) -> bool:
    """A subject of an anonymous caller's task (or the shared one tasks had before 0003)."""
    return subject == ANONYMOUS or subject.startswith(f"{ANONYMOUS}:")


def new_file_id() -> str:
    return new_key("file_", 12)


def new_trace_id() -> str:
    """The trace id of the span creating the task when tracing is on (one trace per task)."""
    return current_trace_id() or uuid.uuid4().hex


class TaskState(models.TextChoices):
    SUBMITTED = "TASK_STATE_SUBMITTED", "submitted"
    WORKING = "TASK_STATE_WORKING", "working"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED", "input required"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED", "auth required"
    COMPLETED = "TASK_STATE_COMPLETED", "completed"
    FAILED = "TASK_STATE_FAILED", "failed"
    CANCELED = "TASK_STATE_CANCELED", "canceled"
    REJECTED = "TASK_STATE_REJECTED", "rejected"


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})
# A blocking SendMessage returns once its task is in one of these (A2A §3.2.2).
SETTLED_STATES = TERMINAL_STATES | INTERRUPTED_STATES


class Agent(models.Model):
    """A tenant's configured agent, usually loaded from an AGENT.md file."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    slug = models.SlugField(max_length=63)
    name = models.CharField(max_length=200)
    description = models.TextField()
    version = models.CharField(max_length=50, default="1.0.0")
    skills = models.JSONField(
        default=list, blank=True, help_text="[{id, name, description, tags, examples}]"
    )
    # The skill a message that names none (no metadata.skillId) runs, for an agent with
    # several: seed 004 asks the caller to choose only when no default exists.
    default_skill = models.CharField(
        max_length=100,
        blank=True,
        help_text="The id of the skill a message without metadata.skillId gets, when the "
        "agent has several skills (empty: such a message must name one).",
    )
    instructions = models.TextField(blank=True)
    model = models.JSONField(
        default=dict, help_text='e.g. {"provider": "scripted", "script": [...]}'
    )
    tools = models.JSONField(
        default=list, blank=True, help_text="[{server, tool, description, schema, idempotent}]"
    )
    tool_policy = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"server/tool" or "server": "allow"|"approve"|"deny" or {action, deciders}}',
    )
    connections_enabled = models.BooleanField(
        default=False, help_text="loop.connections: the request_connection tool"
    )
    public = models.BooleanField(
        default=False,
        help_text="Anonymous callers allowed (each task they start gets its own subject).",
    )
    interaction_ttl_seconds = models.PositiveIntegerField(default=24 * 3600)
    # AGENT.md's ``ladder`` (runtime.ladders.ladder_parse): reminders, escalation and expiry.
    ladder = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"steps": [{"after": "15m", "action": "remind"}, ...], "tools": '
        '{"server/tool": [...]}}, from AGENT.md; its expire steps win over interaction_ttl_seconds.',
    )
    source_path = models.CharField(
        max_length=500, blank=True, help_text="The AGENT.md it was loaded from."
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="agent_slug_unique_per_tenant")
        ]
        ordering = ["tenant__slug", "slug"]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"


class Context(models.Model):
    """A conversation of one subject with one agent; its turns run one at a time, in order."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="contexts")
    subject = models.CharField(max_length=200)
    context_id = models.CharField(max_length=128)
    # Part of every task id of this context; random, so task ids reveal nothing.
    key = models.CharField(max_length=32, unique=True, default=new_context_key)
    turns = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "agent", "subject", "context_id"],
                name="context_unique_per_caller",
            )
        ]

    def __str__(self) -> str:
        return self.context_id


class Task(models.Model):
    """One turn of a context, as the caller sees it (an A2A Task) and as the worker runs it."""

    public_id = models.CharField(max_length=80, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tasks")
    context = models.ForeignKey(Context, on_delete=models.CASCADE, related_name="tasks")
    # The caller-visible contextId (``context_id`` is the foreign key's column).
    wire_context_id = models.CharField(max_length=128)
    turn = models.PositiveIntegerField()
    subject = models.CharField(max_length=200)
    skill_id = models.CharField(max_length=100, blank=True)
    # SendMessage idempotency (seed 000: messageId is the idempotency key): the SHA-256 of the
    # messageId that started this task and of the whole message, so that a retry finds this
    # task and a different message under the same messageId is refused. Empty before 0003.
    message_key = models.CharField(max_length=64, blank=True)
    message_digest = models.CharField(max_length=64, blank=True)

    state = models.CharField(max_length=32, choices=TaskState.choices, default=TaskState.SUBMITTED)
    status_message = models.JSONField(null=True, blank=True)  # ProtoJSON Message
    status_timestamp = models.DateTimeField(default=timezone.now)
    history = models.JSONField(default=list)  # ProtoJSON Messages, oldest first
    artifacts = models.JSONField(default=list)  # ProtoJSON Artifacts
    metadata = models.JSONField(default=dict, blank=True)
    # Set when the turn's answer is a direct Message rather than a task result (A2A §3.1.1).
    reply_message = models.JSONField(null=True, blank=True)
    # Extension data for the status message, keyed by extension URI; added to the wire only
    # for callers that activated the extension.
    status_ext = models.JSONField(default=dict, blank=True)
    # Extension data per artifactId (files/v1), likewise.
    artifact_ext = models.JSONField(default=dict, blank=True)

    # --- the turn runtime (never on the wire) ---
    transcript = models.JSONField(default=list)
    run_id = models.CharField(max_length=40, blank=True)
    runs = models.JSONField(default=list)  # [{runId, resumedFrom, interactionId, startedAt}]
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    trace_id = models.CharField(max_length=32, default=new_trace_id)
    plan = models.JSONField(default=list, blank=True)
    steps = models.PositiveIntegerField(default=0)
    tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    event_seq = models.PositiveIntegerField(default=0)
    # The A2A dialect the task was started in ("1.0", or "0.3" for 0.3 / 0.2.5 callers): shown
    # to support on the task page; either dialect may read it (a2a_endpoint.dialect03).
    dialect = models.CharField(max_length=8, default="1.0")
    # A 0.x direct send (a blocking message/send or a message/stream without taskId, seed
    # 004) whose caller has not been handed the task: "no task is created" for a direct
    # reply, so no task method of either dialect finds it (GetTask, ListTasks, CancelTask,
    # answers, streams, push configs: TaskNotFound) while this is true. The row stays, as
    # every turn's does, for the worker that runs it and for the operators' pages and audit
    # (its tool calls, its decisions). Cleared when the caller is given the Task (a pause,
    # artifacts, a failure, the wait limit): task_hand_out.
    direct = models.BooleanField(default=False)

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["context", "turn"], name="task_turn_unique_per_context"
            ),
            # Concurrent retries of one SendMessage: the database lets exactly one task in.
            models.UniqueConstraint(
                fields=["tenant", "agent", "subject", "message_key"],
                condition=~Q(message_key=""),
                name="task_message_unique_per_caller",
            ),
        ]
        indexes = [
            # ListTasks: a subject's tasks on one agent, latest status change first (keyset).
            # Direct replies (``direct``) are never listed: partial, so that the page and its
            # count read only the index, as before.
            models.Index(
                fields=["tenant", "agent", "subject", "-status_timestamp", "-id"],
                condition=Q(direct=False),
                name="task_list_keyset_handed",
            ),
            # The sweep looks for turns whose lease ran out.
            models.Index(fields=["state", "lease_expires_at"], name="task_lease_sweep"),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class TaskEvent(models.Model):
    """An append-only record of each status change and artifact of a task, in order.

    Written in the same transaction as the change: the task page's history and push delivery
    read from here (an outbox, so no event is lost between a change and its delivery).
    """

    class Kind(models.TextChoices):
        STATUS = "status", "status update"
        ARTIFACT = "artifact", "artifact update"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    state = models.CharField(max_length=32, choices=TaskState.choices)
    payload = models.JSONField()  # StreamResponse ProtoJSON, extension data included
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "seq"], name="taskevent_seq_unique")]
        ordering = ["task", "seq"]

    def __str__(self) -> str:
        return f"{self.task_id}#{self.seq} {self.kind}"


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
    deciders = models.CharField(max_length=16, choices=Deciders.choices, default=Deciders.EITHER)
    # Who may decide an approval, as its policy said when it opened (runtime.approvers):
    # roles, ``group:<slug>`` and ``caller``; empty is the default (admins and operators).
    approvers = models.JSONField(default=list, blank=True)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    # The approvals recorded so far when more than one is required: [{by, via, at}].
    approvals = models.JSONField(default=list, blank=True)
    # Roles an escalation step added to the approvers (README "Who may decide").
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
            # The inbox's open counts per agent and kind (runtime.selectors), read from the
            # index alone.
            models.Index(
                fields=["tenant", "agent", "kind"],
                condition=Q(state="open"),
                name="interaction_open_by_agent",
            ),
            models.Index(fields=["state", "expires_at"], name="interaction_expiry"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["task"], condition=Q(state="open"), name="interaction_one_open_per_task"
            )
        ]

    def __str__(self) -> str:
        return self.public_id


class InteractionApproval(models.Model):
    """One person's approval of an approval that needs more than one (the two-person rule).

    Written under the task's row lock with the decision it belongs to; the unique constraint
    is the database's word that nobody approves the same interaction twice.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    interaction = models.ForeignKey(
        Interaction, on_delete=models.CASCADE, related_name="approval_rows"
    )
    by = models.CharField(max_length=200)
    via = models.CharField(max_length=16)
    # What the approval approved: the SHA-256 of the policy version and the call's arguments
    # hash then (runtime.approvers.approval_binding). An approval counts only while both
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
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "step"], name="effect_one_per_step")]
        indexes = [models.Index(fields=["tenant", "state"], name="effect_state")]

    def __str__(self) -> str:
        return f"{self.public_id} {self.server} / {self.tool}"


class DemoRecord(models.Model):
    """What the offline demo tool servers did: a deployment, a pull request (runtime.tools)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    server = models.CharField(max_length=100)
    kind = models.CharField(max_length=50)
    effect_id = models.CharField(max_length=64, unique=True)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.server} {self.kind} {self.effect_id}"


class AuditEvent(AppendOnlyModel):
    """One decision or state change a person (or the system) made, written in the same
    transaction as the change it records. Append-only (AppendOnlyModel)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    actor = models.CharField(max_length=200)  # a subject: user:<email>, partner:..., system:expiry
    action = models.CharField(max_length=50)  # approved, denied, answered, connected, expired, ...
    via = models.CharField(max_length=16, blank=True)  # inband, page, rest, expiry, connection
    # DO_NOTHING without a database constraint (migration 0008): deleting a task or an
    # interaction must not rewrite the rows that recorded decisions on it (SET_NULL was an
    # UPDATE of the audit log). A row may then name a task that is gone; pages show none.
    interaction = models.ForeignKey(
        Interaction,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    task = models.ForeignKey(
        Task,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="audit_by_tenant")]

    def __str__(self) -> str:
        return f"{self.actor} {self.action}"


def new_receipt_id() -> str:
    return new_key("rcp_", 12)


class Receipt(AppendOnlyModel):
    """What one decision on a held tool call bound (issue 13): the call (tool and the SHA-256
    of the canonical arguments shown, and of those to be sent when an operator edited them),
    the policy version in force (the SHA-256 of the agent's tool policy), who decided, how,
    and when. The call is sent only while both hashes still match (runtime.services.receipts);
    a receipt is never changed: a void approval gets a receipt of its own (decision "void").

    Ids are kept as text, not foreign keys, so that deleting a task or an interaction never
    touches a receipt (append-only).
    """

    class Decision(models.TextChoices):
        APPROVED = "approved", "approved"
        DENIED = "denied", "denied"
        EXPIRED = "expired", "expired"
        VOID = "void", "void (the approval no longer matched)"

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
    # page, rest, inband, bulk, rule, expiry, system
    channel = models.CharField(max_length=16)
    arguments_hash = models.CharField(max_length=64, help_text="SHA-256 of the arguments shown.")
    sent_arguments_hash = models.CharField(
        max_length=64, help_text="SHA-256 of the arguments to send (differs when edited)."
    )
    edited = models.BooleanField(default=False)
    policy_version = models.CharField(max_length=64, help_text="SHA-256 of the tool policy.")
    stepped_up = models.BooleanField(default=False)
    rule_id = models.CharField(max_length=40, blank=True)
    reason = models.TextField(blank=True)
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


class TaskFile(models.Model):
    """File content the server hosts for a task: an artifact's file part (one row per version)
    or the bytes of an incoming ``url`` part the worker fetched (files/v1).

    The bytes live in the database, not on a file system: the web process that serves a
    download and the worker that wrote it may run on different machines that share only the
    database, and the row commits in the same transaction as the artifact event, so a link
    never points at a file that is not there. Sizes are bounded by A2A_MAX_RAW_PART_BYTES
    and FILES_FETCH_MAX_BYTES.
    """

    class Role(models.TextChoices):
        ARTIFACT = "artifact", "artifact file"
        INPUT = "input", "fetched input"

    public_id = models.CharField(max_length=40, unique=True, default=new_file_id)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="files")
    role = models.CharField(max_length=16, choices=Role.choices)
    artifact_id = models.CharField(max_length=200, blank=True)
    version = models.PositiveIntegerField(default=1)
    filename = models.CharField(max_length=255, blank=True)
    media_type = models.CharField(max_length=255, blank=True)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    content = models.BinaryField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["tenant", "task"], name="taskfile_by_task")]

    def __str__(self) -> str:
        return f"{self.public_id} {self.filename or self.artifact_id} v{self.version}"


# An environment variable's shape: what AGENT.md's ``model.credential`` names, so that one
# name means the same secret in a tenant's admin and in a single-tenant install's environment.
CREDENTIAL_NAME_RE = r"^[A-Z][A-Z0-9_]{0,99}$"


class Credential(models.Model):
    """A secret a model provider or an agent URL sends (an API key), set by a tenant's admin
    and referenced by name from AGENT.md (``model.credential``).

    Only the Fernet ciphertext (connections.crypto) is stored; admin shows that it is set and
    the last characters of a long secret, never the secret (runtime.credentials reads it).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(
        max_length=100,
        validators=[
            RegexValidator(
                CREDENTIAL_NAME_RE,
                "Upper-case letters, digits and underscores, starting with a letter "
                "(like an environment variable, e.g. OPENAI_API_KEY).",
            )
        ],
        help_text="The name AGENT.md's model.credential refers to, e.g. OPENAI_API_KEY.",
    )
    secret_encrypted = models.TextField(editable=False)
    # "…abcd" for secrets long enough that four characters give nothing away, else blank.
    secret_hint = models.CharField(max_length=8, blank=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="credential_name_per_tenant")
        ]

    def __str__(self) -> str:
        return self.name


class ModelPrice(models.Model):
    """What a model's tokens cost, USD per million; a row here overrides settings.MODEL_PRICES
    (runtime.llm.prices)."""

    model = models.CharField(max_length=200, unique=True, help_text="e.g. gpt-4o-mini")
    input_usd_per_million = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(Decimal(0))]
    )
    output_usd_per_million = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(Decimal(0))]
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]

    def __str__(self) -> str:
        return self.model


# Names tool servers may not take: the demo servers and the built-in tools' server answer to
# these (runtime.tools.SERVERS, BUILTIN_SERVER), and a tenant's server of the same name
# would never be reached.
RESERVED_SERVER_NAMES = frozenset({"deploy", "github", "countersign"})


def new_signing_secret() -> str:
    # Standard Webhooks' format: "whsec_" + base64 of 24-64 random bytes.
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class ToolServer(models.Model):
    """A tenant's tool server, the ``server`` of ``server/tool`` in AGENT.md and the policy.

    ``mcp``: a Model Context Protocol server over streamable HTTP; ``http``: a URL that takes
    signed JSON posts (README, "Tool servers"). Its tools are discovered on demand (admin's
    "Refresh tools") and cached here; a call of a tool the cache does not hold is refused
    before it is journalled. With an ``app``, calls carry the tenant's connection to that app.
    """

    class Kind(models.TextChoices):
        MCP = "mcp", "MCP (streamable HTTP)"
        HTTP = "http", "HTTP (signed JSON POST)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tool_servers")
    name = models.SlugField(
        max_length=63, help_text="The server in server/tool, as AGENT.md and the policy name it."
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    url = models.CharField(
        max_length=2000,
        help_text="http(s) URL of the server (MCP: its streamable HTTP endpoint). Loopback and "
        "private addresses are refused unless PUSH_ALLOW_PRIVATE_HOSTS is on.",
    )
    app = models.ForeignKey(
        "connections.App",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The app whose connection (this tenant's) authorizes the calls, if any.",
    )
    # Fernet ciphertext (connections.crypto) of the Standard Webhooks secret http servers are
    # signed with; shown once, when made.
    signing_secret_encrypted = models.TextField(blank=True, editable=False)
    timeout_seconds = models.PositiveIntegerField(
        default=30, help_text="How long one call or discovery may take (1 to 300 seconds)."
    )
    tools = models.JSONField(
        default=list, blank=True, editable=False, help_text="[{name, description, inputSchema}]"
    )
    refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    refresh_error = models.TextField(blank=True, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="toolserver_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}) of {self.tenant.slug if self.tenant_id else '?'}"

    def clean(self) -> None:
        errors = {}
        if self.name in RESERVED_SERVER_NAMES:
            errors["name"] = f"{self.name!r} is a built-in server's name; choose another."
        try:
            check_url(self.url, ["*"])
        except OutboundRefused as exc:
            errors["url"] = f"This URL cannot be called: {exc}."
        if not 1 <= (self.timeout_seconds or 0) <= 300:
            errors["timeout_seconds"] = "From 1 to 300 seconds."
        if errors:
            raise ValidationError(errors)

    def signing_secret_new(self) -> str:
        """Make a new signing secret, keep it encrypted, and return it (to show once)."""
        secret = new_signing_secret()
        self.signing_secret_encrypted = secret_encrypt(secret)
        return secret

    def tool_named(self, tool: str) -> dict | None:
        """The discovered tool of that name, as the last refresh cached it."""
        return next((t for t in self.tools or [] if t.get("name") == tool), None)


def new_rule_id() -> str:
    return new_key("rule_", 12)


class StandingRule(models.Model):
    """ "Approve and allow similar calls": a held tool's later calls that match are allowed
    without a pause, journalled with the rule as their decider (README "Standing rules").

    A rule names one agent's ``server/tool``, optionally one caller, and conditions on the
    arguments' top-level fields (runtime.rules); it expires by itself (no expiry only when an
    admin made it) and can be revoked. It never applies to a ``risk: high`` or ``required: 2``
    tool, whatever the policy said when it was made.
    """

    public_id = models.CharField(max_length=40, unique=True, default=new_rule_id)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="standing_rules")
    server = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    caller = models.CharField(
        max_length=200, blank=True, help_text="Only this caller's calls (empty: any caller)."
    )
    # [{"field": "environment", "op": "equals" | "in" | "prefix", "value": ...}]
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
