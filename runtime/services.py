"""Services of the core: every write to tasks, turns and interactions goes through here.

Each service is one transaction. Where two actors can race (a caller and an operator on the
same interaction, a retried turn and its original), it locks the task row or claims with a
conditional update, and does no network I/O while a lock is held.
"""

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from runtime import extensions as ext
from runtime.errors import (
    AlreadyDecided,
    InvalidParams,
    NotAllowed,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from runtime.files import url_parts
from runtime.models import (
    TERMINAL_STATES,
    Agent,
    AuditEvent,
    Context,
    Effect,
    Interaction,
    Task,
    TaskEvent,
    TaskState,
    new_key,
)
from runtime.notify import task_changed
from runtime.signals import task_event_written

logger = logging.getLogger(__name__)

CONTEXT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$")


def now_iso(ts) -> str:
    """RFC 3339 UTC with milliseconds and Z (A2A §5.6.1)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def agent_message(task: Task, text: str, *, with_task: bool = True) -> dict:
    message = {
        "messageId": str(uuid.uuid4()),
        "contextId": task.wire_context_id,
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    }
    if with_task:
        message["taskId"] = task.public_id
    return message


# --- events -------------------------------------------------------------------------------


def _emit(task: Task, kind: str, payload: dict, extension_data: dict | None = None) -> TaskEvent:
    task.event_seq += 1
    event = TaskEvent.objects.create(
        tenant_id=task.tenant_id,
        task=task,
        seq=task.event_seq,
        kind=kind,
        state=task.state,
        payload={**payload, "_ext": extension_data or {}},
    )
    # Push delivery (a2a_endpoint.push) queues its deliveries in this same transaction.
    task_event_written.send(sender=TaskEvent, task=task, event=event)
    return event


def status_payload(task: Task) -> dict:
    status: dict[str, Any] = {"state": task.state, "timestamp": now_iso(task.status_timestamp)}
    if task.status_message:
        status["message"] = task.status_message
    return {
        "statusUpdate": {
            "taskId": task.public_id,
            "contextId": task.wire_context_id,
            "status": status,
        }
    }


def _set_status(
    task: Task, state: str, message: dict | None = None, status_ext: dict | None = None
) -> None:
    """Move the task to ``state``; the previous status message goes into the history (as the
    a2a SDK's task manager does), and an event records the change."""
    if task.status_message:
        task.history.append(task.status_message)
    task.state = state
    task.status_message = message
    task.status_ext = status_ext or {}
    task.status_timestamp = timezone.now()
    _emit(task, TaskEvent.Kind.STATUS, status_payload(task), task.status_ext)
    task_changed(task)


STATUS_FIELDS = [
    "state",
    "status_message",
    "status_ext",
    "status_timestamp",
    "history",
    "event_seq",
]


def _end_task(task: Task, state: str, message: dict, status_ext: dict | None = None) -> None:
    """Move a locked task to a terminal state, free its lease, and let its context go on."""
    task.lease_owner = ""
    task.lease_expires_at = None
    _set_status(task, state, message, status_ext=status_ext)
    task.save(update_fields=[*STATUS_FIELDS, "lease_owner", "lease_expires_at"])
    _start_next_in_context(task)


# --- sending messages ---------------------------------------------------------------------


@dataclass
class SendResult:
    task: Task
    created: bool = False
    queued: bool = False
    replayed: bool = False


def _skill_for(agent: Agent, skill_id: str | None) -> str:
    ids = [s["id"] for s in agent.skills or []]
    if skill_id:
        if skill_id not in ids:
            raise InvalidParams(
                "metadata.skillId", f"unknown skill {skill_id!r}; this agent has {ids}"
            )
        return skill_id
    if len(ids) == 1:
        return ids[0]
    if len(ids) > 1:
        raise InvalidParams(
            "metadata.skillId", f"this agent has several skills; choose one of {ids}"
        )
    return ""


def _user_text(message: dict) -> tuple[str, list]:
    texts = [p["text"] for p in message.get("parts", []) if "text" in p]
    data = [p["data"] for p in message.get("parts", []) if "data" in p]
    return "\n".join(texts), data


def message_send(
    *,
    tenant,
    agent: Agent,
    subject: str,
    message: dict,
    skill_id: str | None = None,
    delivery: str | None = None,
) -> SendResult:
    """Take a caller's message: start (or queue) a turn, or answer the task it names."""
    if message.get("taskId"):
        return _message_to_task(tenant=tenant, agent=agent, subject=subject, message=message)
    skill = _skill_for(agent, skill_id)
    context_id = message.get("contextId") or str(uuid.uuid4())
    if not CONTEXT_ID_RE.match(context_id):
        raise InvalidParams(
            "message.contextId", "must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
        )
    text, data = _user_text(message)
    with transaction.atomic():
        context, _ = Context.objects.get_or_create(
            tenant=tenant, agent=agent, subject=subject, context_id=context_id
        )
        # The context row is the queue's lock: turns of one context are numbered and run in order.
        context = Context.objects.select_for_update().get(pk=context.pk)
        busy = Task.objects.filter(context=context).exclude(state__in=TERMINAL_STATES).exists()
        if busy and (delivery or "") == "reject":
            raise UnsupportedOperation(
                "The context has a turn in progress, and the message asked not to be queued.",
                reason="CONTEXT_BUSY",
                contextId=context_id,
            )
        context.turns += 1
        context.save(update_fields=["turns"])
        public_id = f"t{context.turns}.{context.key}"
        stored = {**message, "contextId": context_id, "taskId": public_id, "role": "ROLE_USER"}
        task = Task(
            public_id=public_id,
            tenant=tenant,
            agent=agent,
            context=context,
            wire_context_id=context_id,
            turn=context.turns,
            subject=subject,
            skill_id=skill,
            state=TaskState.SUBMITTED,
            history=[stored],
            transcript=[
                {
                    "type": "user",
                    "text": text,
                    "data": data,
                    "messageId": message["messageId"],
                    # Fetched by the worker when the turn starts (runtime.files).
                    "urls": url_parts(message),
                }
            ],
        )
        task.save()
        _emit(task, TaskEvent.Kind.STATUS, status_payload(task))
        task_changed(task)
        task.save(update_fields=["event_seq"])
        if not busy:
            _enqueue_turn(task)
    logger.info(
        "turn %s queued=%s",
        public_id,
        busy,
        extra={
            "task_id": public_id,
            "subject": subject,
            "tenant": tenant.slug,
            "trace_id": task.trace_id,
        },
    )
    return SendResult(task=task, created=True, queued=busy)


def _message_to_task(*, tenant, agent: Agent, subject: str, message: dict) -> SendResult:
    with transaction.atomic():
        task = (
            Task.objects.select_for_update()
            .filter(tenant=tenant, agent=agent, subject=subject, public_id=message["taskId"])
            .first()
        )
        if task is None:
            raise TaskNotFound(f"Task {message['taskId']} was not found.", taskId=message["taskId"])
        if message.get("contextId") and message["contextId"] != task.wire_context_id:
            raise InvalidParams(
                "message.contextId", "does not match the task's contextId", taskId=task.public_id
            )
        # The answer's messageId is its idempotency key: a retry is applied once.
        if any(
            m.get("messageId") == message["messageId"] and m.get("role") == "ROLE_USER"
            for m in task.history
        ):
            return SendResult(task=task, replayed=True)
        if task.is_terminal:
            raise UnsupportedOperation(
                f"Task {task.public_id} is {task.get_state_display()}; a terminal task takes no more messages. "
                "Send a new message without taskId to start a new task in the same context.",
                taskId=task.public_id,
            )
        interaction = task.interactions.filter(state=Interaction.State.OPEN).first()
        if interaction is None:
            raise UnsupportedOperation(
                f"Task {task.public_id} is not waiting for input; it is {task.get_state_display()}.",
                taskId=task.public_id,
            )
        answer = answer_from_message(interaction, message)
        stored = {
            **message,
            "contextId": task.wire_context_id,
            "taskId": task.public_id,
            "role": "ROLE_USER",
        }
        _close_interaction(
            task=task,
            interaction=interaction,
            answer=answer,
            by=subject,
            via="inband",
            message_id=message["messageId"],
            message=stored,
        )
    return SendResult(task=task)


def answer_from_message(interaction: Interaction, message: dict) -> dict:
    """Read a caller's answer to ``interaction`` from a message (interactions/v1, seed 000)."""
    metadata = message.get("metadata") or {}
    extension = metadata.get(ext.INTERACTIONS) if isinstance(metadata, dict) else None
    field = f"message.metadata[{ext.INTERACTIONS}]"
    if extension is not None:
        if not isinstance(extension, dict):
            raise InvalidParams(field, "must be an object {interactionId, approved | value}")
        if extension.get("interactionId") != interaction.public_id:
            raise InvalidParams(
                f"{field}.interactionId",
                f"does not name the open interaction of this task ({interaction.public_id})",
            )
        if "approved" in extension:
            raw = extension["approved"]
        elif "value" in extension:
            raw = extension["value"]
        else:
            raise InvalidParams(field, "needs approved or value")
        via_extension = True
    else:
        text, data = _user_text(message)
        raw = data[0] if data else text
        via_extension = False

    if interaction.kind == Interaction.Kind.APPROVAL:
        # Profile v2: an approval is expressed only through interactions/v1; text never approves.
        if not via_extension:
            raise UnsupportedOperation(
                "This task waits for an approval; text never approves. Answer with interactions/v1 "
                f"metadata {{interactionId: {interaction.public_id}, approved: true|false}}.",
                taskId=interaction.task.public_id,
                interactionId=interaction.public_id,
            )
        if interaction.deciders == Interaction.Deciders.OPERATORS:
            raise UnsupportedOperation(
                "An operator must decide this approval; the caller cannot answer it.",
                reason="OPERATOR_DECISION_REQUIRED",
                interactionId=interaction.public_id,
            )
        if not isinstance(raw, bool):
            raise InvalidParams(f"{field}.approved", "must be true or false")
        return {"approved": raw}
    if interaction.kind == Interaction.Kind.CONNECTION:
        return {"connected": connection_answer_is_yes(raw)}
    return {"value": validate_question_answer(interaction, raw)}


def connection_answer_is_yes(raw: Any) -> bool:
    # seed 000: {"connected": true} or true (or approved: true) connects; anything else does not.
    return raw is True or (
        isinstance(raw, dict) and (raw.get("connected") is True or raw.get("approved") is True)
    )


def validate_question_answer(interaction: Interaction, value: Any) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InvalidParams("message.parts", "the answer is empty")
    choices = interaction.request.get("choices") or []
    if choices and not interaction.request.get("allowCustom", False):
        if not isinstance(value, str) or value not in choices:
            raise InvalidParams(
                "answer", f"must be one of {choices}", interactionId=interaction.public_id
            )
    return value


# --- interactions -------------------------------------------------------------------------


def audit_record(
    *,
    tenant_id: int,
    actor: str,
    action: str,
    via: str = "",
    interaction=None,
    task=None,
    detail=None,
) -> AuditEvent:
    return AuditEvent.objects.create(
        tenant_id=tenant_id,
        actor=actor,
        action=action,
        via=via,
        interaction=interaction,
        task=task,
        detail=detail or {},
    )


def audit_decision(*, interaction: Interaction, task: Task) -> AuditEvent:
    answer = interaction.answer or {}
    if interaction.state == Interaction.State.EXPIRED:
        action = "expired"
    elif interaction.kind == Interaction.Kind.APPROVAL:
        action = "approved" if answer.get("approved") else "denied"
    elif interaction.kind == Interaction.Kind.CONNECTION:
        action = "connected" if answer.get("connected") else "declined"
    else:
        action = "answered"
    return audit_record(
        tenant_id=interaction.tenant_id,
        actor=interaction.answered_by,
        action=action,
        via=interaction.answered_via,
        interaction=interaction,
        task=task,
        detail={"kind": interaction.kind, "prompt": interaction.prompt, "answer": answer},
    )


def _close_interaction(
    *,
    task: Task,
    interaction: Interaction,
    answer: dict,
    by: str,
    via: str,
    message_id: str = "",
    message: dict | None = None,
) -> Interaction:
    """Claim the open interaction for this answer and resume the turn (caller holds the task lock)."""
    now = timezone.now()
    claimed = Interaction.objects.filter(pk=interaction.pk, state=Interaction.State.OPEN).update(
        state=Interaction.State.ANSWERED if via != "expiry" else Interaction.State.EXPIRED,
        answer=answer,
        answered_by=by,
        answered_via=via,
        answered_at=now,
        answer_message_id=message_id,
    )
    interaction.refresh_from_db()
    if claimed != 1:
        raise AlreadyDecided(interaction)
    entry = {
        "type": "answer",
        "interactionId": interaction.public_id,
        "kind": interaction.kind,
        "questionId": interaction.request.get("questionId", ""),
        "by": by,
        "via": via,
        **answer,
    }
    task.transcript.append(entry)
    _set_status(task, TaskState.WORKING)  # the prompt moves into the history first
    if message is not None:
        task.history.append(message)
    task.save(
        update_fields=[
            "history",
            "transcript",
            "state",
            "status_message",
            "status_ext",
            "status_timestamp",
            "event_seq",
        ]
    )
    audit_decision(interaction=interaction, task=task)
    _enqueue_turn(task)
    return interaction


def interaction_answer(
    *, tenant, interaction_id: str, answer: dict, by: str, via: str
) -> Interaction:
    """An operator's or a program's decision on an interaction; exactly one decision wins."""
    with transaction.atomic():
        interaction = Interaction.objects.filter(tenant=tenant, public_id=interaction_id).first()
        if interaction is None:
            raise TaskNotFound("No such interaction.", interactionId=interaction_id)
        # Lock the task first (the same order as in-band answers), then claim the interaction.
        task = Task.objects.select_for_update().get(pk=interaction.task_id)
        interaction.refresh_from_db()
        if interaction.state != Interaction.State.OPEN:
            raise AlreadyDecided(interaction)
        if interaction.kind == Interaction.Kind.APPROVAL:
            if not isinstance(answer.get("approved"), bool):
                raise InvalidParams("approved", "must be true or false")
            clean = {"approved": answer["approved"]}
            if answer.get("reason"):
                clean["reason"] = str(answer["reason"])[:1000]
        elif interaction.kind == Interaction.Kind.CONNECTION:
            clean = {"connected": connection_answer_is_yes(answer.get("value", answer))}
        else:
            clean = {"value": validate_question_answer(interaction, answer.get("value"))}
        return _close_interaction(task=task, interaction=interaction, answer=clean, by=by, via=via)


def interactions_connect_app(*, tenant, app: str, by: str) -> int:
    """An app was connected: answer every open connection interaction for it with connected: true."""
    answered = 0
    ids = list(
        Interaction.objects.filter(
            tenant=tenant,
            kind=Interaction.Kind.CONNECTION,
            state=Interaction.State.OPEN,
            detail__app=app,
        ).values_list("public_id", flat=True)
    )
    for interaction_id in ids:
        try:
            interaction_answer(
                tenant=tenant,
                interaction_id=interaction_id,
                answer={"value": True},
                by=by,
                via="connection",
            )
            answered += 1
        except AlreadyDecided:
            continue
    return answered


def interactions_expire(*, now=None) -> int:
    """Expire open interactions past their expiry (beat): an approval is denied as 'expired'."""
    now = now or timezone.now()
    expired = 0
    for pk in Interaction.objects.filter(
        state=Interaction.State.OPEN, expires_at__lte=now
    ).values_list("pk", flat=True):
        with transaction.atomic():
            interaction = Interaction.objects.select_related("task").get(pk=pk)
            task = Task.objects.select_for_update().get(pk=interaction.task_id)
            interaction.refresh_from_db()
            if interaction.state != Interaction.State.OPEN:
                continue
            if interaction.kind == Interaction.Kind.APPROVAL:
                answer = {"approved": False, "reason": "expired"}
            else:
                answer = {"expired": True}
            _close_interaction(
                task=task, interaction=interaction, answer=answer, by="system:expiry", via="expiry"
            )
            expired += 1
    return expired


# --- cancel, read -------------------------------------------------------------------------


def task_cancel(*, tenant, agent: Agent, subject: str, task_id: str) -> Task:
    """Cancel a task (idempotent for a canceled task); its open interactions close."""
    with transaction.atomic():
        task = (
            Task.objects.select_for_update()
            .filter(tenant=tenant, agent=agent, subject=subject, public_id=task_id)
            .first()
        )
        if task is None:
            raise TaskNotFound(f"Task {task_id} was not found.", taskId=task_id)
        if task.state == TaskState.CANCELED:
            return task
        if task.is_terminal:
            raise TaskNotCancelable(
                f"Task {task_id} is {task.get_state_display()} and can no longer be canceled.",
                taskId=task_id,
            )
        now = timezone.now()
        Interaction.objects.filter(task=task, state=Interaction.State.OPEN).update(
            state=Interaction.State.CANCELED,
            answered_by=subject,
            answered_via="cancel",
            answered_at=now,
        )
        _end_task(task, TaskState.CANCELED, agent_message(task, "Canceled by the caller."))
    return task


def task_for_caller(*, tenant, agent: Agent, subject: str, task_id: str) -> Task:
    task = Task.objects.filter(
        tenant=tenant, agent=agent, subject=subject, public_id=task_id
    ).first()
    if task is None:
        raise TaskNotFound(f"Task {task_id} was not found.", taskId=task_id)
    return task


# --- turn scheduling ----------------------------------------------------------------------


def _enqueue_turn(task: Task) -> None:
    from config.celery import queue as celery_queue
    from runtime.tasks import run_turn

    task_pk = task.pk
    transaction.on_commit(lambda: run_turn.apply_async((task_pk,), queue=celery_queue()))


def _start_next_in_context(task: Task) -> None:
    """The task reached a terminal state: the context's next queued turn may start."""
    following = (
        Task.objects.filter(
            context_id=task.context_id, turn__gt=task.turn, state=TaskState.SUBMITTED
        )
        .order_by("turn")
        .first()
    )
    if following is not None:
        _enqueue_turn(following)


def turn_may_start(task: Task) -> bool:
    """Turns of one context run one at a time, in order."""
    return not (
        Task.objects.filter(context=task.context, turn__lt=task.turn)
        .exclude(state__in=TERMINAL_STATES)
        .exists()
    )


def effect_for(task: Task, step: int) -> Effect | None:
    return Effect.objects.filter(task=task, step=step).first()


def turns_to_sweep(
    *, now=None, stale_submitted_after: timedelta = timedelta(seconds=30)
) -> list[int]:
    """Turns whose worker died (lease ran out) or whose start message was lost."""
    now = now or timezone.now()
    working = (
        Task.objects.filter(state=TaskState.WORKING)
        .filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True))
        # A turn parked on an uncertain effect waits for an operator, not for the sweep.
        .exclude(effects__state=Effect.State.UNCERTAIN)
    )
    submitted = Task.objects.filter(
        state=TaskState.SUBMITTED,
        lease_expires_at__isnull=True,
        created_at__lt=now - stale_submitted_after,
    )
    pks = list(working.values_list("pk", flat=True)[:500])
    pks += [t.pk for t in submitted.select_related("context")[:500] if turn_may_start(t)]
    return pks


def new_run_id() -> str:
    return new_key("run_", 9)


# --- uncertain effects (effects/v1) -------------------------------------------------------

EFFECT_RESOLUTIONS = ("happened", "not_happened", "fail")


def effect_resolve(
    *, tenant, effect_id: str, resolution: str, by: str, result: Any = None, via: str = "page"
) -> Effect:
    """An operator says what became of a call whose outcome was lost.

    ``happened``: it ran, and ``result`` is what it returned; ``not_happened``: send it again;
    ``fail``: fail the task. Exactly one resolution wins; the turn resumes once.
    """
    if resolution not in EFFECT_RESOLUTIONS:
        raise InvalidParams("resolution", f"must be one of {list(EFFECT_RESOLUTIONS)}")
    with transaction.atomic():
        effect = Effect.objects.filter(tenant=tenant, public_id=effect_id).first()
        if effect is None:
            raise TaskNotFound("No such effect.", effectId=effect_id)
        task = Task.objects.select_for_update().get(pk=effect.task_id)
        effect.refresh_from_db()
        if effect.state != Effect.State.UNCERTAIN:
            raise NotAllowed(
                f"This effect is {effect.get_state_display()}; only an uncertain effect can be resolved."
            )
        now = timezone.now()
        if resolution == "happened":
            Effect.objects.filter(pk=effect.pk).update(
                state=Effect.State.SUCCEEDED,
                outcome={"result": result, "resolvedBy": by},
                closed_at=now,
            )
        elif resolution == "not_happened":
            Effect.objects.filter(pk=effect.pk).update(state=Effect.State.APPROVED, sent_at=None)
        else:
            Effect.objects.filter(pk=effect.pk).update(
                state=Effect.State.FAILED,
                outcome={"error": "failed by an operator", "resolvedBy": by},
                closed_at=now,
            )
        effect.refresh_from_db()
        audit_record(
            tenant_id=effect.tenant_id,
            actor=by,
            action=f"effect_{resolution}",
            via=via,
            task=task,
            detail={
                "effectId": effect.public_id,
                "server": effect.server,
                "tool": effect.tool,
                "result": result,
            },
        )
        if resolution == "fail":
            _end_task(
                task,
                TaskState.FAILED,
                agent_message(
                    task, f"{effect.server} / {effect.tool} failed: an operator failed the task."
                ),
            )
        else:
            # Back to plain WORKING (no `uncertain` any more); the turn continues.
            _set_status(task, TaskState.WORKING)
            task.save(
                update_fields=[
                    "state",
                    "status_message",
                    "status_ext",
                    "status_timestamp",
                    "history",
                    "event_seq",
                ]
            )
            _enqueue_turn(task)
    return effect
