"""A caller's message: it starts (or queues) a turn in its context, or answers the task it
names (in band)."""

import contextlib
import hashlib
import json
import logging
import re
import uuid
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction

from runtime.agents.agent_models import Agent
from runtime.decisions.answers import answer_from_message, group_answers_read, message_content
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction
from runtime.decisions.flow import INBAND, Decision, decision_take_locked
from runtime.decisions.group_flow import group_decisions_take_locked
from runtime.kernel import extensions as ext
from runtime.kernel.errors import AlreadyDecided, InvalidParams, UnsupportedOperation
from runtime.kernel.files import url_parts
from runtime.kernel.store import turn_rows_insert
from runtime.kernel.task_models import (
    ANONYMOUS,
    TERMINAL_STATES,
    Context,
    Task,
    TaskState,
    anonymous_subject,
)
from runtime.kernel.task_selectors import task_for_caller
from runtime.kernel.task_state import task_first_event, turn_enqueue
from runtime.turn.claim import turn_may_start
from runtime.turn.gate import gate_call_of

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
    if agent.default_skill in ids:
        # The caller is asked to choose only when no default exists.
        return agent.default_skill
    if len(ids) > 1:
        raise InvalidParams(
            "metadata.skillId", f"this agent has several skills and no default; choose one of {ids}"
        )
    return ""


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _message_digest(message: dict, *, ignore: tuple[str, ...] = ()) -> str:
    """The SHA-256 of the message's canonical JSON (sorted keys, no spaces), minus ``ignore``."""
    body = {k: v for k, v in message.items() if k not in ignore}
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def _reused_message_id(message_id: str, **metadata: str) -> InvalidParams:
    # -32602 on the wire: the request is at fault (A2A has no conflict error); a retry must
    # resend the same message, and a new message needs a new messageId.
    return InvalidParams(
        "message.messageId",
        f"{message_id!r} was already sent with a different message; "
        "a retry must resend the same message, and a new message needs a new messageId",
        **metadata,
    )


def _message_replay(
    *, tenant, agent: Agent, subject: str, message: dict, key: str, digest: str
) -> SendResult | None:
    """The task this messageId already started (a retry), or None; a different body is refused."""
    task = Task.objects.filter(tenant=tenant, agent=agent, subject=subject, message_key=key).first()
    if task is None:
        return None
    if task.message_digest != digest:
        raise _reused_message_id(message["messageId"], taskId=task.public_id)
    # A retry answers as the first send did: at once when the turn waits behind another.
    queued = task.state == TaskState.SUBMITTED and not turn_may_start(task)
    return SendResult(task=task, queued=queued, replayed=True)


def message_send(
    *,
    tenant,
    agent: Agent,
    subject: str,
    message: dict,
    skill_id: str | None = None,
    delivery: str | None = None,
    dialect: str = "1.0",
    direct: bool = False,
    live: bool = False,
) -> SendResult:
    """Take a caller's message: start (or queue) a turn, or answer the task it names.
    ``dialect`` is the A2A version the caller spoke, recorded on a task it starts; ``direct``
    starts it as a direct send that hands out no task until the edge says so (Task.direct);
    ``live``: the message came on a stream, which gets the model's text as it is written
    (Task.live).

    The messageId is the idempotency key per caller: a retry returns the task the
    first send started and starts nothing."""
    if message.get("taskId"):
        return _message_to_task(
            tenant=tenant, agent=agent, subject=subject, message=message, live=live
        )
    if subject == ANONYMOUS:
        # Nothing tells one anonymous caller from another (or a retry from a stranger who
        # guessed the messageId), so each message starts a task with a subject of its own:
        # no task, context or messageId is shared with another anonymous caller.
        subject = anonymous_subject()
    skill = _skill_for(agent, skill_id)
    if agent.is_gate:
        # The call a gate is asked about, checked before anything is written (runtime.turn.gate).
        gate_call_of(agent, message_content(message)[1])
    context_id = message.get("contextId") or str(uuid.uuid4())
    if not CONTEXT_ID_RE.fullmatch(context_id):
        raise InvalidParams(
            "message.contextId", "must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
        )
    scope = {"tenant": tenant, "agent": agent, "subject": subject}
    key, digest = _sha256(message["messageId"]), _message_digest(message)
    # No look for a retry out here: the common send is a new message, and a retry is found
    # where it must be anyway, under the context's lock or by the unique messageId index.
    try:
        return _turn_start(
            **scope,
            message=message,
            skill=skill,
            context_id=context_id,
            new_context=not message.get("contextId"),
            delivery=delivery,
            key=key,
            digest=digest,
            dialect=dialect,
            direct=direct,
            live=live,
        )
    except IntegrityError:
        # The messageId was sent before (a retry: in a new context, or in another context, so
        # not behind our context lock), or a copy sent at the same time committed first;
        # task_message_unique_per_caller refused ours: return its task.
        if replay := _message_replay(**scope, message=message, key=key, digest=digest):
            return replay
        raise


def _turn_start(
    *,
    tenant,
    agent: Agent,
    subject: str,
    message: dict,
    skill: str,
    context_id: str,
    new_context: bool,
    delivery: str | None,
    key: str,
    digest: str,
    dialect: str = "1.0",
    direct: bool = False,
    live: bool = False,
) -> SendResult:
    text, data = message_content(message)
    # A new context's rows are one statement on PostgreSQL (turn_rows_insert), a transaction
    # of its own: no BEGIN and COMMIT around it. Inside a caller's transaction (tests) the
    # savepoint stays, so that a refused retry leaves that transaction usable.
    alone = new_context and connection.vendor == "postgresql" and not connection.in_atomic_block
    with contextlib.nullcontext() if alone else transaction.atomic(durable=True):
        if new_context:
            # A context id made for this message: no other turn is in it and nobody else can
            # name it, so there is no queue to lock or to wait behind. A retry of the message
            # (same messageId) is refused by task_message_unique_per_caller as the task is
            # written, and message_send answers it with the first send's task.
            context = Context(
                tenant=tenant, agent=agent, subject=subject, context_id=context_id, turns=1
            )
            busy = False
        else:
            taken, busy = _context_turn_take(
                tenant=tenant,
                agent=agent,
                subject=subject,
                context_id=context_id,
                message=message,
                key=key,
                digest=digest,
                delivery=delivery,
            )
            if isinstance(taken, SendResult):
                transaction.set_rollback(True)
                return taken
            context = taken
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
            message_key=key,
            message_digest=digest,
            dialect=dialect,
            direct=direct,
            live=live,
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
        event = task_first_event(task)
        turn_rows_insert(context if new_context else None, task, event)
        # A queued turn is published too: its claim waits for the turn before it to end
        # (runtime.turn.claim), and that end starts it (task_end) unless it was
        # committing as this message came in, in which case the claim is what starts it.
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


def _context_turn_take(
    *,
    tenant,
    agent: Agent,
    subject: str,
    context_id: str,
    message: dict,
    key: str,
    digest: str,
    delivery: str | None,
) -> tuple[Context | SendResult, bool]:
    """Number the next turn of a context the caller named: (context, whether a turn of it is
    still running), or (the first send's result, False) for a retry. In the caller's
    transaction."""
    context, _ = Context.objects.get_or_create(
        tenant=tenant, agent=agent, subject=subject, context_id=context_id
    )
    # The context row is the queue's lock: turns of one context are numbered and run in order.
    context = Context.objects.select_for_update().get(pk=context.pk)
    # Behind the lock a duplicate in this context has committed: a retry queues nothing
    # (and leaves no context behind, when its own was made for it; the caller rolls back).
    if replay := _message_replay(
        tenant=tenant, agent=agent, subject=subject, message=message, key=key, digest=digest
    ):
        return replay, False
    busy = Task.objects.filter(context=context).exclude(state__in=TERMINAL_STATES).exists()
    if busy and (delivery or "") == "reject":
        raise UnsupportedOperation(
            "The context has a turn in progress, and the message asked not to be queued.",
            reason="CONTEXT_BUSY",
            contextId=context_id,
        )
    context.turns += 1
    context.save(update_fields=["turns"])
    return context, busy


@transaction.atomic(durable=True)
def _message_to_task(
    *, tenant, agent: Agent, subject: str, message: dict, live: bool = False
) -> SendResult:
    """The caller answers the open interaction of the task its message names; ``live``:
    on a stream, which the resumed turn writes its model's text to (Task.live)."""
    task = task_for_caller(
        tenant=tenant, agent=agent, subject=subject, task_id=message["taskId"], lock=True
    )
    task.tenant = tenant  # a decision's receipt names it: not read again
    if message.get("contextId") and message["contextId"] != task.wire_context_id:
        raise InvalidParams(
            "message.contextId", "does not match the task's contextId", taskId=task.public_id
        )
    # The answer's messageId is its idempotency key: a retry is applied once, and a different
    # message under it is refused. contextId and taskId are the server's to fill in.
    sent = next(
        (
            m
            for m in task.history
            if m.get("messageId") == message["messageId"] and m.get("role") == "ROLE_USER"
        ),
        None,
    )
    if sent is not None:
        server_filled = ("contextId", "taskId", "role")
        if _message_digest(sent, ignore=server_filled) != _message_digest(
            message, ignore=server_filled
        ):
            raise _reused_message_id(message["messageId"], taskId=task.public_id)
        return SendResult(task=task, replayed=True)
    _decided_check(task, message)
    if task.is_terminal:
        raise UnsupportedOperation(
            f"Task {task.public_id} is {task.get_state_display()}; a terminal task takes no more messages. "
            "Send a new message without taskId to start a new task in the same context.",
            taskId=task.public_id,
        )
    waiting = list(
        task.interactions.filter(state=Interaction.State.OPEN).order_by("group_position")
    )
    interaction = _interaction_answered(waiting, message)
    if interaction is None:
        raise UnsupportedOperation(
            f"Task {task.public_id} is not waiting for input; it is {task.get_state_display()}.",
            taskId=task.public_id,
        )
    # One answer for a group (interactions/v1 ``answers`` or ``all``): every open call at
    # once, or (an entry wrong, a call left out) none.
    answers = group_answers_read(waiting, message) if not _named_interaction(message) else None
    answer = answer_from_message(interaction, message) if answers is None else {}
    stored = {
        **message,
        "contextId": task.wire_context_id,
        "taskId": task.public_id,
        "role": "ROLE_USER",
    }
    if task.live != live:
        # Before the decision resumes the turn: its run reads it when it claims the task.
        task.live = live
        Task.objects.filter(pk=task.pk).update(live=live)
    # The task's own subject: an anonymous caller's "anonymous" names no one.
    decider = Decider.of_caller(task.subject)
    if answers is not None:
        # Decided as the operators' "approve all" is: each call through the one flow, in
        # this transaction, under the lock taken above; the first refusal undoes them all.
        group_decisions_take_locked(
            task=task,
            group_id=interaction.group_id,
            calls=waiting,
            decisions={
                public_id: _in_band_decision(value, stored) for public_id, value in answers.items()
            },
            decider=decider,
            channel=INBAND,
            message=stored,
        )
        return SendResult(task=task)
    # The caller decides through the one decision flow, under the lock taken above.
    decision_take_locked(
        task=task,
        interaction=interaction,
        decider=decider,
        decision=_in_band_decision(answer, stored),
        channel=INBAND,
    )
    return SendResult(task=task)


def _interaction_answered(waiting: list[Interaction], message: dict) -> Interaction | None:
    """The open interaction the caller's message answers: the one it names among those the
    task waits on (``waiting``: the calls of an approval group are open together, and each is
    answered on its own), else the first of them; None when the task waits on nothing."""
    named = _named_interaction(message)
    return next((i for i in waiting if i.public_id == named), waiting[0] if waiting else None)


def _named_interaction(message: dict) -> str | None:
    metadata = message.get("metadata")
    named = metadata.get(ext.INTERACTIONS) if isinstance(metadata, dict) else None
    interaction_id = named.get("interactionId") if isinstance(named, dict) else None
    return interaction_id if isinstance(interaction_id, str) and interaction_id else None


def _in_band_decision(answer: dict, message: dict) -> Decision:
    """The caller's answer (runtime.decisions.answers.answer_from_message) as a Decision."""
    if "approved" in answer:
        return Decision(approved=answer["approved"], message=message)
    if "connected" in answer:
        return Decision(value=answer["connected"], message=message)
    return Decision(value=answer["value"], message=message)


def _decided_check(task: Task, message: dict) -> None:
    """An answer that names an interaction someone else already decided (an operator, the
    expiry, a cancel) gets AlreadyDecided, saying by whom and when, whatever the task's state."""
    interaction_id = _named_interaction(message)
    if interaction_id is None:
        return
    interaction = task.interactions.filter(public_id=interaction_id).first()
    if interaction is not None and interaction.state != Interaction.State.OPEN:
        raise AlreadyDecided(interaction)
