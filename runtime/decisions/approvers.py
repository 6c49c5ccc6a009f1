"""Who may decide, and the two-person rule, at decision time; escalation widening who may
decide (README "Who may decide"). Called inside a decision's transaction, under the task's
row lock (runtime.decisions.interactions.interaction_answer), so that two deciders of one
approval are taken one after the other: exactly ``required`` distinct approvals close it.

An approver is a role (``admin``, ``operator``), a named group of members (``group:<slug>``,
tenants.ApproverGroup) or ``caller`` (the task's caller, answering in band). No approvers
named means the default: admins and operators (and the caller only with ``deciders: either``;
``deciders: caller`` is ``approvers: [caller]``). ``required: 2`` asks for two distinct people; the caller is not one of them.
The syntax of ``approvers`` and ``required`` is runtime.agents.approver_syntax's."""

import hashlib
import json
from dataclasses import dataclass

from django.utils import timezone

from runtime.agents.approver_syntax import CALLER, DEFAULT_APPROVERS, GROUP_PREFIX, ROLES
from runtime.decisions.decision_models import Effect, Interaction, InteractionApproval, Receipt
from runtime.decisions.receipts import receipt_record
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import DeciderRefused
from runtime.kernel.task_models import Task
from tenants.models import ApproverGroup


def effective_approvers(interaction: Interaction) -> list[str]:
    """Who may decide the interaction now: its policy's approvers and what escalation added."""
    named = list(interaction.approvers or ()) or list(DEFAULT_APPROVERS)
    return named + [role for role in interaction.widened_to or () if role not in named]


def approvers_text(approvers) -> str:
    """``["admin", "group:sre"]`` as people read it: "admins or members of group sre"."""
    words = []
    for value in approvers:
        if value == CALLER:
            words.append("the caller (in band)")
        elif value.startswith(GROUP_PREFIX):
            words.append(f"members of group {value[len(GROUP_PREFIX) :]}")
        else:
            words.append(f"{value}s")
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


@dataclass(frozen=True)
class Decider:
    """Who is deciding: their subject, their role in the tenant, their membership (for
    groups). A program with an operator token has the operator role and no membership."""

    subject: str
    role: str = "operator"
    membership_id: int | None = None

    @classmethod
    def of_member(cls, membership, user=None) -> "Decider":
        """A member deciding (``user``: the membership's user, when already at hand)."""
        user = user or membership.user
        return cls(subject=user.subject, role=membership.role, membership_id=membership.pk)


def decider_refusal(interaction: Interaction, decider: Decider) -> str | None:
    """Why ``decider`` may not decide this interaction, or None when they may.

    Only approvals name approvers; questions and connections are anyone's who can decide.
    """
    if decider.role not in ROLES:
        return "Viewers can see but not decide."
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    allowed = effective_approvers(interaction)
    if decider.role in allowed:
        return None
    groups = [a[len(GROUP_PREFIX) :] for a in allowed if a.startswith(GROUP_PREFIX)]
    if (
        groups
        and decider.membership_id is not None
        and ApproverGroup.objects.filter(
            tenant_id=interaction.tenant_id, slug__in=groups, members=decider.membership_id
        ).exists()
    ):
        return None
    people = [a for a in allowed if a != CALLER] or allowed
    return f"Only {approvers_text(people)} may decide this approval."


def approval_binding(*, tool_policy: dict, arguments_hash: str) -> str:
    """What an approval of a held call approves: the SHA-256 of the agent's whole tool policy
    (canonical JSON) and the call's arguments hash. Two approvals count together only when
    they approved the same thing."""
    policy = hashlib.sha256(
        json.dumps(tool_policy or {}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return hashlib.sha256(f"{policy}:{arguments_hash}".encode()).hexdigest()


def approvals_progress(interaction: Interaction) -> str:
    """ "1 of 2" for an approval that needs more than one; "" otherwise."""
    if interaction.approvals_required <= 1:
        return ""
    return f"{len(interaction.approvals or ())} of {interaction.approvals_required}"


def approval_gate(
    *,
    interaction: Interaction,
    task: Task,
    answer: dict,
    decider: Decider | None,
    by: str,
    via: str,
    shown_hash: str | None = None,
    stepped_up: bool = False,
) -> dict | None:
    """Check that the decider may decide this approval; record an approval that does not
    yet make up the number required. Returns the answer that closes the interaction, or
    None when the approval was recorded and the interaction stays open for the next person.

    A decider of None is a caller of the core that names no member (the system, older
    callers): it decides as an operator would.
    """
    decider = decider or Decider(subject=by)
    refusal = decider_refusal(interaction, decider)
    if refusal:
        raise DeciderRefused(refusal, interactionId=interaction.public_id)
    if interaction.approvals_required <= 1 or answer.get("approved") is not True:
        # A denial by anyone allowed to decide ends it, whatever approvals came before.
        return answer
    # Only approvals of the same thing count together: one given under another policy
    # version or for other arguments (an approval voided since) is dropped here.
    held = Effect.objects.filter(
        tenant_id=interaction.tenant_id, public_id=interaction.public_id
    ).first()
    binds = approval_binding(
        tool_policy=task.agent.tool_policy, arguments_hash=held.arguments_hash if held else ""
    )
    standing = [entry for entry in interaction.approvals or () if entry.get("binds") == binds]
    if any(entry.get("by") == by for entry in standing):
        raise DeciderRefused(
            "You approved this already: the two-person rule needs another person's approval.",
            interactionId=interaction.public_id,
        )
    now = timezone.now()
    InteractionApproval.objects.create(
        tenant_id=interaction.tenant_id,
        interaction=interaction,
        by=by,
        via=via,
        binds=binds,
        at=now,
    )
    approvals = [*standing, {"by": by, "via": via, "at": now.isoformat(), "binds": binds}]
    Interaction.objects.filter(pk=interaction.pk).update(approvals=approvals)
    interaction.approvals = approvals
    if len(approvals) < interaction.approvals_required:
        if held is not None:
            # A decision like any other: its receipt binds what this person approved. The
            # call's sending is bound by the last approval's receipt (interaction_close).
            held.task = task
            receipt_record(
                effect=held,
                agent=task.agent,
                decision=Receipt.Decision.APPROVED,
                decider=by,
                channel=via,
                interaction_id=interaction.public_id,
                shown_hash=shown_hash,
                stepped_up=stepped_up,
                reason=f"{len(approvals)} of {interaction.approvals_required}: the call waits "
                "for another person's approval",
            )
        audit_record(
            tenant_id=interaction.tenant_id,
            actor=by,
            action="approval_recorded",
            via=via,
            interaction=interaction,
            task=task,
            detail={
                "kind": interaction.kind,
                "prompt": interaction.prompt,
                "approvals": len(approvals),
                "required": interaction.approvals_required,
            },
        )
        return None
    return {**answer, "approvals": len(approvals)}


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
