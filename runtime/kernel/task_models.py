"""The task and its turn: contexts, tasks (one per turn), their events and hosted files, and
the audit trail.

A task row carries its own wire history, status message and artifacts as ProtoJSON, so that
GetTask is one indexed query. Everything a paused turn needs to resume (its transcript) is in
the row too, and never leaves the server. Agents are runtime.agents.agent_models'; decisions
(interactions, effects, receipts, rules) runtime.decisions.decision_models'.
"""

import secrets
import uuid
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from config.tracing import current_trace_id
from runtime.kernel.audit_hash import content_digest
from tenants.appendonly import AppendOnlyModel
from tenants.models import Tenant


def new_key(prefix: str = "", nbytes: int = 12) -> str:
    return f"{prefix}{secrets.token_urlsafe(nbytes)}"


def new_context_key() -> str:
    # Part of every task id of the context. For an anonymous caller the task id is the only
    # credential (docs/reference/a2a.md), so it carries 128 random bits.
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


class Context(models.Model):
    """A conversation of one subject with one agent; its turns run one at a time, in order."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey("runtime.Agent", on_delete=models.CASCADE, related_name="contexts")
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


# A task's columns that only the turn runtime reads (never on the wire, and the largest): the
# endpoint's reads (GetTask, streams) leave them out.
TURN_RUNTIME_FIELDS = ("transcript", "runs", "plan")


class Task(models.Model):
    """One turn of a context, as the caller sees it (an A2A Task) and as the worker runs it."""

    # In memory only, set on the instance a run or a decision holds: where the saves and
    # events of a run's open block wait (a runtime.kernel.task_state.TurnBatch, or None), the
    # run's tool-server sessions (runtime.tools.mcp_sessions.ToolSessions), and whether an
    # approval group is being decided at once (runtime.decisions.group_flow). Readers use
    # getattr with a default. Typed Any: the rows sit under the modules that make these.
    turn_batch: Any
    tool_sessions: Any
    group_deciding: bool

    public_id = models.CharField(max_length=80, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey("runtime.Agent", on_delete=models.CASCADE, related_name="tasks")
    context = models.ForeignKey(Context, on_delete=models.CASCADE, related_name="tasks")
    # The caller-visible contextId (``context_id`` is the foreign key's column).
    wire_context_id = models.CharField(max_length=128)
    turn = models.PositiveIntegerField()
    subject = models.CharField(max_length=200)
    skill_id = models.CharField(max_length=100, blank=True)
    # SendMessage idempotency (the messageId is the idempotency key): the SHA-256 of the
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
    # A 0.x direct send (a blocking message/send or a message/stream without taskId) whose
    # caller has not been handed the task: for a direct reply, no task is created as the
    # caller sees it, so no task method of either dialect finds it (GetTask, ListTasks, CancelTask,
    # answers, streams, push configs: TaskNotFound) while this is true. The row stays, as
    # every turn's does, for the worker that runs it and for the operators' pages and audit
    # (its tool calls, its decisions). Cleared when the caller is given the Task (a pause,
    # artifacts, a failure, the wait limit): task_hand_out.
    direct = models.BooleanField(default=False)
    # The message that started the turn, or last answered it, came on a stream
    # (SendStreamingMessage, message/stream): the worker asks the model to stream its replies
    # and sends their text to the task's streams as it is written (live output,
    # runtime.turn.live_output). Set by each message, so a follow-up that does not stream
    # turns it off.
    live = models.BooleanField(default=False)

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
            # The tasks page (approvals.task_views.tasks): the tenant's tasks, latest status
            # change first. Without it each page sorted all of the tenant's tasks (a parallel
            # scan and a top-N sort of 110,000: 200 ms; bench/inbox.py "tasks").
            models.Index(fields=["tenant", "-status_timestamp", "-id"], name="task_tenant_recent"),
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


class AuditEvent(AppendOnlyModel):
    """One decision or state change a person (or the system) made, written in the same
    transaction as the change it records. Append-only (AppendOnlyModel), and chained: each
    row carries the hash of the tenant's previous one (runtime.kernel.audit_chain), so that a
    row removed or edited later is found."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    actor = models.CharField(max_length=200)  # a subject: user:<email>, partner:..., system:expiry
    action = models.CharField(max_length=50)  # approved, denied, answered, connected, expired, ...
    via = models.CharField(max_length=16, blank=True)  # inband, page, rest, expiry, connection
    # DO_NOTHING without a database constraint (migration 0008): deleting a task or an
    # interaction must not rewrite the rows that recorded decisions on it (SET_NULL was an
    # UPDATE of the audit log). A row may then name a task that is gone; pages show none.
    interaction = models.ForeignKey(
        "runtime.Interaction",
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
    # The hash chain (runtime.kernel.audit_chain): the SHA-256 of the row's own fields, written
    # with it; its place in the tenant's chain, the chain's hash before it and with it, linked
    # when its transaction commits (null and "" until then).
    content_hash = models.CharField(max_length=64, blank=True, default="")
    chain_seq = models.BigIntegerField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    chain_hash = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="audit_by_tenant"),
            models.Index(fields=["tenant", "chain_seq"], name="audit_chain"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action}"

    def save(self, *args, **kwargs):
        if not self.content_hash:
            self.content_hash = content_digest(self)
        super().save(*args, **kwargs)


class AuditChainHead(models.Model):
    """The end of a tenant's audit chain: how many rows it holds and the hash of the last.
    Its row is locked only while a transaction that wrote audit rows commits (the link is a
    deferred trigger on PostgreSQL): tenants never wait on each other, and a tenant's writers
    wait on each other only for that moment, never while they hold other locks' work."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.tenant_id} #{self.seq}"


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
        # A tool's whole result, when the model was sent only its beginning
        # (runtime.turn.results): for operators, never served to the caller.
        TOOL_RESULT = "tool_result", "tool result"

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
