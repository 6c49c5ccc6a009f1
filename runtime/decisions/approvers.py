"""Who may decide, what an open approval needs now, and the two-person rule; escalation
widening who may decide (README "Who may decide"). The decision flow
(runtime.decisions.flow) calls these inside a decision's transaction, under the task's row
lock, so that two deciders of one approval are taken one after the other: exactly
``required`` distinct people's approvals close it.

An approver is a role (``admin``, ``operator``), a named group of members (``group:<slug>``,
tenants.ApproverGroup) or ``caller`` (the task's caller, answering in band). No approvers
named means the default: admins and operators (and the caller only with ``deciders: either``;
``deciders: caller`` is ``approvers: [caller]``). ``required: 2`` asks for two distinct
people: never the caller, never a program (an operator token). The syntax of ``approvers``
and ``required`` is runtime.agents.approver_syntax's."""

import hashlib
import json
from dataclasses import dataclass

from django.utils import timezone

from runtime.agents.approver_syntax import CALLER, DEFAULT_APPROVERS, GROUP_PREFIX, ROLES
from runtime.agents.title_syntax import call_terms
from runtime.agents.tools import policy_for
from runtime.decisions.decision_models import Interaction, InteractionApproval, Receipt
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.receipts import receipt_record, tool_trust
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import DeciderRefused
from runtime.kernel.task_models import Task
from tenants.models import ApproverGroup

# Subjects the system itself decides as (the expiry, a void, a ladder, a standing rule): no
# person or program acting as one is ever a decider (issue 28, finding 4), whatever its token
# says, so the audit never names the system for a person's decision.
RESERVED_SUBJECT_PREFIXES = ("system:", "rule:")


def subject_reserved(subject: str) -> bool:
    """The subject is one the system decides as (``system:``, ``rule:``)."""
    return subject.startswith(RESERVED_SUBJECT_PREFIXES)


@dataclass(frozen=True)
class Decider:
    """Who is deciding, as the channel identified them.

    ``kind``: ``person`` (a member, signed in: the page, bulk, REST with a session, and later
    a chat or e-mail channel that maps its user to a member), ``program`` (an operator token:
    it decides as an operator, is in no group, and is never one of the people a two-person
    approval needs) or ``caller`` (the task's caller, in band). ``role`` and
    ``membership_id`` say what a person may decide (roles, groups); ``stepped_up``: they
    re-authenticated recently, or the token has the step-up right (``risk: high``)."""

    PERSON = "person"
    PROGRAM = "program"
    CALLER = "caller"

    subject: str
    role: str = "operator"
    membership_id: int | None = None
    kind: str = PERSON
    stepped_up: bool = False

    @classmethod
    def of_member(cls, membership, user=None, *, stepped_up: bool = False) -> "Decider":
        """A member deciding (``user``: the membership's user, when already at hand)."""
        user = user or membership.user
        return cls(
            subject=user.subject,
            role=membership.role,
            membership_id=membership.pk,
            stepped_up=stepped_up,
        )

    @classmethod
    def of_program(cls, subject: str, *, may_step_up: bool = False) -> "Decider":
        """A program with an operator token: an operator in no group, not a person."""
        return cls(subject=subject, role="operator", kind=cls.PROGRAM, stepped_up=may_step_up)

    @classmethod
    def of_caller(cls, subject: str) -> "Decider":
        """The task's caller, answering in band (it cannot step up)."""
        return cls(subject=subject, role="", kind=cls.CALLER)


def effective_approvers(interaction: Interaction) -> list[str]:
    """Who may decide the interaction as it opened: its policy's approvers and what escalation
    added (``approval_needs`` adds what the policy says now)."""
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
class Needs:
    """What an open approval needs now (issue 28, finding 6): the stricter of what it opened
    with (recorded on the interaction) and what the agent's policy says today. A tightened
    policy reaches open approvals; a loosened one never asks less than the approval showed.

    A decider must be allowed by both lists of approvers (each with what escalation added);
    the number of people is the larger; the call is high-risk when either says so; the caller
    may answer in band only when both let it; ``bulk`` and ``editable`` are the policy's now.
    """

    opened: tuple[str, ...]
    current: tuple[str, ...]
    required: int
    high_risk: bool
    caller_may: bool
    bulk: bool
    editable: bool
    server: str = ""
    tool: str = ""
    # The policy's action now: a tool it now denies is never approved (only denied).
    action: str = "approve"

    @property
    def approvers(self) -> tuple[str, ...]:
        """The approvers to show: one list when one holds the other, else both in turn."""
        opened, current = set(self.opened), set(self.current)
        if opened <= current:
            return self.opened
        if current <= opened:
            return self.current
        return self.opened

    @property
    def named(self) -> bool:
        """Someone narrowed who decides (not just admins and operators, the default)."""
        return set(self.opened) != set(DEFAULT_APPROVERS) or set(self.current) != set(
            DEFAULT_APPROVERS
        )


def approval_needs(interaction: Interaction, agent=None) -> Needs:
    """What the open approval ``interaction`` needs now, read against ``agent``'s current
    tool policy (the task's agent, loaded with the decision's locked read)."""
    agent = agent or interaction.task.agent
    held = held_call_of(interaction)
    server = held.server if held else (interaction.detail or {}).get("server", "")
    tool = held.tool if held else (interaction.detail or {}).get("tool", "")
    policy, trust = policy_for(agent, server, tool), tool_trust(agent, server, tool)
    widened = [r for r in interaction.widened_to or () if r in ROLES]

    def with_widened(named) -> tuple[str, ...]:
        named = list(named) or list(DEFAULT_APPROVERS)
        return tuple(named + [role for role in widened if role not in named])

    return Needs(
        opened=with_widened(interaction.approvers or ()),
        current=with_widened(policy.approvers),
        required=max(interaction.approvals_required, policy.required),
        high_risk=interaction.risk == Interaction.Risk.HIGH or trust.high_risk,
        caller_may=interaction.deciders == Interaction.Deciders.EITHER
        and policy.deciders == Interaction.Deciders.EITHER,
        bulk=policy.bulk,
        editable=trust.editable,
        server=server,
        tool=tool,
        action=policy.action,
    )


def _member_groups(interaction: Interaction, decider: Decider, approvers) -> set[str]:
    groups = {a[len(GROUP_PREFIX) :] for a in approvers if a.startswith(GROUP_PREFIX)}
    if not groups or decider.membership_id is None:
        return set()
    return set(
        ApproverGroup.objects.filter(
            tenant_id=interaction.tenant_id, slug__in=groups, members=decider.membership_id
        ).values_list("slug", flat=True)
    )


def decider_refusal(
    interaction: Interaction, decider: Decider, needs: Needs | None = None
) -> str | None:
    """Why ``decider`` may not decide this interaction at all, or None when they may.

    Only approvals name approvers; questions and connections are anyone's who can decide.
    A caller's answer in band is the flow's to judge (runtime.decisions.flow)."""
    if subject_reserved(decider.subject):
        return (
            f"{decider.subject} is a subject the system decides as "
            f"({', '.join(RESERVED_SUBJECT_PREFIXES)}): no person or program decides as it."
        )
    if decider.kind == Decider.CALLER:
        return None
    if decider.role not in ROLES:
        return "Viewers can see but not decide."
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    needs = needs or approval_needs(interaction)
    lists = (needs.opened, needs.current)
    if all(decider.role in approvers for approvers in lists):
        return None
    # One read of the decider's groups serves both lists.
    groups = _member_groups(interaction, decider, {*needs.opened, *needs.current})
    for approvers in lists:
        allowed = decider.role in approvers or any(
            a.startswith(GROUP_PREFIX) and a[len(GROUP_PREFIX) :] in groups for a in approvers
        )
        if not allowed:
            people = [a for a in approvers if a != CALLER] or list(approvers)
            return f"Only {approvers_text(people)} may decide this approval."
    return None


def approve_refusal(decider: Decider, needs: Needs) -> str | None:
    """Why ``decider``, who may decide this approval, may deny it but not approve it."""
    if needs.action == "deny":
        return (
            f"The tool policy now denies {needs.server}/{needs.tool}: this call can only be denied."
        )
    if needs.required > 1 and decider.kind == Decider.PROGRAM:
        # A program cannot show which person stands behind each of its calls (a chat bot
        # relays many), so it is never one of the distinct people the rule counts.
        return (
            f"Two people must approve this call (required: {needs.required}): an operator "
            "token is a program, not a person, so it cannot be one of them; approve it in "
            "the browser (or over REST with a signed-in session). It may still deny it."
        )
    return None


def approval_binding(*, tool_policy: dict, arguments_hash: str) -> str:
    """What an approval of a held call approves: the SHA-256 of the agent's whole tool policy
    (canonical JSON) and the call's arguments hash. Two approvals count together only when
    they approved the same thing."""
    policy = hashlib.sha256(
        json.dumps(tool_policy or {}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return hashlib.sha256(f"{policy}:{arguments_hash}".encode()).hexdigest()


def approvals_progress(interaction: Interaction, required: int | None = None) -> str:
    """ "1 of 2" for an approval that needs more than one; "" otherwise."""
    required = required or interaction.approvals_required
    if required <= 1:
        return ""
    return f"{len(interaction.approvals or ())} of {required}"


def approvals_standing(interaction: Interaction, task: Task) -> tuple[str, list[dict]]:
    """(what an approval now binds, the approvals recorded that bound the same): one given
    under another policy version or for other arguments (voided since) no longer counts."""
    held = held_call_of(interaction)
    binds = approval_binding(
        tool_policy=task.agent.tool_policy, arguments_hash=held.arguments_hash if held else ""
    )
    return binds, [e for e in interaction.approvals or () if e.get("binds") == binds]


def approval_gate(
    *,
    interaction: Interaction,
    task: Task,
    answer: dict,
    decider: Decider,
    channel: str,
    needs: Needs,
    shown_hash: str | None = None,
) -> dict | None:
    """The two-person rule, for a decider the flow found eligible: record an approval that
    does not yet make up the number required. Returns the answer that closes the interaction,
    or None when the approval was recorded and the interaction stays open for the next person.
    """
    if needs.required <= 1 or answer.get("approved") is not True:
        # A denial by anyone allowed to decide ends it, whatever approvals came before.
        return answer
    by = decider.subject
    binds, standing = approvals_standing(interaction, task)
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
        via=channel,
        binds=binds,
        at=now,
    )
    approvals = [*standing, {"by": by, "via": channel, "at": now.isoformat(), "binds": binds}]
    if len(approvals) < needs.required:
        # The number a tightened policy asks for stays on the item with the approval it
        # counts (the inbox's and REST's "1 of 2"); it never goes below what it opened with.
        Interaction.objects.filter(pk=interaction.pk).update(
            approvals=approvals, approvals_required=needs.required
        )
        interaction.approvals, interaction.approvals_required = approvals, needs.required
        held = held_call_of(interaction)
        if held is not None:
            # A decision like any other: its receipt binds what this person approved. The
            # call's sending is bound by the last approval's receipt (interaction_close).
            receipt_record(
                effect=held,
                agent=task.agent,
                decision=Receipt.Decision.APPROVED,
                decider=by,
                channel=channel,
                interaction_id=interaction.public_id,
                shown_hash=shown_hash,
                stepped_up=decider.stepped_up,
                reason=f"{len(approvals)} of {needs.required}: the call waits "
                "for another person's approval",
                redact=tuple(call_terms((interaction.request or {}).get("call")).get("redact", ())),
            )
        audit_record(
            tenant_id=interaction.tenant_id,
            actor=by,
            action="approval_recorded",
            via=channel,
            interaction=interaction,
            task=task,
            detail={
                "kind": interaction.kind,
                "prompt": interaction.prompt,
                "approvals": len(approvals),
                "required": needs.required,
            },
        )
        return None
    Interaction.objects.filter(pk=interaction.pk).update(approvals=approvals)
    interaction.approvals = approvals
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
