"""Interactions: a turn pauses on one (a question, an approval, a connection), and exactly one
answer (in band, by an operator or a program, or the expiry) closes it and resumes the turn."""

import contextlib
import logging
from collections.abc import Iterable, Iterator
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from runtime.decisions.answers import text_problem
from runtime.decisions.approval_groups import (
    HeldApproval,
    group_call_closed,
    group_pause_ext,
    group_prompt,
    interaction_wire,
    new_group_id,
)
from runtime.decisions.decision_metrics import decision_observe
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import held_call_known, held_call_of
from runtime.decisions.receipts import audit_decision, decision_outcome, decision_receipt
from runtime.decisions.search import SEARCH_TEXT_MAX, listing_columns
from runtime.kernel import extensions as ext
from runtime.kernel.errors import AlreadyDecided, TaskNotFound
from runtime.kernel.rowsql import row_move
from runtime.kernel.shapes import agent_message
from runtime.kernel.signals import interaction_changed, interaction_opened
from runtime.kernel.store import decision_interaction_read, decision_task_lock
from runtime.kernel.task_models import Task, TaskState
from runtime.kernel.task_state import (
    task_pause,
    task_status_set,
    turn_enqueue,
    with_plan,
)
from runtime.policy.ladders import LadderError, expiry_seconds, steps_parse, steps_stored
from runtime.policy.lookup import Policy

logger = logging.getLogger(__name__)


def interaction_open(
    *,
    task: Task,
    kind: str,
    public_id: str,
    prompt: str,
    detail: dict,
    request: dict,
    state: str,
    deciders: str = "operators",
    approvers: Iterable[str] = (),
    approvals_required: int = 1,
    risk: str = Interaction.Risk.NORMAL,
    also: Iterable[str] = (),
) -> Interaction:
    """Pause the turn on a question, approval or connection (the caller holds the task lock).

    ``approvers``, ``approvals_required`` and ``risk``: what the held call's policy asks for as
    it opens; a decision never asks less (runtime.decisions.approvers.approval_needs)."""
    interaction = _interaction_row(
        task=task,
        kind=kind,
        public_id=public_id,
        prompt=prompt,
        detail=detail,
        request=request,
        deciders=deciders,
        approvers=list(approvers),
        approvals_required=approvals_required,
        risk=risk,
    )
    interaction.save(force_insert=True)
    task_pause(
        task,
        state,
        agent_message(task, prompt),
        status_ext=with_plan(task, {ext.INTERACTIONS: interaction_wire(interaction)}),
        also=also,
    )
    # Notifications (an edge the core does not import) fan the pause out to people; their
    # receiver only defers that work until this transaction commits: it writes nothing here.
    interaction_opened.send(sender=Interaction, interaction=interaction)
    logger.info("turn paused: %s %s", kind, public_id)
    return interaction


def _interaction_row(
    *, task: Task, kind: str, public_id: str, prompt: str, detail, request, **more
):
    """A new interaction of ``task``, not yet saved."""
    return Interaction(
        **listing_columns(
            task=task, public_id=public_id, kind=kind, prompt=prompt, detail=detail, request=request
        ),
        public_id=public_id,
        tenant_id=task.tenant_id,
        task=task,
        agent_id=task.agent_id,
        kind=kind,
        prompt=prompt,
        detail=detail,
        request=request,
        subject=task.subject,
        expires_at=timezone.now()
        + timedelta(seconds=interaction_expiry_seconds(task, kind, detail, request)),
        **more,
    )


def interaction_group_open(
    *, task: Task, calls: list[HeldApproval], also: Iterable[str] = ()
) -> list[Interaction]:
    """Pause the turn on the held calls of one model reply, as one approval group
    (runtime.decisions.approval_groups), in the transaction that journalled them (the caller
    holds the task lock): one approval per call, in the reply's order, the first listed in the
    inbox for the group; one pause listing them all."""
    group_id = new_group_id()
    now = timezone.now()
    rows = []
    for position, call in enumerate(calls):
        row = _interaction_row(
            task=task,
            kind=Interaction.Kind.APPROVAL,
            public_id=call.public_id,
            prompt=call.prompt,
            detail=call.detail,
            request=call.request,
            deciders=call.deciders,
            approvers=list(call.approvers),
            approvals_required=call.approvals_required,
            risk=call.risk,
            group_id=group_id,
            group_position=position,
            listed=position == 0,
            created_at=now,  # one moment: the inbox lists the group once, at its time
        )
        rows.append(row)
    # Whichever call is the group's row in the inbox, the search finds the group by any of
    # its calls (each call's own text never holds a value its policy redacts).
    found = "\n".join(row.search_text for row in rows)[:SEARCH_TEXT_MAX]
    for row in rows:
        row.search_text = found
        row.save(force_insert=True)
    task_pause(
        task,
        TaskState.AUTH_REQUIRED,
        agent_message(task, group_prompt(rows, len(rows))),
        status_ext=group_pause_ext(task, group_id=group_id, members=rows),
        also=also,
    )
    # Notifications (an edge the core does not import) fan the pause out to people; their
    # receiver only defers that work until this transaction commits: it writes nothing here.
    for row in rows:
        interaction_opened.send(sender=Interaction, interaction=row)
    logger.info("turn paused: a group of %s approvals %s", len(rows), group_id)
    return rows


def interaction_expiry_seconds(task: Task, kind: str, detail: dict, request: dict) -> int:
    """The agent's expiry for a new interaction: a held call's may be its own
    (runtime.policy.ladders: the expire step of its policy rule's ladder, or of an AGENT.md
    ladder for its tool, else interactionTtlSeconds)."""
    held = kind == Interaction.Kind.APPROVAL and detail.get("server")
    tool = f"{detail['server']}/{detail.get('tool', '')}" if held else ""
    steps = request.get("ladder") if held else None
    return expiry_seconds(task.agent, tool=tool, steps=steps)


def approval_request(*, step: int, policy: Policy) -> dict:
    """The server-side ``request`` of an approval that holds a call: its transcript step,
    the rule of the tool policy that held it (runtime.policy.rules: kept here, not in
    ``detail``, since its conditions name argument values), the stages it asks for when
    more than one, and the rule's own ladder, parsed."""
    request: dict = {"step": step}
    if policy.rule is not None:
        request["policyRule"] = policy.rule.stored()
        ladder = policy.rule.rule.get("ladder")
        if ladder:
            try:
                request["ladder"] = steps_stored(steps_parse(ladder))
            except LadderError:
                # Stored around its checks (load_agents and admin parse it): the approval
                # still opens, with the tool's or the agent's ladder.
                logger.warning("a policy rule's ladder of %s cannot be read", policy.rule.entry)
    if len(policy.stages) > 1:
        request["stages"] = [stage.stored() for stage in policy.stages]
    return request


def interaction_close(
    *,
    task: Task,
    interaction: Interaction,
    answer: dict,
    by: str,
    via: str,
    message_id: str = "",
    message: dict | None = None,
    stepped_up: bool = False,
    shown_hash: str | None = None,
    edited: bool = False,
    decider_kind: str = "",
    channel_user: str = "",
) -> Interaction:
    """Claim the open interaction for this answer and resume the turn (caller holds the task lock).

    The close of every decision (runtime.decisions.flow, which has checked who decides and
    how) and of the expiry. ``stepped_up``: the decider re-authenticated recently (risk: high);
    ``shown_hash`` and ``edited`` go on the decision's receipt
    (runtime.decisions.receipts), ``channel_user`` on it and the audit row, with
    ``decider_kind`` (a person, a program, the caller).
    """
    decision = {
        "state": Interaction.State.ANSWERED if via != "expiry" else Interaction.State.EXPIRED,
        "answer": answer,
        "answered_by": by,
        "answered_via": via,
        "answered_at": timezone.now(),
        "answer_message_id": message_id,
    }
    if edited:
        # The call's record, with the arguments sent (receipts.decision_edit_apply), and
        # what the item is found by with them.
        decision["request"] = interaction.request
        decision |= listing_columns(
            task=task,
            public_id=interaction.public_id,
            kind=interaction.kind,
            prompt=interaction.prompt,
            detail=interaction.detail,
            request=interaction.request,
        )
    claimed = row_move(
        Interaction, interaction.pk, where={"state": Interaction.State.OPEN}, values=decision
    )
    if claimed != 1:
        interaction.refresh_from_db()
        raise AlreadyDecided(interaction)
    # What the row now says, without reading it back; and the (locked) task it belongs to.
    for name, value in decision.items():
        setattr(interaction, name, value)
    interaction.task = task
    decision_observe(interaction)
    entry = {
        "type": "answer",
        "interactionId": interaction.public_id,
        "kind": interaction.kind,
        "questionId": interaction.request.get("questionId", ""),
        "by": by,
        "via": via,
        **answer,
    }
    held = held_call_of(interaction) if edited else None
    if held is not None:  # edited: only a held call's arguments are
        # The model is told that the call went out with other arguments, and which
        # (runtime.llm reads this entry beside the call's result).
        entry["step"] = interaction.request.get("step")
        entry["arguments"] = held.arguments
    task.transcript.append(entry)
    # One call of a group: the turn resumes once the last of them has its decision.
    resumed = (
        group_call_closed(task=task, interaction=interaction, message=message)
        if interaction.group_id
        else decision_outcome(interaction)
    )
    if resumed is not None:
        task_status_set(
            task,
            TaskState.WORKING,
            status_ext=resumed,
            history_append=message,
            also=("transcript",),
        )
    audit = audit_decision(
        interaction=interaction, task=task, decider_kind=decider_kind, channel_user=channel_user
    )
    decision_receipt(
        task=task,
        interaction=interaction,
        shown_hash=shown_hash,
        edited=edited,
        stepped_up=stepped_up,
        channel_user=channel_user,
    )
    if resumed is not None:
        turn_enqueue(task)
    interaction_changed.send(
        sender=Interaction,
        interaction=interaction,
        event="expired" if via == "expiry" else "decided",
        audit=audit,
    )
    return interaction


@contextlib.contextmanager
def interaction_locked(*, tenant, interaction_id: str) -> Iterator[tuple[Task, Interaction]]:
    """The task of the tenant's interaction, locked, and the interaction read under that lock
    (with its held call, and the task's agent loaded): a decision's reads, in the caller's
    transaction; TaskNotFound for another tenant's id as for a missing one."""
    # An id PostgreSQL cannot compare (a NUL, a lone surrogate: a DataError, an encoding
    # error) names nothing, whichever channel passed it on.
    if not isinstance(interaction_id, str) or text_problem(interaction_id):
        raise TaskNotFound("No such interaction.")
    # Lock the task first (the same order as in-band answers), found through the interaction
    # (only the task's row is locked), then read the interaction under that lock and claim it.
    task = decision_task_lock(tenant=tenant, interaction_id=interaction_id)
    read = decision_interaction_read(task=task, interaction_id=interaction_id) if task else None
    if task is None or read is None:
        raise TaskNotFound("No such interaction.", interactionId=interaction_id)
    interaction, effect = read
    held_call_known(interaction, effect)
    yield task, interaction


def interactions_expire(*, now=None) -> int:
    """Expire open interactions past their expiry (beat): an approval is denied as 'expired'."""
    now = now or timezone.now()
    pks = Interaction.objects.filter(state=Interaction.State.OPEN, expires_at__lte=now).values_list(
        "pk", flat=True
    )
    return sum(interaction_expire(pk=pk) for pk in pks)


@transaction.atomic(durable=True)
def interaction_expire(*, pk: int) -> bool:
    """Expire one interaction if it is still open (the beat's, and a tool server's question
    whose wait ran out: runtime.turn.elicitation); False when it was closed already."""
    interaction = Interaction.objects.select_related("task").get(pk=pk)
    task = Task.objects.select_for_update().get(pk=interaction.task_id)
    interaction.refresh_from_db()
    if interaction.state != Interaction.State.OPEN:
        return False
    if interaction.kind == Interaction.Kind.APPROVAL:
        answer = {"approved": False, "reason": "expired"}
    else:
        answer = {"expired": True}
    interaction_close(
        task=task, interaction=interaction, answer=answer, by="system:expiry", via="expiry"
    )
    return True
