"""Before an approved call is sent: does its approval still match what it bound?"""

import logging
from datetime import timedelta

from django.utils import timezone

from runtime.decisions.approval_groups import group_relist
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.interactions import approval_request
from runtime.decisions.receipts import receipt_binding, receipt_mismatch, receipt_record
from runtime.decisions.search import listing_columns
from runtime.decisions.summaries import held_call_record
from runtime.kernel import extensions as ext
from runtime.kernel.audit import audit_record
from runtime.kernel.shapes import agent_message
from runtime.kernel.signals import interaction_changed, interaction_opened
from runtime.kernel.task_models import Task, TaskState
from runtime.kernel.task_state import task_pause, task_save, with_plan
from runtime.policy.ladders import expiry_seconds
from runtime.policy.lookup import policy_for
from runtime.policy.trust import tool_trust
from runtime.turn.transcript import TURN_FIELDS, tool_result_record

# Who voids an approval that no longer matches (a receipt's decider, an audit row's actor).
VOIDER = "system:receipts"
# --- before the call is sent ---------------------------------------------------------------

logger = logging.getLogger(__name__)


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
    audit = audit_record(
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
    policy = policy_for(task.agent, effect.server, effect.tool, effect.arguments)
    if policy.action == "deny":
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
    # The expire step of the policy rule's ladder, else of an AGENT.md ladder for this tool,
    # else the agent's interactionTtlSeconds.
    held_by = approval_request(step=effect.step, policy=policy)
    expiry = expiry_seconds(
        task.agent, tool=f"{effect.server}/{effect.tool}", steps=held_by.get("ladder")
    )
    expires_at = timezone.now() + timedelta(seconds=expiry)
    # The call as it stands now, under the title and redaction its policy gives now.
    call = held_call_record(
        server=effect.server, tool=effect.tool, arguments=effect.arguments, policy=policy
    )
    if interaction is not None:
        prompt = interaction.prompt
        detail = {**(interaction.detail or {}), "reason": reason, "voided": True}
        # Reopened under the rule that holds the call now (its version, stages, ladder), as
        # its next opening: a button or a link handed out for this one decides nothing now.
        request = {
            **(interaction.request or {}),
            **held_by,
            "call": call,
            "opening": interaction.opening + 1,
        }
        Interaction.objects.filter(pk=interaction.pk).update(
            request=request,
            **listing_columns(
                task=task,
                public_id=interaction.public_id,
                kind=interaction.kind,
                prompt=prompt,
                detail=detail,
                request=request,
            ),
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
        # A call of a group opens again on its own: the group's row in the inbox again.
        group_relist(interaction)
        # Those told of the approval hear that it is void and needs a new decision (a call
        # no person was asked about opens below, as a new approval).
        interaction_changed.send(
            sender=Interaction, interaction=interaction, event="voided", audit=audit
        )
    else:
        # A call no person was asked about (a standing rule allowed it): now one is, as
        # runtime.turn.calls holds a call (interactions/v1: the effect's id), with the
        # approvers and the number of approvals the policy asks for today.
        prompt = f"Approve {effect.server} / {effect.tool}?"
        detail = {"server": effect.server, "tool": effect.tool, "reason": reason, "voided": True}
        request = {**held_by, "call": call}
        interaction = Interaction.objects.create(
            **listing_columns(
                task=task,
                public_id=effect.public_id,
                kind=Interaction.Kind.APPROVAL,
                prompt=prompt,
                detail=detail,
                request=request,
            ),
            public_id=effect.public_id,
            tenant_id=task.tenant_id,
            task=task,
            agent_id=task.agent_id,
            kind=Interaction.Kind.APPROVAL,
            prompt=prompt,
            detail=detail,
            request=request,
            subject=task.subject,
            deciders=policy.deciders,
            approvers=list(policy.approvers),
            approvals_required=policy.required,
            risk=tool_trust(task.agent, effect.server, effect.tool, effect.arguments).risk,
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
