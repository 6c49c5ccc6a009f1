"""The one writer of an interaction's life, as runtime.kernel.task_state is of a task's: a
turn pauses on an interaction (a question, an approval, a connection), and exactly one
answer (in band, by an operator or a program, or the expiry) closes it and resumes the turn.

- open: ``interaction_open``, ``approval_open`` (one held call), ``interaction_group_open``
  (the held calls of one model reply: runtime.decisions.approval_groups);
- one approval of several (a quorum, stages): ``approval_record``;
- widen who may decide (an escalation step): ``interaction_widen``;
- close: ``interaction_close`` (a decision: runtime.decisions.flow; the expiry:
  ``interaction_expire``);
- move its deadline (an operator's extension, an escalation on expiry):
  ``interaction_deadline_move``;
- void and re-open an approval that no longer matches its call: ``approval_reopen``;
- cancel, with its task: ``interactions_cancel``.

Nothing else writes Interaction or InteractionApproval rows or sends
runtime.kernel.signals' ``interaction_opened`` and ``interaction_changed``
(tests/test_architecture.py holds it). Every function runs in the caller's transaction with
the task's row locked, but ``interaction_expire``, a transaction of its own that takes it.
"""

import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from runtime.decisions.answers import Answer
from runtime.decisions.approval_groups import (
    HeldApproval,
    group_members,
    group_pause_ext,
    group_pause_set,
    group_prompt,
    interaction_wire,
    new_group_id,
    pause_message,
    pause_restate,
)
from runtime.decisions.deadlines import (
    deadline_of,
    escalation_end,
    expiry_outcome_now,
    interaction_expiry,
)
from runtime.decisions.decision_metrics import decision_observe
from runtime.decisions.decision_models import Effect, Interaction, InteractionApproval
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.interaction_rows import approval_row, interaction_row
from runtime.decisions.progress import recorded_facts
from runtime.decisions.receipts import decision_outcome, decision_receipt, decision_word
from runtime.decisions.search import SEARCH_TEXT_MAX, listing_of
from runtime.decisions.summaries import held_call_summary
from runtime.kernel import extensions as ext
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import AlreadyDecided
from runtime.kernel.signals import interaction_changed, interaction_opened
from runtime.kernel.task_models import AuditEvent, Task, TaskState
from runtime.kernel.task_state import (
    TurnBatch,
    batched,
    row_move_with,
    task_pause,
    task_status_set,
    turn_enqueue,
    with_plan,
)
from runtime.policy.approver_syntax import ROLES
from runtime.policy.lookup import Policy
from runtime.policy.needs import Needs

logger = logging.getLogger(__name__)


# --- open ----------------------------------------------------------------------------------


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
    expires_by: datetime | None = None,
) -> Interaction:
    """Pause the turn on a question, approval or connection (the caller holds the task lock).

    ``approvers``, ``approvals_required`` and ``risk``: what the held call's policy asks for as
    it opens; a decision never asks less (runtime.decisions.approvers.approval_needs).
    ``expires_by``: it expires then at the latest (a tool server's question, which its call
    waits for)."""
    interaction = interaction_row(
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
        expires_by=expires_by,
    )
    interaction.save(force_insert=True)
    _paused_on(task, interaction, state=state, text=prompt, also=also)
    logger.info("turn paused: %s %s", kind, public_id)
    return interaction


def _paused_on(task: Task, interaction: Interaction, *, state: str, text: str, also) -> None:
    """The turn pauses on ``interaction`` (open), saying ``text``; those who tell people of
    it are told."""
    task_pause(
        task,
        state,
        pause_message(task, text, interaction),
        status_ext=with_plan(task, {ext.INTERACTIONS: interaction_wire(interaction)}),
        also=also,
    )
    # Notifications (an edge the core does not import) fan the pause out to people; their
    # receiver only defers that work until this transaction commits: it writes nothing here.
    interaction_opened.send(sender=Interaction, interaction=interaction)


def approval_open(*, task: Task, held: HeldApproval, also: Iterable[str] = ()) -> Interaction:
    """Pause the turn on the approval of one held call (runtime.turn.calls holds it)."""
    return interaction_open(
        task=task,
        kind=Interaction.Kind.APPROVAL,
        public_id=held.public_id,
        prompt=held.prompt,
        detail=held.detail,
        request=held.request,
        state=TaskState.AUTH_REQUIRED,
        deciders=held.deciders,
        approvers=held.approvers,
        approvals_required=held.approvals_required,
        risk=held.risk,
        also=also,
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
        row = approval_row(
            task,
            call,
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
        pause_message(task, group_prompt(rows, len(rows)), rows[0]),
        status_ext=group_pause_ext(task, group_id=group_id, members=rows),
        also=also,
    )
    # Notifications (an edge the core does not import) fan the pause out to people; their
    # receiver only defers that work until this transaction commits: it writes nothing here.
    for row in rows:
        interaction_opened.send(sender=Interaction, interaction=row)
    logger.info("turn paused: a group of %s approvals %s", len(rows), group_id)
    return rows


# --- one approval of several, and who may decide ---------------------------------------------


def approval_record(
    *, task: Task, interaction: Interaction, answer: Answer, needs: Needs
) -> list[dict]:
    """Record one person's approval of an approval that needs several (``needs``: what it
    needs now) and return the approvals that count with it. While they are fewer than
    ``needs.required`` the interaction stays open with them and with what it needs now (never
    less than it opened with), and the approval has its receipt and audit row; once they make
    up the number, the caller closes it with them (``Answer.approvals``)."""
    at = timezone.now()
    # The database's word on one approval per person (in any stage): the unique constraint.
    InteractionApproval.objects.create(
        tenant_id=interaction.tenant_id,
        interaction=interaction,
        by=answer.by,
        via=answer.via,
        binds=needs.binds,
        at=at,
    )
    stage = needs.stage + 1
    entry = {"by": answer.by, "via": answer.via, "at": at.isoformat(), "binds": needs.binds}
    approvals = [*needs.approved, {**entry, "stage": stage}]
    if len(approvals) >= needs.required:
        return approvals
    request = interaction.request or {}
    if needs.staged:
        request = {**request, "stages": [s.stored() for s in needs.stages]}
    Interaction.objects.filter(pk=interaction.pk).update(
        approvals=approvals, approvals_required=needs.required, request=request
    )
    interaction.approvals, interaction.approvals_required = approvals, needs.required
    interaction.request = request
    detail, waits = recorded_facts(needs, len(approvals), stage)
    # A decision like any other: its receipt binds what this person approved. The call's
    # sending is bound by the last approval's receipt (interaction_close).
    reason = f"{len(approvals)} of {needs.required}: the call waits for {waits}"
    decision_receipt(task=task, interaction=interaction, answer=answer, reason=reason)
    _changed(interaction, task, answer, event="recorded", action="approval_recorded", detail=detail)
    pause_restate(task=task, interaction=interaction)
    return approvals


def interaction_widen(*, interaction: Interaction, roles, by: str, step: int) -> bool:
    """An escalation step widens who may decide an open approval to ``roles`` from now on;
    recorded on the interaction and audited. Runs inside the caller's transaction (the
    ladder's step); False when there was nothing to add or the interaction is decided."""
    added = [r for r in roles if r in ROLES and r not in (interaction.widened_to or ())]
    if not added or interaction.kind != Interaction.Kind.APPROVAL:
        return False
    widened = [*(interaction.widened_to or ()), *added]
    # Conditional on the row still being open: a decision in between ends the ladder.
    if (
        Interaction.objects.filter(pk=interaction.pk, state=Interaction.State.OPEN).update(
            widened_to=widened
        )
        != 1
    ):
        return False
    interaction.widened_to = widened
    audit_record(
        tenant_id=interaction.tenant_id,
        actor=by,
        action="widened",
        via="ladder",
        interaction=interaction,
        task=interaction.task,
        detail={
            "kind": interaction.kind,
            "prompt": interaction.prompt,
            "step": step,
            "roles": added,
        },
    )
    return True


def _changed(
    interaction: Interaction, task: Task, answer: Answer, *, event: str, action: str, detail: dict
) -> None:
    """Audit what ``answer`` did to ``interaction`` (``action``, with ``detail``, the kind of
    decider and who the channel knew them as) and tell those who hear of its changes
    (``event``: runtime.kernel.signals.interaction_changed)."""
    audit = _audited(interaction, task, answer, action=action, detail=detail)
    interaction_changed.send(sender=Interaction, interaction=interaction, event=event, audit=audit)


def _audited(interaction, task, answer: Answer, *, action, detail, batch=None) -> AuditEvent:
    """``_changed``'s audit row, written now or with ``batch``'s statement (a TurnBatch)."""
    detail = {"kind": interaction.kind, "prompt": interaction.prompt, **detail}
    if answer.decider_kind:
        # A person, a program or the caller (runtime.decisions.approvers.Decider): what the
        # follow-ups of a decision say of who took it.
        detail["deciderKind"] = answer.decider_kind
    if answer.channel_user:
        # Who the channel knew the decider as (a Slack user id, a link's address).
        detail["channelUser"] = answer.channel_user
    if answer.on_behalf_of:
        detail["onBehalfOf"] = answer.on_behalf_of  # "by <actor> for <onBehalfOf>"
    return audit_record(
        tenant_id=interaction.tenant_id,
        actor=answer.by,
        action=action,
        via=answer.via,
        interaction=interaction,
        task=task,
        detail=detail,
        batch=batch,
    )


# --- close ---------------------------------------------------------------------------------


def interaction_close(*, task: Task, interaction: Interaction, answer: Answer) -> Interaction:
    """Claim the open interaction for ``answer`` and resume the turn (caller holds the task
    lock): the close of every decision (runtime.decisions.flow, which has checked who decides
    and how) and of the expiry, with its transcript entry, audit row and receipt."""
    # An approval on expiry (risk: low, where the tenant allows it) is an answer, not an expiry.
    expiry = answer.via == "expiry" and answer.value.get("approved") is not True
    decision = {
        "state": Interaction.State.EXPIRED if expiry else Interaction.State.ANSWERED,
        "answer": answer.value,
        "answered_by": answer.by,
        "answered_via": answer.via,
        "answered_at": timezone.now(),
        "answer_message_id": (answer.message or {}).get("messageId", ""),
    }
    if answer.approvals is not None:
        decision["approvals"] = answer.approvals  # the quorum this answer made up
    if answer.edited:
        # The call's record, with the arguments sent (receipts.decision_edit_apply), and
        # what the item is found by with them.
        decision |= {"request": interaction.request, **listing_of(task, interaction)}
    # The status change, the receipt, the audit row and (but for a group's call, whose
    # members are read again) the claim go in one statement when this close writes its own
    # batch; under a caller's (a run's, an in-band answer's) the rows are written at once.
    batch = TurnBatch() if getattr(task, "turn_batch", None) is None else None
    open_ = {"state": Interaction.State.OPEN}
    claimed_by = batch if not interaction.group_id else None
    claim = row_move_with(claimed_by, Interaction, interaction.pk, where=open_, values=decision)
    if claim is not None and claim != 1:
        interaction.refresh_from_db()
        raise AlreadyDecided(interaction)
    # What the row now says, without reading it back; and the (locked) task it belongs to.
    for name, value in decision.items():
        setattr(interaction, name, value)
    interaction.task = task
    entry = {
        "type": "answer",
        "interactionId": interaction.public_id,
        "kind": interaction.kind,
        "questionId": interaction.request.get("questionId", ""),
        "by": answer.by,
        "via": answer.via,
        **answer.value,
    }
    held = held_call_of(interaction)
    if held is not None and answer.edited:
        # The model is told that the call went out with other arguments, and which
        # (runtime.llm reads this entry beside the call's result).
        entry |= {"step": interaction.request.get("step"), "arguments": held.arguments}
    task.transcript.append(entry)
    with batched(task, batch):
        turn_resume(task=task, interaction=interaction, message=answer.message)
        decision_receipt(task=task, interaction=interaction, answer=answer, batch=batch)
        what: dict = {"answer": answer.value}
        if interaction.kind == Interaction.Kind.APPROVAL:
            # What was decided, as every list shows it (redacted): the audit row says it even
            # once the item is gone.
            what["summary"] = held_call_summary(interaction)
        action = decision_word(interaction)
        audit = _audited(interaction, task, answer, action=action, detail=what, batch=batch)
    if claimed_by is not None and claimed_by.moved[0] != 1:  # the batch's first move
        # The claim, made with the batch: nothing of it stays (the caller's transaction
        # ends with this error), and nobody was told.
        interaction.refresh_from_db()
        raise AlreadyDecided(interaction)
    decision_observe(interaction)
    event = "expired" if expiry else "decided"
    interaction_changed.send(sender=Interaction, interaction=interaction, event=event, audit=audit)
    return interaction


def turn_resume(*, task: Task, interaction: Interaction, message: dict | None) -> None:
    """After ``interaction`` closed (interaction_close): the turn resumes, WORKING with what
    the decision came to (and, for the last call of a group, what each call's came to),
    unless other calls of its group still wait. Then the group's inbox row moves to the
    first of them, and the task says what it waits for now (unless the whole group is being
    decided at once: runtime.decisions.group_flow says it once, at the end)."""
    resumed = decision_outcome(interaction)
    if interaction.group_id:
        members = group_members(task=task, group_id=interaction.group_id)
        waiting = [m for m in members if m.state == Interaction.State.OPEN]
        if waiting and interaction.listed:
            # One row of the group is the inbox's item: the first call still open.
            Interaction.objects.filter(pk=interaction.pk).update(listed=False)
            Interaction.objects.filter(pk=waiting[0].pk).update(listed=True)
            interaction.listed = False
        if waiting and not getattr(task, "group_deciding", False):
            group_pause_set(
                task,
                group_id=interaction.group_id,
                members=members,
                history_append=message,
                also=("transcript",),
            )
        if waiting:
            return
        resumed[ext.INTERACTIONS] |= {
            "groupId": interaction.group_id,
            "outcomes": [decision_outcome(m)[ext.INTERACTIONS] for m in members],
        }
    task_status_set(
        task, TaskState.WORKING, status_ext=resumed, history_append=message, also=("transcript",)
    )
    turn_enqueue(task)


def interactions_expire(*, now=None) -> int:
    """Past their deadline (beat), open interactions meet their outcome (interaction_expire)."""
    now = now or timezone.now()
    pks = Interaction.objects.filter(state=Interaction.State.OPEN, expires_at__lte=now).values_list(
        "pk", flat=True
    )
    return sum(interaction_expire(pk=pk, now=now) for pk in pks)


@transaction.atomic(durable=True)
def interaction_expire(*, pk: int, now=None, due: bool = True) -> bool:
    """Expire one interaction if it is still open and past its deadline (the beat's, and a
    tool server's question whose wait ran out: runtime.turn.elicitation): an approval is
    denied as 'expired', or meets its outcome (runtime.decisions.deadlines: escalated once,
    or approved); False when it was closed already, or its deadline moved since. ``due``
    False: the caller's own deadline ran out (a question's wait), expired whatever the row's
    deadline says."""
    interaction = Interaction.objects.select_related("task").get(pk=pk)
    task = Task.objects.select_for_update().get(pk=interaction.task_id)
    interaction.refresh_from_db()
    now = now or timezone.now()
    if interaction.state != Interaction.State.OPEN or (due and interaction.expires_at > now):
        return False
    outcome = expiry_outcome_now(interaction, tenant_allows=task.tenant.expiry_may_approve)
    if outcome == "escalate":
        to = interaction.request["onExpiry"].get("to") or ["admin"]
        end = escalation_end(interaction, interaction.request["onExpiry"], now=now)
        interaction_deadline_move(
            task=task, interaction=interaction, expires_at=end, moved={"escalated": True},
            by="system:expiry", via="expiry", action="expiry_escalated", widen=to,
        )  # fmt: skip
        return True
    if outcome == "approve":
        value = {"approved": True, "reason": "approved on expiry (risk: low)"}
    elif interaction.kind == Interaction.Kind.APPROVAL:
        value = {"approved": False, "reason": "expired"}
    else:
        value = {"expired": True}
    interaction_close(
        task=task,
        interaction=interaction,
        answer=Answer(value=value, by="system:expiry", via="expiry"),
    )
    return True


def interaction_deadline_move(
    *, task: Task, interaction: Interaction, expires_at, moved: dict, by: str, via: str,
    action: str, widen=(),
) -> None:  # fmt: skip
    """Move the open ``interaction``'s deadline to ``expires_at`` (an extension, an
    escalation on expiry: runtime.decisions.deadlines), keeping ``moved`` in its ``deadline``
    (and ``widen``: roles who may decide from now on); audited as ``action``, told to those
    who hear of its changes, and to the caller (a status update). The caller holds the lock."""
    was = deadline_of(interaction)
    first = round((interaction.expires_at - interaction.created_at).total_seconds())
    deadline = {"first": first, **was, **moved, "round": int(was.get("round", 0)) + 1}
    request = {**(interaction.request or {}), "deadline": deadline}
    widened = list(dict.fromkeys([*(interaction.widened_to or ()), *widen]))
    if (
        Interaction.objects.filter(pk=interaction.pk, state=Interaction.State.OPEN).update(
            expires_at=expires_at, request=request, widened_to=widened
        )
        != 1
    ):
        raise AlreadyDecided(interaction)
    interaction.expires_at, interaction.request, interaction.widened_to = (
        expires_at,
        request,
        widened,
    )
    detail = {"prompt": interaction.prompt, "expiresAt": expires_at.isoformat(), **moved}
    audit = audit_record(
        tenant_id=interaction.tenant_id, actor=by, action=action, via=via,
        interaction=interaction, task=task, detail={**detail, "roles": list(widen)},
    )  # fmt: skip
    event = action.removeprefix("expiry_")
    interaction_changed.send(sender=Interaction, interaction=interaction, event=event, audit=audit)
    pause_restate(task=task, interaction=interaction)


# --- void and re-open; cancel --------------------------------------------------------------


def approval_reopen(
    *,
    task: Task,
    effect: Effect,
    interaction: Interaction | None,
    policy: Policy,
    reason: str,
    audit: AuditEvent,
    also: Iterable[str] = (),
) -> Interaction:
    """An approved call's approval is void (``reason``; ``audit``: the void's row): its
    ``interaction`` opens again, under ``policy`` (the rule that holds the call now: its
    version, stages, ladder) as its next opening, with no approval counted (the two-person
    rule starts again), and the turn pauses on it. A call no person was asked about (a
    standing rule allowed it: ``interaction`` None) opens as runtime.turn.calls holds one."""
    held = HeldApproval.of_call(effect, policy, reason=reason)
    if interaction is None:
        interaction = approval_row(task, replace(held, detail={**held.detail, "voided": True}))
        interaction.save(force_insert=True)
    else:
        interaction.detail = {**(interaction.detail or {}), "reason": reason, "voided": True}
        # As its next opening: a button or a link handed out for this one decides nothing now.
        opening = interaction.opening + 1
        interaction.request = {**(interaction.request or {}), **held.request, "opening": opening}
        expires, _ = interaction_expiry(task, interaction.kind, held.detail, held.request)
        Interaction.objects.filter(pk=interaction.pk).update(
            **UNANSWERED,
            request=interaction.request,
            detail=interaction.detail,
            **listing_of(task, interaction),
            approvals=[],
            expires_at=timezone.now() + timedelta(seconds=expires),
        )
        interaction.refresh_from_db()
        if interaction.group_id:
            # A call of a group opens again on its own: the group's row in the inbox again.
            Interaction.objects.filter(
                tenant_id=interaction.tenant_id,
                task_id=interaction.task_id,
                group_id=interaction.group_id,
            ).exclude(pk=interaction.pk).update(listed=False)
            Interaction.objects.filter(pk=interaction.pk).update(listed=True)
            interaction.listed = True
        # Those told of the approval hear that it is void and needs a new decision.
        interaction_changed.send(
            sender=Interaction, interaction=interaction, event="voided", audit=audit
        )
    text = (
        f"The approval of {effect.server} / {effect.tool} is void: {reason}. "
        "It needs a new decision."
    )
    _paused_on(task, interaction, state=TaskState.AUTH_REQUIRED, text=text, also=also)
    return interaction


# An interaction as it stands open again, unanswered.
UNANSWERED = {
    "state": Interaction.State.OPEN,
    "answer": None,
    "answered_by": "",
    "answered_via": "",
    "answered_at": None,
    "answer_message_id": "",
}


def interactions_cancel(*, task: Task, by: str, via: str, at: datetime, detail: dict) -> AuditEvent:
    """Close the open interactions of ``task``, which is being canceled (its row locked), and
    write the cancel's audit row (``detail``, and how many closed): those told of each
    interaction hear that it closed."""
    # Read first (the task is locked: none opens meanwhile), so that those told of each one
    # hear that it closed.
    closing = list(
        Interaction.objects.filter(task=task, state=Interaction.State.OPEN).only("pk", "tenant_id")
    )
    closed = (
        Interaction.objects.filter(
            pk__in=[i.pk for i in closing], state=Interaction.State.OPEN
        ).update(
            state=Interaction.State.CANCELED,
            answered_by=by,
            answered_via="cancel",
            answered_at=at,
        )
        if closing
        else 0
    )
    audit = audit_record(
        tenant_id=task.tenant_id,
        actor=by,
        action="task_canceled",
        via=via,
        task=task,
        detail={"interactionsClosed": closed, **detail},
    )
    for interaction in closing:
        interaction_changed.send(
            sender=Interaction, interaction=interaction, event="canceled", audit=audit
        )
    return audit
