"""Who may decide, what an open approval needs now, and quorums and stages (the two-person
rule for any number of people); escalation widening who may decide (docs/how-to/policy.md,
"Who may decide"). The decision flow (runtime.decisions.flow) calls these inside a decision's
transaction, under the task's row lock, so that the deciders of one approval are taken one
after the other: exactly ``required`` distinct people's approvals close it, each counted in
the stage being decided.

An approver is a role (``admin``, ``operator``), a named group of members (``group:<slug>``,
tenants.ApproverGroup) or ``caller`` (the task's caller, answering in band). No approvers
named means the default: admins and operators (and the caller only with ``deciders: either``;
``deciders: caller`` is ``approvers: [caller]``). ``required: N`` above 1, or ``stages``,
asks for distinct people: never the caller, never a program (an operator token), never a
subject the system decides as, and nobody twice in any stage. The syntax of ``approvers``,
``required`` and ``stages`` is runtime.policy.approver_syntax's."""

from dataclasses import dataclass, replace

from runtime.decisions.answers import Answer
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.interaction_state import approval_record
from runtime.kernel.errors import DeciderRefused
from runtime.kernel.task_models import Task
from runtime.policy.approver_syntax import CALLER, DEFAULT_APPROVERS, GROUP_PREFIX, ROLES
from runtime.policy.lookup import policy_for
from runtime.policy.needs import (
    Needs,
    approval_binding,
    approvers_shown,
    approvers_text,
    opened_stages,
    stage_at,
    stricter_stages,
)
from runtime.policy.rules import Stage
from tenants.models import RESERVED_SUBJECT_PREFIXES, ApproverGroup, Membership, subject_reserved


@dataclass(frozen=True)
class Decider:
    """Who is deciding, as the channel identified them.

    ``kind``: ``person`` (a member, signed in: the page, bulk, REST with a session, and later
    a chat or e-mail channel that maps its user to a member), ``program`` (an operator token:
    it decides as an operator, is in no group, and is never one of the people a two-person
    approval needs) or ``caller`` (the task's caller, in band). ``role`` and
    ``membership_id`` say what a person may decide (roles, groups); ``stepped_up``: they
    re-authenticated recently, or the token has the step-up right (``risk: high``);
    ``channel_user``: who the channel knew them as (a Slack user id, the address an e-mail
    link was sent to), named beside them on the receipt and in the audit; ``token_id``: a
    program's operator token (a standing rule it makes applies only while the token is valid)."""

    PERSON = "person"
    PROGRAM = "program"
    CALLER = "caller"

    subject: str
    role: str = "operator"
    membership_id: int | None = None
    kind: str = PERSON
    stepped_up: bool = False
    channel_user: str = ""
    token_id: int | None = None

    @classmethod
    def of_member(
        cls, membership, user=None, *, stepped_up: bool = False, channel_user: str = ""
    ) -> "Decider":
        """A member deciding (``user``: the membership's user, when already at hand)."""
        user = user or membership.user
        return cls(
            subject=user.subject,
            role=membership.role,
            membership_id=membership.pk,
            stepped_up=stepped_up,
            channel_user=channel_user,
        )

    @classmethod
    def of_program(
        cls, subject: str, *, may_step_up: bool = False, token_id: int | None = None
    ) -> "Decider":
        """A program with an operator token: an operator in no group, not a person."""
        return cls(
            subject=subject,
            role="operator",
            kind=cls.PROGRAM,
            stepped_up=may_step_up,
            token_id=token_id,
        )

    @classmethod
    def of_caller(cls, subject: str) -> "Decider":
        """The task's caller, answering in band (it cannot step up)."""
        return cls(subject=subject, role="", kind=cls.CALLER)


def effective_approvers(interaction: Interaction) -> list[str]:
    """Who may decide the interaction as it opened (its current stage's approvers) and what
    escalation added (``approval_needs`` adds what the policy says now)."""
    stages = opened_stages(interaction)
    stage = stages[stage_at(stages, len(interaction.approvals or ()))]
    named = list(stage.approvers) or list(DEFAULT_APPROVERS)
    return named + [role for role in interaction.widened_to or () if role not in named]


def approval_needs(interaction: Interaction, agent=None) -> Needs:
    """What the open approval ``interaction`` needs now, read against ``agent``'s current
    tool policy (the task's agent, loaded with the decision's locked read) for the held
    call's arguments."""
    agent = agent or interaction.task.agent
    held = held_call_of(interaction)
    server = held.server if held else (interaction.detail or {}).get("server", "")
    tool = held.tool if held else (interaction.detail or {}).get("tool", "")
    arguments = held.arguments if held else {}
    policy = policy_for(agent, server, tool, arguments)  # the decision's one reading of it
    trust = policy.trust
    widened = [r for r in interaction.widened_to or () if r in ROLES]

    def with_widened(named) -> tuple[str, ...]:
        named = list(named) or list(DEFAULT_APPROVERS)
        return tuple(named + [role for role in widened if role not in named])

    pairs = stricter_stages(opened_stages(interaction), policy.stages or (Stage(),))
    stages = tuple(
        Stage(
            approvers=approvers_shown(with_widened(was.approvers), with_widened(now.approvers)),
            required=max(was.required, now.required),
            title=now.title or was.title,
        )
        for was, now in pairs
    )
    required = sum(stage.required for stage in stages)
    binds = approval_binding(
        version=policy.rule.version if policy.rule else "",
        arguments_hash=held.arguments_hash if held else "",
    )
    approved = tuple(e for e in interaction.approvals or () if e.get("binds") == binds)
    stage = stage_at(stages, len(approved))
    was, now = pairs[stage]
    return Needs(
        opened=with_widened(was.approvers),
        current=with_widened(now.approvers),
        required=required,
        high_risk=interaction.risk == Interaction.Risk.HIGH or trust.high_risk,
        caller_may=interaction.deciders == Interaction.Deciders.EITHER
        and policy.deciders == Interaction.Deciders.EITHER
        and required <= 1,
        bulk=policy.bulk,
        editable=trust.editable,
        server=server,
        tool=tool,
        action=policy.action,
        stages=stages,
        stage=stage,
        approved=approved,
        binds=binds,
        rule=policy.rule,
        opened_rule=(interaction.request or {}).get("policyRule"),
        policy=policy,
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
            if needs.staged:
                return (
                    f"Only {approvers_text(people)} may decide stage {needs.stage + 1} of "
                    f"{len(needs.stages)} of this approval; it is decided in stages, in order."
                )
            return f"Only {approvers_text(people)} may decide this approval."
    return None


def delegation_for(interaction: Interaction, decider: Decider, needs: Needs | None) -> str:
    """The subject of the away member ``decider`` decides for, as their delegate: one who is
    away now and could decide ``interaction`` too; "" when none. The decider's own rights
    were checked already (delegation never widens them: a delegate who may not decide the
    item is refused before this is asked), and counts as the decider alone in a quorum."""
    if decider.kind != Decider.PERSON or decider.membership_id is None:
        return ""
    away = Membership.objects.filter(
        tenant_id=interaction.tenant_id, delegate_id=decider.membership_id
    ).select_related("user")
    for member in away:
        if (
            member.away_at()
            and decider_refusal(interaction, Decider.of_member(member), needs) is None
        ):
            return member.user.subject
    return ""


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
            f"{needs.required} people must approve this call (required: {needs.required}): an "
            "operator token is a program, not a person, so it cannot be one of them; approve "
            "it in the browser (or over REST with a signed-in session). It may still deny it."
        )
    return None


def approvals_progress(
    interaction: Interaction, needs: Needs | None = None, *, counted: int | None = None
) -> str:
    """ "1 of 2" for an approval that needs more than one (``needs``: counting only the
    approvals that still count, as the decision page does; ``counted``: their number, as a
    list read them); "" otherwise."""
    required = needs.required if needs else interaction.approvals_required
    if required <= 1:
        return ""
    if needs:
        counted = len(needs.approved)
    elif counted is None:
        counted = len(interaction.approvals or ())
    return f"{counted} of {required}"


def approvals_standing(interaction: Interaction, task: Task) -> tuple[str, list[dict]]:
    """(what an approval now binds, the approvals recorded that bound the same): one given
    under another version of the call's policy rule or for other arguments (voided since)
    no longer counts."""
    needs = approval_needs(interaction, task.agent)
    return needs.binds, list(needs.approved)


def approval_gate(
    *, interaction: Interaction, task: Task, answer: Answer, needs: Needs
) -> Answer | None:
    """A quorum or stages, for a decider the flow found eligible (for the current stage): the
    answer that closes the interaction (with the approvals that made up the number required),
    or None when it records an approval that does not yet make up the number
    (interaction_state.approval_record) and the interaction stays open for the next person.
    """
    if needs.required <= 1 or answer.value.get("approved") is not True:
        # A denial by anyone allowed to decide ends it, whatever approvals came before, at
        # any stage.
        return answer
    if any(entry.get("by") == answer.by for entry in needs.approved):
        raise DeciderRefused(
            f"You approved this already: {needs.required} different people must approve it "
            f"({'in stages, ' if needs.staged else ''}required: {needs.required}), so it "
            "needs another person's approval.",
            interactionId=interaction.public_id,
        )
    approvals = approval_record(task=task, interaction=interaction, answer=answer, needs=needs)
    if len(approvals) < needs.required:
        return None
    return replace(answer, value={**answer.value, "approvals": len(approvals)}, approvals=approvals)
