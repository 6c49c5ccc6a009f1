"""A caller's message: it starts (or queues) a turn in its context, or answers the task it
names (in band)."""

import logging
import re
import uuid
from dataclasses import dataclass

from django.db import transaction

from runtime.answers import answer_from_message, message_content
from runtime.errors import InvalidParams, UnsupportedOperation
from runtime.files import url_parts
from runtime.models import TERMINAL_STATES, Agent, Context, Interaction, Task, TaskState
from runtime.selectors import task_for_caller
from runtime.services.interactions import interaction_close
from runtime.task_state import task_status_announce, turn_enqueue

logger = logging.getLogger(__name__)

CONTEXT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$")


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
    if not CONTEXT_ID_RE.fullmatch(context_id):
        raise InvalidParams(
            "message.contextId", "must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
        )
    text, data = message_content(message)
    with transaction.atomic(durable=True):
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
                    # Fetched by the worker when the turn starts (runtime.turn.inputs).
                    "urls": url_parts(message),
                }
            ],
        )
        task.save()
        task_status_announce(task)
        if not busy:
            turn_enqueue(task)
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


@transaction.atomic(durable=True)
def _message_to_task(*, tenant, agent: Agent, subject: str, message: dict) -> SendResult:
    """The caller answers the open interaction of the task its message names."""
    task = task_for_caller(
        tenant=tenant, agent=agent, subject=subject, task_id=message["taskId"], lock=True
    )
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
    interaction_close(
        task=task,
        interaction=interaction,
        answer=answer,
        by=subject,
        via="inband",
        message_id=message["messageId"],
        message=stored,
    )
    return SendResult(task=task)
