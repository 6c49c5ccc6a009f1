"""Before an approved call is sent: does its approval still match what it bound?"""

import logging

from django.utils import timezone

from runtime.decisions.decision_models import Effect, Receipt
from runtime.decisions.decision_selectors import approval_of_effect
from runtime.decisions.interaction_state import approval_reopen
from runtime.decisions.receipts import receipt_binding, receipt_mismatch, receipt_record
from runtime.kernel.audit import audit_record
from runtime.kernel.task_models import Task
from runtime.kernel.task_state import task_save
from runtime.policy.lookup import policy_for
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
    # The call's policy now, read once: the void's receipt, and what holds the call again.
    policy = policy_for(task.agent, effect.server, effect.tool, effect.arguments)
    receipt_record(
        effect=effect,
        agent=task.agent,
        decision=Receipt.Decision.VOID,
        decider=VOIDER,
        channel="system",
        interaction_id=effect.public_id,
        reason=reason,
        held=policy.rule,
    )
    interaction = approval_of_effect(effect=effect)
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
    approval_reopen(
        task=task,
        effect=effect,
        interaction=interaction,
        policy=policy,
        reason=reason,
        audit=audit,
        also=TURN_FIELDS,
    )
    return False
