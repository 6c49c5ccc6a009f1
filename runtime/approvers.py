"""Who may decide an approval: the policy's ``approvers`` and ``required`` (README "Who may
decide"). Reads and checks only; the writes are in runtime.services.approvers.

An approver is a role (``admin``, ``operator``), a named group of members (``group:<slug>``,
tenants.ApproverGroup) or ``caller`` (the task's caller, answering in band). No approvers
named means the default: admins and operators (and the caller unless ``deciders:
operators``). ``required: 2`` asks for two distinct people; the caller is not one of them.
"""

import hashlib
import json
import re
from dataclasses import dataclass

from runtime.models import Interaction
from tenants.models import ApproverGroup

ROLES = ("admin", "operator")
CALLER = "caller"
GROUP_PREFIX = "group:"
DEFAULT_APPROVERS = ("admin", "operator")
_GROUP_RE = re.compile(r"^group:[-a-zA-Z0-9_]{1,63}$")


def approver_problem(value) -> str | None:
    """Why one entry of ``approvers`` is not one, or None."""
    if not isinstance(value, str):
        return "must be admin, operator, caller or group:<name>"
    if value in ROLES or value == CALLER or _GROUP_RE.match(value):
        return None
    return f"{value!r} is not admin, operator, caller or group:<name>"


def approvers_problem(rule: dict) -> tuple[str, str] | None:
    """(field, message) for what is wrong with a policy entry's approvers and required."""
    approvers = rule.get("approvers")
    if approvers is not None:
        if not isinstance(approvers, list) or not approvers:
            return "approvers", "must be a non-empty list"
        for index, value in enumerate(approvers):
            problem = approver_problem(value)
            if problem:
                return f"approvers.{index}", problem
    required = rule.get("required", 1)
    if required not in (1, 2) or isinstance(required, bool):
        return "required", "must be 1 or 2"
    if required == 2 and CALLER in (approvers or ()):
        return "required", "two people must approve: the caller cannot be one of them"
    if required == 2 and approvers == [CALLER]:
        return "required", "two people must approve"
    return None


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
