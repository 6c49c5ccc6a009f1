"""What a decision shows the person about to take it, gathered once for every surface: the
operator's page, the REST detail, and the channels to come (a chat message, an e-mail).

The held call with its arguments and their hash, what the approval needs now (who may decide,
how many people, step-up: runtime.decisions.approvers.approval_needs, the same reading the
decision flow makes), whether this decider may decide and approve, what happens next, the
receipts, and whether a standing rule may be made with the approval. Reads only; the
decision itself is runtime.decisions.flow's.
"""

from dataclasses import dataclass

from runtime.decisions.approvers import (
    Decider,
    approval_needs,
    approvals_progress,
    approve_refusal,
    decider_refusal,
)
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.receipts import receipts_for
from runtime.decisions.standing_rules import needs_refusal, rule_refusal
from runtime.policy.needs import Needs, approvers_text
from runtime.tools.catalog import tool_spec


@dataclass(frozen=True)
class DecisionFacts:
    """What a decision surface shows of one interaction, for one decider.

    ``refusal``: why this decider may not decide at all; ``approve_refusal``: why they may
    deny but not approve; ``step_up_needed``: approving asks them to re-authenticate first;
    ``editable``: edit-then-approve is offered (with ``schema``); ``rule_refusal``: why no
    standing rule may be made with an approval ("" when one may); ``next_step``: what their
    decision does, in words."""

    interaction: Interaction
    held_call: Effect | None
    needs: Needs | None
    is_open: bool
    refusal: str | None
    approve_refusal: str | None
    step_up_needed: bool
    approved_already: bool
    progress: str
    approvers: tuple[str, ...]
    approvers_named: str
    editable: bool
    schema: dict | None
    rule_refusal: str
    next_step: str
    receipts: list[Receipt]
    # "stage 1 of 2: operators" for an approval in stages; which rule of the tool policy held
    # the call as it opened, and which holds it now when that differs (pages say both).
    stage: str = ""
    held_by: str = ""
    held_by_now: str = ""

    @property
    def high_risk(self) -> bool:
        return bool(self.needs and self.needs.high_risk)

    @property
    def may_decide(self) -> bool:
        return self.is_open and self.refusal is None

    @property
    def may_approve(self) -> bool:
        # One who gave the first of two approvals is not offered Approve again.
        return self.may_decide and self.approve_refusal is None and not self.approved_already

    @property
    def may_make_rule(self) -> bool:
        return self.may_approve and self.held_call is not None and not self.rule_refusal


def decision_facts(
    *, interaction: Interaction, decider: Decider, with_receipts: bool = True
) -> DecisionFacts:
    """What ``decider`` is shown of ``interaction`` (read with its task and agent, as the
    tenant's selectors read it) before deciding."""
    is_open = interaction.state == Interaction.State.OPEN
    held = held_call_of(interaction)
    approval = interaction.kind == Interaction.Kind.APPROVAL
    needs = approval_needs(interaction) if approval else None
    refusal = decider_refusal(interaction, decider, needs) if is_open else None
    approve_no = approve_refusal(decider, needs) if needs and is_open and not refusal else None
    may_approve = is_open and refusal is None and approve_no is None
    standing = list(needs.approved) if needs and needs.required > 1 else []
    approved_already = any(entry.get("by") == decider.subject for entry in standing)
    step_up = bool(needs and needs.high_risk and not decider.stepped_up and may_approve)
    editable = bool(held and needs and needs.editable and needs.required <= 1)
    rule_no = ""
    if needs is not None and held is not None:  # an approval's held call
        agent = interaction.task.agent
        rule_no = (
            rule_refusal(agent, held.server, held.tool, held.arguments, needs.policy)
            or needs_refusal(needs)
            or ""
        )
    held_by, held_by_now = _held_by(needs)
    wants_schema = is_open and (editable or not rule_no)
    schema = (
        (tool_spec(interaction.task.agent, held.server, held.tool) or {}).get("schema")
        if held is not None and wants_schema
        else None
    )
    return DecisionFacts(
        interaction=interaction,
        held_call=held,
        needs=needs,
        is_open=is_open,
        refusal=refusal,
        approve_refusal=approve_no,
        step_up_needed=step_up,
        approved_already=approved_already,
        progress=approvals_progress(interaction, needs),
        approvers=needs.approvers if needs else (),
        approvers_named=approvers_text(needs.approvers)
        if needs and (needs.named or interaction.widened_to)
        else "",
        editable=editable,
        schema=schema,
        rule_refusal=rule_no,
        next_step=_next_step(
            interaction, held, needs, refusal, standing, approved_already, step_up
        ),
        receipts=receipts_for(tenant=interaction.tenant, effect_public_id=held.public_id)
        if with_receipts and held is not None
        else [],
        stage=needs.stage_text() if needs else "",
        held_by=held_by,
        held_by_now=held_by_now,
    )


def _held_by(needs: Needs | None) -> tuple[str, str]:
    """Which rule held the call as the approval opened, and the one that holds it now when it
    is another (the policy changed since): "" for what is no held call."""
    if needs is None or needs.rule is None:
        return "", ""
    now = needs.rule.label()
    opened = (needs.opened_rule or {}).get("label") or now
    if (needs.opened_rule or {}).get("version") in (None, needs.rule.version):
        return opened, ""
    return opened, now


def _next_step(interaction, held, needs, refusal, standing, approved_already, step_up) -> str:
    if interaction.state != Interaction.State.OPEN or refusal:
        return ""
    if interaction.kind == Interaction.Kind.QUESTION:
        return "Your answer goes to the agent, and the task goes on."
    if interaction.kind == Interaction.Kind.CONNECTION:
        app = (interaction.detail or {}).get("app", "the app")
        return f"Connecting {app} answers this request; declining lets the agent go on without it."
    call = f"{held.server} / {held.tool}" if held else "the call"
    first = "Approving asks you to confirm it is you first (risk: high). " if step_up else ""
    if needs.required > 1:
        if approved_already:
            return f"You approved {call}: another person must approve before it is sent."
        count = len(standing) + 1
        stage = f" (in {needs.stage_text()})" if needs.staged else ""
        if count < needs.required:
            return (
                f"{first}Your approval would be {count} of {needs.required}{stage}: another "
                f"person must approve before {call} is sent. A denial ends it."
            )
        return (
            f"{first}Your approval is the last one needed{stage}: {call} is sent. A denial ends it."
        )
    return (
        f"{first}Approving sends {call} with exactly these arguments; denying tells the agent "
        "(and your reason)."
    )


def approval_progress(interaction: Interaction) -> dict:
    """What an approval's detail says beyond its row (REST; any channel may say the same):
    ``heldBy``, the rule of the tool policy that held its call (as it opened; while it is
    open, the rule that holds it now, whose version its approvals bind, with the one it
    opened under as ``openedUnder`` when the policy changed since); while it is open,
    ``progress`` ("2 of 3"), and for one in stages the ``stage`` being decided (from 1) and
    the ``stages``, each with its approvers, number and the approvals counted in it;
    ``needs``, what it needs now (approval_needs), when read."""
    found: dict = {
        "heldBy": (interaction.request or {}).get("policyRule"),
        "openedUnder": None,
        "progress": None,
        "stage": None,
        "stages": [],
    }
    if interaction.kind != Interaction.Kind.APPROVAL or interaction.state != Interaction.State.OPEN:
        return found
    needs = found["needs"] = approval_needs(interaction)
    found["progress"] = approvals_progress(interaction, needs) or None
    opened = found["heldBy"]
    if needs.rule is not None and (opened or {}).get("version") != needs.rule.version:
        # The rule was edited (or another holds the call) since it opened: the approvals
        # given under the old version no longer count, and a decision now binds this one.
        found["heldBy"] = needs.rule.stored()
        found["openedUnder"] = opened
    if needs.staged:
        counted = [entry.get("stage") for entry in needs.approved]
        found["stage"] = needs.stage + 1
        found["stages"] = [
            {
                "stage": index + 1,
                "title": stage.title,
                "approvers": list(stage.approvers),
                "required": stage.required,
                "approved": counted.count(index + 1),
            }
            for index, stage in enumerate(needs.stages)
        ]
    return found
