"""The one decision flow: every channel through which a person, a program or the caller
decides on an interaction calls ``decision_take`` (``decision_take_locked`` when it holds the
task's lock already: the caller's answer in band), and no channel decides any other way
(docs/how-to/policy.md "Who may decide"; django-allauth's ``internal/flows`` is the pattern).

A channel parses its input into a ``Decision``, says who decides (a ``Decider``: a member, a
program's operator token, the caller) and names itself (``channel``); the flow does the
rest, in this order, under the task's row lock, and the first refusal changes nothing:

1. what the channel cannot take (bulk triage decides approvals only): ChannelRefused;
2. whether the decision fits the interaction's kind (an approval takes ``approved``, not
   ``value``): DecisionMisfit, with the same words on every channel;
3. whether the interaction is still open: AlreadyDecided, saying by whom; and still the
   opening the decider was shown (a voided approval opens again): ItemChanged;
4. the answer itself (runtime.decisions.answers);
5. for an approval, what it needs now (approvers.approval_needs: the stricter of what it
   opened with and the agent's current policy, the rule that holds the call's arguments),
   then bulk triage's refusals (``bulk: false``, more than one person), who may decide
   (roles, groups, the caller; for an approval in stages, the current stage's approvers; a
   program never counts as one of several people), step-up for ``risk: high``, and the
   standing rule asked for, checked before anything is recorded (RuleRefused);
6. what the decider saw, and their edit of the arguments (receipts.decision_edit_apply);
7. a quorum or stages (approvers.approval_gate): recorded, waiting for the next person; or
8. the close (interaction_state.interaction_close): claim, transcript, status, audit,
   receipt, and the turn resumed.

The held call's policy is read once, in step 5 (``Needs``, with the rule that holds the call
and its trust keys), and every later step asks it of that reading.

Then the standing rule is made, in a transaction of its own right after the approval's.

A new channel (Slack buttons, e-mail links) adds its name to CHANNELS, identifies the member
who decides (``Decider.of_member``: a chat user or a link's recipient mapped to their
membership; ``stepped_up`` only if the channel re-authenticated them; ``channel_user``: who
the channel knew them as, for the receipt and the audit), parses into a
``Decision``, calls ``decision_take`` and renders what comes back or what is raised. What a
decision page shows, the channel reads from runtime.decisions.facts.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from opentelemetry.trace import SpanKind

from config import metrics
from config.tracing import task_span
from runtime.decisions.answers import Answer, answer_from_decider
from runtime.decisions.approvers import (
    Decider,
    approval_gate,
    approval_needs,
    approve_refusal,
    decider_refusal,
    delegation_for,
)
from runtime.decisions.decision_models import Interaction, StandingRule
from runtime.decisions.decision_selectors import held_call_of, interaction_locked
from runtime.decisions.interaction_state import interaction_close
from runtime.decisions.receipts import decision_edit_apply, decision_word
from runtime.decisions.standing_rules import rule_check, rule_create
from runtime.kernel.errors import (
    AlreadyDecided,
    ChannelRefused,
    DeciderRefused,
    DecisionMisfit,
    InvalidParams,
    ItemChanged,
    NotAllowed,
    RuleRefused,
    RuntimeFault,
    StepUpRequired,
    TaskNotFound,
    UnsupportedOperation,
)
from runtime.kernel.task_models import Task
from runtime.policy.approver_syntax import CALLER, DEFAULT_APPROVERS
from runtime.policy.needs import Needs, approvers_text

logger = logging.getLogger(__name__)

# The channels a decision comes through (a receipt's and an audit row's ``via``).
# ``connection``: connecting an app answers the open requests for it; ``slack``: a button or a
# modal of the tenant's Slack app (integrations.slack.decide); ``email``: an e-mail's one-time
# link, confirmed on its page (integrations.email.views).
PAGE, REST, BULK, INBAND, CONNECTION = "page", "rest", "bulk", "inband", "connection"
SLACK, EMAIL = "slack", "email"
CHANNELS = (PAGE, REST, BULK, INBAND, CONNECTION, SLACK, EMAIL)


@dataclass(frozen=True)
class AllowSimilar:
    """ "Approve and allow similar calls": the standing rule made with an approval
    (runtime.decisions.standing_rules): how long, only for this caller, conditions on the arguments."""

    duration: str = "1d"
    caller_only: bool = True
    conditions: list = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    """What a decider decides, as their channel read it. None is "not given".

    An approval: ``approved`` (and a ``reason`` the model sees); ``arguments``: the edited
    arguments (``editable: true``); ``shown_hash``: the SHA-256 of the arguments the decider
    was shown (the decision binds exactly those); ``allow_similar``: a standing rule too. A
    question or a connection: ``value``. ``message``: the caller's message that carried the
    answer (in band), kept in the task's history. ``opening``: the opening of the item the
    channel handed out what was clicked for (``Interaction.opening``: a Slack button, an
    e-mail's link); a later opening (the approval voided since) refuses it. None: the
    channel shows the item as it stands at each request (the page, REST).
    """

    approved: bool | None = None
    value: Any = None
    reason: str = ""
    arguments: dict | None = None
    shown_hash: str | None = None
    allow_similar: AllowSimilar | None = None
    message: dict | None = None
    opening: int | None = None

    def answer(self) -> dict:
        if self.approved is not None:
            return {"approved": self.approved, **({"reason": self.reason} if self.reason else {})}
        return {"value": self.value}


@dataclass(frozen=True)
class Decided:
    """What a decision came to: the interaction as it left it (decided, or open with one more
    approval recorded), and the standing rule made with it, or why none could be (the
    approval stands; ``rule_refused`` is the fault to report)."""

    interaction: Interaction
    rule: StandingRule | None = None
    rule_refused: RuntimeFault | None = None

    @property
    def recorded(self) -> bool:
        """An approval recorded that waits for another person's (the two-person rule)."""
        return self.interaction.state == Interaction.State.OPEN


def decision_take(
    *, tenant, interaction_id: str, decider: Decider, decision: Decision, channel: str
) -> Decided:
    """Take ``decider``'s ``decision`` on the tenant's interaction, through ``channel``:
    exactly one decision wins, and the first refusal changes nothing (see the module).

    Raises TaskNotFound (another tenant's id as a missing one), ChannelRefused,
    DecisionMisfit and InvalidParams, AlreadyDecided, ItemChanged, DeciderRefused,
    StepUpRequired (or, for the caller, UnsupportedOperation), RuleRefused.
    """
    interaction = _take(
        tenant=tenant,
        interaction_id=interaction_id,
        decider=decider,
        decision=decision,
        channel=channel,
    )
    wanted = decision.allow_similar
    if wanted is None or interaction.state != Interaction.State.ANSWERED:
        return Decided(interaction)
    # The approval stands on its own (committed); the rule, checked before it, is made from
    # it right after, in a transaction of its own (docs/how-to/policy.md "Standing rules").
    try:
        rule = rule_create(
            tenant=tenant,
            interaction_id=interaction.public_id,
            decider=decider,
            caller_only=wanted.caller_only,
            conditions=wanted.conditions,
            duration=wanted.duration,
            via=channel,
        )
    except (DeciderRefused, NotAllowed, InvalidParams, TaskNotFound) as exc:
        return Decided(interaction, rule_refused=exc)
    return Decided(interaction, rule=rule)


@transaction.atomic(durable=True)
def _take(
    *, tenant, interaction_id: str, decider: Decider, decision: Decision, channel: str
) -> Interaction:
    with interaction_locked(tenant=tenant, interaction_id=interaction_id) as (task, interaction):
        if task.tenant_id == tenant.pk:
            task.tenant = tenant  # the receipt's claims name it: not read again
        return decision_take_locked(
            task=task, interaction=interaction, decider=decider, decision=decision, channel=channel
        )


def decision_take_locked(
    *, task: Task, interaction: Interaction, decider: Decider, decision: Decision, channel: str
) -> Interaction:
    """``decision_take`` for a caller that holds the task's row lock and has read the
    interaction under it (the in-band answer, runtime.turn.intake), in its transaction. The
    standing rule of ``allow_similar`` is ``decision_take``'s to make."""
    # A span in the task's trace (config.tracing): the turn it resumes is its child; a
    # refusal ends it with the fault recorded.
    with task_span(
        "decision",
        task.trace_id,
        kind=SpanKind.INTERNAL,
        **{
            "countersign.task_id": task.public_id,
            "countersign.interaction_id": interaction.public_id,
            "countersign.interaction_kind": interaction.kind,
            "countersign.channel": channel,
            "countersign.decider_kind": decider.kind,
        },
    ) as span:
        taken = _decide(
            task=task, interaction=interaction, decider=decider, decision=decision, channel=channel
        )
        span.set_attribute("countersign.interaction_state", taken.state)
        return taken


def _decide(
    *, task: Task, interaction: Interaction, decider: Decider, decision: Decision, channel: str
) -> Interaction:
    if channel not in CHANNELS:
        raise ValueError(f"unknown decision channel {channel!r}")
    _channel_kind_check(interaction, channel)
    decision_fit_check(interaction, decision)
    if interaction.state != Interaction.State.OPEN:
        raise AlreadyDecided(interaction)
    if decision.opening is not None and decision.opening != interaction.opening:
        raise ItemChanged(interaction)
    value = answer_from_decider(interaction, decision.answer())
    needs = None
    if interaction.kind == Interaction.Kind.APPROVAL:
        # The held call's policy, read once for the whole decision (approvers.approval_needs):
        # every check, the edit, the quorum and the receipt ask it of ``needs``.
        needs = approval_needs(interaction, task.agent)
        approving = value.get("approved") is True
        _approval_check(interaction, decider, decision, channel, needs, approving=approving)
    else:
        _decider_check(interaction, decider)
    held = held_call_of(interaction)
    if held is not None and decision.shown_hash and decision.shown_hash != held.arguments_hash:
        # The decision binds the arguments its decider was shown, as they are now.
        raise InvalidParams(
            "argumentsHash",
            "the call's arguments are not the ones you were shown; reload and decide again",
        )
    edited = decision_edit_apply(
        task=task, interaction=interaction, answer=value, arguments=decision.arguments, needs=needs
    )
    answer = Answer(
        value={**value, "edited": True} if edited else value,
        by=decider.subject,
        via=channel,
        message=decision.message,
        stepped_up=decider.stepped_up,
        shown_hash=decision.shown_hash,
        edited=edited is not None,
        decider_kind=decider.kind,
        channel_user=decider.channel_user,
        rule=edited or (needs.rule if needs else None),
        on_behalf_of=delegation_for(interaction, decider, needs),
    )
    closing = (
        approval_gate(interaction=interaction, task=task, answer=answer, needs=needs)
        if needs is not None
        else answer
    )
    if closing is None:
        _log(interaction, decider, channel, "recorded")
        return interaction  # recorded; waits for the next person's approval
    interaction_close(task=task, interaction=interaction, answer=closing)
    _log(interaction, decider, channel, "decided")
    return interaction


def decision_refusal(
    *, interaction: Interaction, decider: Decider, decision: Decision, channel: str
) -> RuntimeFault | None:
    """What the flow would refuse ``decider``'s ``decision`` on ``interaction`` (read with its
    task and agent) with through ``channel``, or None: its checks, read without taking the
    decision (nothing is locked or written), for a surface that says up front what a
    decision will leave out (bulk triage's confirmation). The decision itself is checked
    again when it is taken: what changed meanwhile still refuses it then."""
    try:
        _channel_kind_check(interaction, channel)
        decision_fit_check(interaction, decision)
        if interaction.state != Interaction.State.OPEN:
            raise AlreadyDecided(interaction)
        if interaction.kind == Interaction.Kind.APPROVAL:
            needs = approval_needs(interaction, interaction.task.agent)
            approving = decision.approved is True
            _approval_check(interaction, decider, decision, channel, needs, approving=approving)
        else:
            _decider_check(interaction, decider)
    except (
        AlreadyDecided,
        ChannelRefused,
        DeciderRefused,
        InvalidParams,
        NotAllowed,
        RuleRefused,
        StepUpRequired,
        UnsupportedOperation,
    ) as refused:
        return refused
    return None


def _log(interaction: Interaction, decider: Decider, channel: str, outcome: str) -> None:
    # One line per decision, whatever the channel; who decided rides in ``extra`` (a
    # subject is the caller's to choose: it never shapes the line itself). Counted per
    # channel once it commits (config.metrics.DECISIONS), by what it came to.
    counted = decision_word(interaction) if outcome == "decided" else outcome
    transaction.on_commit(lambda: metrics.DECISIONS.labels(channel=channel, outcome=counted).inc())
    logger.info(
        "decision %s: %s %s via %s by a %s",
        outcome,
        interaction.kind,
        interaction.public_id,
        channel,
        decider.kind,
        extra={
            "interaction_id": interaction.public_id,
            "channel": channel,
            "decider_kind": decider.kind,
            "subject": decider.subject,
            "channel_user": decider.channel_user,
        },
    )


def _channel_kind_check(interaction: Interaction, channel: str) -> None:
    """What a channel never takes, whatever the decision (before its kind is read)."""
    if channel == BULK and interaction.kind != Interaction.Kind.APPROVAL:
        raise ChannelRefused(
            f"a {interaction.kind} is answered on its own page.",
            interactionId=interaction.public_id,
        )


def decision_fit_check(interaction: Interaction, decision: Decision) -> None:
    """Refuse a decision that does not fit the interaction's kind (DecisionMisfit), in the
    words the REST channel has always used for them."""
    if decision.approved is not None and decision.value is not None:
        raise DecisionMisfit("value", "Send either approved or value.")
    if interaction.kind == Interaction.Kind.APPROVAL:
        if decision.value is not None:
            raise DecisionMisfit("value", "An approval takes approved (and a reason), not value.")
        if decision.approved is None:
            # A missing decision is never read as a denial: it is refused, naming the field.
            raise DecisionMisfit("approved", "Required for an approval: true or false.")
        if decision.arguments is not None and decision.approved is not True:
            raise DecisionMisfit("arguments", "Arguments are edited only when approving.")
        if decision.allow_similar is not None and decision.approved is not True:
            raise DecisionMisfit("allowSimilar", "Only with approved: true.")
    elif decision.arguments is not None or decision.shown_hash is not None:
        raise DecisionMisfit("arguments", "Only an approval of a held call takes arguments.")
    elif decision.allow_similar is not None:
        raise DecisionMisfit("allowSimilar", "Only for an approval.")
    elif interaction.kind == Interaction.Kind.QUESTION and decision.value is None:
        raise DecisionMisfit("value", "Required for a question: the answer.")
    elif decision.approved is None and decision.value is None:
        raise DecisionMisfit("", "Send either approved (with a reason) or value.")


def _approval_check(
    interaction: Interaction,
    decider: Decider,
    decision: Decision,
    channel: str,
    needs: Needs,
    *,
    approving: bool,
) -> None:
    """An approval's refusals, before anything is recorded: the channel's, who decides,
    step-up, an edit two people cannot share, the standing rule asked for."""
    public_id = interaction.public_id
    if channel == BULK:
        # One reason for many items: what must be decided on its own page is left out.
        if not needs.bulk:
            raise ChannelRefused(
                f"the policy for {needs.server}/{needs.tool} says bulk: false "
                "(decide it on its own page).",
                interactionId=public_id,
            )
        if needs.required > 1:
            raise ChannelRefused(
                f"{needs.required} people must approve it (required: {needs.required}"
                f"{', in stages' if needs.staged else ''}); decide it on its own page.",
                interactionId=public_id,
            )
    if decider.kind == Decider.CALLER:
        _caller_check(interaction, decider, needs, approving=approving)
        return
    _decider_check(interaction, decider, needs)
    refusal = approve_refusal(decider, needs) if approving else None
    if refusal:
        raise DeciderRefused(refusal, interactionId=public_id)
    if approving and needs.high_risk and not decider.stepped_up:
        raise StepUpRequired(
            f"{needs.server} / {needs.tool} is marked risk: high: approving it needs a recent "
            "re-authentication (in the browser: confirm your password, and your authenticator "
            "code when you have one) or an operator token created with the step-up right.",
            interactionId=public_id,
        )
    if decision.arguments is not None and needs.required > 1:
        # Several people approve the same call: the next would approve what the first wrote.
        raise InvalidParams(
            "arguments",
            f"an approval that needs {needs.required} people is approved as the call stands; "
            "its arguments cannot be edited",
        )
    wanted = decision.allow_similar
    if wanted is not None:
        try:
            rule_check(
                interaction=interaction,
                decider=decider,
                conditions=wanted.conditions,
                duration=wanted.duration,
                needs=needs,
            )
        except (DeciderRefused, NotAllowed, InvalidParams, TaskNotFound) as exc:
            raise RuleRefused(exc) from exc


def _decider_check(interaction: Interaction, decider: Decider, needs: Needs | None = None):
    """Whether ``decider`` may decide at all (viewers, the subjects the system decides as,
    an approval's approvers); the caller is refused as a partner is told (-32004)."""
    refusal = decider_refusal(interaction, decider, needs)
    if refusal and decider.kind == Decider.CALLER:
        raise UnsupportedOperation(
            refusal, reason=DeciderRefused.reason, interactionId=interaction.public_id
        )
    if refusal:
        raise DeciderRefused(refusal, interactionId=interaction.public_id)


def _operators_only_text(needs: Needs) -> str:
    """Why the caller may not answer an approval in band, and who may: so that the caller's
    developer knows where it waits (roles and groups, never anyone's address)."""
    deciders = [a for a in needs.approvers if a != CALLER] or list(DEFAULT_APPROVERS)
    if needs.required > 1:
        why = f"{needs.required} people must approve it (required: {needs.required})"
    elif needs.named:
        why = "the tool policy names who approves it"
    else:
        why = (
            "the tool policy's deciders is operators, the default; "
            "deciders: either or caller lets the caller decide"
        )
    return (
        f"Only {approvers_text(deciders)} of the agent's organisation may decide this "
        f"approval; the caller cannot answer it in band ({why}). The task resumes once they "
        "have decided."
    )


def _caller_check(interaction: Interaction, decider: Decider, needs: Needs, *, approving: bool):
    """The caller, in band: only where the approval (as it opened, and its policy now) lets
    the caller decide, and never a ``risk: high`` approval (it cannot re-authenticate)."""
    _decider_check(interaction, decider, needs)
    refusal = approve_refusal(decider, needs) if approving else None
    if refusal:
        raise UnsupportedOperation(
            refusal, reason=DeciderRefused.reason, interactionId=interaction.public_id
        )
    if not needs.caller_may:
        raise UnsupportedOperation(
            _operators_only_text(needs),
            reason="OPERATOR_DECISION_REQUIRED",
            interactionId=interaction.public_id,
        )
    if approving and needs.high_risk:
        raise UnsupportedOperation(
            f"{needs.server} / {needs.tool} is marked risk: high: an operator who "
            "re-authenticated must approve it; the caller cannot approve it in band.",
            reason="STEP_UP_REQUIRED",
            interactionId=interaction.public_id,
        )


def interactions_connect_app(*, tenant, app: str, by: str) -> int:
    """An app was connected: answer every open connection interaction for it with connected:
    true, each a decision of the person who connected it (channel ``connection``)."""
    # Not one transaction: each answer is its own decision, which may lose to another answer
    # without undoing the ones before it.
    answered = 0
    ids = list(
        Interaction.objects.filter(
            tenant=tenant,
            kind=Interaction.Kind.CONNECTION,
            state=Interaction.State.OPEN,
            detail__app=app,
        ).values_list("public_id", flat=True)
    )
    decider = Decider(subject=by)
    for interaction_id in ids:
        try:
            decision_take(
                tenant=tenant,
                interaction_id=interaction_id,
                decider=decider,
                decision=Decision(value=True),
                channel=CONNECTION,
            )
            answered += 1
        except AlreadyDecided:
            continue
    return answered
