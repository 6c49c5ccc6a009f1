"""Decisions people can trust (issue 13): receipts, edit-then-approve and step-up.

These run inside the transactions of ``runtime.services.interactions`` (a decision) and of the
turn loop (``runtime.turn.calls``, before a call is sent), with the task's row locked; none
opens a transaction of its own.
"""

import logging
from datetime import timedelta

from django.utils import timezone

from runtime import extensions as ext
from runtime.audit import audit_record, decision_word
from runtime.errors import InvalidParams, StepUpRequired, UnsupportedOperation
from runtime.ladders import expiry_seconds
from runtime.models import Effect, Interaction, Receipt, Task, TaskState
from runtime.receipts import (
    canonical_hash,
    decider_public,
    receipt_binding,
    receipt_mismatch,
    receipt_record,
    tool_trust,
)
from runtime.selectors import held_call_of
from runtime.shapes import agent_message
from runtime.signals import interaction_opened
from runtime.task_state import task_pause, task_save, with_plan
from runtime.tools import policy_for, tool_spec, validate_arguments
from runtime.turn.transcript import TURN_FIELDS, tool_result_record

logger = logging.getLogger(__name__)

# Who voids an approval that no longer matches (a receipt's decider, an audit row's actor).
VOIDER = "system:receipts"


# --- before the decision -------------------------------------------------------------------


def decision_step_up_check(
    *, task: Task, interaction: Interaction, answer: dict, via: str, stepped_up: bool
) -> None:
    """A ``risk: high`` call is approved only by a decider who stepped up (re-authenticated
    recently, or a token made with the step-up right); a denial sends nothing and needs none."""
    if interaction.kind != Interaction.Kind.APPROVAL or answer.get("approved") is not True:
        return
    effect = held_call_of(interaction)
    if effect is None or not tool_trust(task.agent, effect.server, effect.tool).high_risk:
        return
    if stepped_up:
        return
    if via == "inband":
        # The caller cannot re-authenticate as a member: an operator approves high-risk calls.
        raise UnsupportedOperation(
            f"{effect.server} / {effect.tool} is marked risk: high: an operator who "
            "re-authenticated must approve it; the caller cannot approve it in band.",
            reason="STEP_UP_REQUIRED",
            interactionId=interaction.public_id,
        )
    raise StepUpRequired(
        f"{effect.server} / {effect.tool} is marked risk: high: approving it needs a recent "
        "re-authentication (in the browser: confirm your password, and your authenticator "
        "code when you have one) or an operator token created with the step-up right.",
        interactionId=interaction.public_id,
    )


def decision_edit_apply(
    *, task: Task, interaction: Interaction, answer: dict, arguments, shown_hash: str | None
) -> bool:
    """Check what the decider saw and apply an operator's edit of the held call's arguments.

    ``shown_hash``: the SHA-256 of the arguments the decider was shown; an approval whose
    arguments changed since is refused (nothing changes). ``arguments``: the edited arguments
    (``editable: true`` in the tool's policy, validated against the tool's schema); the effect
    then holds them and their hash, and the receipt both hashes. Returns whether they changed.
    """
    effect = held_call_of(interaction)
    if effect is None:
        if arguments is not None:
            raise InvalidParams("arguments", "only an approval of a held call takes arguments")
        return False
    if shown_hash and shown_hash != effect.arguments_hash:
        raise InvalidParams(
            "argumentsHash",
            "the call's arguments are not the ones you were shown; reload and decide again",
        )
    if arguments is None:
        return False
    if answer.get("approved") is not True:
        raise InvalidParams("arguments", "arguments are edited only when approving")
    if not tool_trust(task.agent, effect.server, effect.tool).editable:
        raise InvalidParams(
            "arguments",
            f"the policy of {effect.server} / {effect.tool} does not allow editing its arguments "
            "(editable: true)",
        )
    spec = tool_spec(task.agent, effect.server, effect.tool) or {}
    problem = validate_arguments(spec.get("schema"), arguments)
    if problem:
        raise InvalidParams("arguments", problem)
    new_hash = canonical_hash(arguments)
    if new_hash == effect.arguments_hash:
        return False
    effect.arguments = arguments
    effect.arguments_hash = new_hash
    moved = Effect.objects.filter(pk=effect.pk, state=Effect.State.HELD).update(
        arguments=arguments, arguments_hash=new_hash
    )
    if moved != 1:
        raise InvalidParams("arguments", "the call is no longer held; its arguments stay")
    return True


# --- with the decision ---------------------------------------------------------------------


def decision_receipt(
    *,
    task: Task,
    interaction: Interaction,
    shown_hash: str | None,
    edited: bool,
    stepped_up: bool,
) -> Receipt | None:
    """The receipt of a decision on a held call (approvals only; questions bind no call)."""
    effect = held_call_of(interaction)
    if effect is None:
        return None
    answer = interaction.answer or {}
    if interaction.state == Interaction.State.EXPIRED:
        decision = Receipt.Decision.EXPIRED
    elif answer.get("approved") is True:
        decision = Receipt.Decision.APPROVED
    else:
        decision = Receipt.Decision.DENIED
    return receipt_record(
        effect=effect,
        agent=task.agent,
        decision=decision,
        decider=interaction.answered_by,
        channel=interaction.answered_via,
        interaction_id=interaction.public_id,
        shown_hash=shown_hash,
        edited=edited,
        stepped_up=stepped_up,
        reason=str(answer.get("reason", "")),
    )


def decision_outcome(interaction: Interaction) -> dict:
    """The interactions/v1 data of the status that follows a decision: what was decided, by
    what kind of decider, and ``edited`` for an approval whose arguments an operator changed.
    Never the arguments, never an operator's identity."""
    answer = interaction.answer or {}
    outcome = decision_word(interaction)
    data = {
        "interactionId": interaction.public_id,
        "kind": interaction.kind,
        "outcome": outcome,
        "decidedBy": decider_public(interaction.answered_by, interaction.answered_via),
        "decidedVia": interaction.answered_via,
    }
    if interaction.kind == Interaction.Kind.APPROVAL:
        data["edited"] = answer.get("edited") is True
    return {ext.INTERACTIONS: data}


# --- before the call is sent ---------------------------------------------------------------


# approval_stale's ``receipt`` when the caller has not read it.
UNREAD = object()


def approval_stale(*, task: Task, effect: Effect, receipt=UNREAD) -> str | None:
    """Before an approved call is sent (the caller holds the task's lock): None when its
    receipt's arguments hash and policy version still match, so it may be sent; otherwise why
    not, and the caller voids the approval (approval_void) and sends nothing. ``receipt``: the
    effect's latest receipt (or None) if the caller read it under the same lock."""
    # ``effect`` was read in the send step, after the decision: its arguments are the ones
    # stored (an edit changes them only while the call is held), so it is not read again.
    if receipt is UNREAD:
        receipt = receipt_binding(effect)
    if receipt is None:
        return None  # allowed by the policy, or journalled before receipts: nothing to match
    return receipt_mismatch(receipt, effect=effect, agent=task.agent)


def approval_void(*, task: Task, effect: Effect, reason: str) -> bool:
    """Void an approved call's approval that no longer matches (approval_stale): nothing is
    sent. The call goes back to held and its interaction reopens, saying why (False: the turn
    pauses), or, when the policy now denies the tool, the call is denied (True: the model sees
    it and the turn goes on)."""
    receipt_record(
        effect=effect,
        agent=task.agent,
        decision=Receipt.Decision.VOID,
        decider=VOIDER,
        channel="system",
        interaction_id=effect.public_id,
        reason=reason,
    )
    interaction = Interaction.objects.filter(
        tenant_id=task.tenant_id, task=task, public_id=effect.public_id
    ).first()
    audit_record(
        tenant_id=task.tenant_id,
        actor=VOIDER,
        action="approval_voided",
        via="system",
        interaction=interaction,
        task=task,
        detail={
            "server": effect.server,
            "tool": effect.tool,
            "effectId": effect.public_id,
            "reason": reason,
        },
    )
    logger.warning("approval of %s void: %s", effect.public_id, reason)
    if policy_for(task.agent, effect.server, effect.tool).action == "deny":
        why = f"denied by the tool policy (it changed after the approval: {reason})"
        Effect.objects.filter(pk=effect.pk, state=Effect.State.APPROVED).update(
            state=Effect.State.DENIED,
            outcome={"error": "tool.denied", "reason": why, "by": VOIDER},
            closed_at=timezone.now(),
        )
        tool_result_record(task, effect.step, ok=False, error="tool.denied", reason=why)
        task_save(task, TURN_FIELDS)
        return True
    Effect.objects.filter(pk=effect.pk, state=Effect.State.APPROVED).update(
        state=Effect.State.HELD, approved_by=""
    )
    # An AGENT.md ladder's expire step for this tool, else the agent's interactionTtlSeconds.
    expiry = expiry_seconds(task.agent, tool=f"{effect.server}/{effect.tool}")
    expires_at = timezone.now() + timedelta(seconds=expiry)
    if interaction is not None:
        prompt = interaction.prompt
        detail = {**(interaction.detail or {}), "reason": reason, "voided": True}
        Interaction.objects.filter(pk=interaction.pk).update(
            state=Interaction.State.OPEN,
            answer=None,
            answered_by="",
            answered_via="",
            answered_at=None,
            answer_message_id="",
            detail=detail,
            # Approvals given before are void with it: the two-person rule starts again.
            approvals=[],
            expires_at=expires_at,
        )
        interaction.refresh_from_db()
    else:
        # A call no person was asked about (a standing rule allowed it): now one is, as
        # runtime.turn.calls holds a call (interactions/v1: the effect's id), with the
        # approvers and the number of approvals the policy asks for today.
        prompt = f"Approve {effect.server} / {effect.tool}?"
        detail = {"server": effect.server, "tool": effect.tool, "reason": reason, "voided": True}
        policy = policy_for(task.agent, effect.server, effect.tool)
        interaction = Interaction.objects.create(
            public_id=effect.public_id,
            tenant_id=task.tenant_id,
            task=task,
            agent_id=task.agent_id,
            kind=Interaction.Kind.APPROVAL,
            prompt=prompt,
            detail=detail,
            request={"step": effect.step},
            subject=task.subject,
            deciders=policy.deciders,
            approvers=list(policy.approvers),
            approvals_required=policy.required,
            expires_at=expires_at,
        )
    text = (
        f"The approval of {effect.server} / {effect.tool} is void: {reason}. "
        "It needs a new decision."
    )
    task_pause(
        task,
        TaskState.AUTH_REQUIRED,
        agent_message(task, text),
        status_ext=with_plan(
            task,
            {
                ext.INTERACTIONS: {
                    "interactionId": effect.public_id,
                    "kind": Interaction.Kind.APPROVAL,
                    "prompt": prompt,
                    "detail": detail,
                }
            },
        ),
        also=TURN_FIELDS,
    )
    interaction_opened.send(sender=Interaction, interaction=interaction)
    return False
