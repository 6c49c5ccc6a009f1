"""Receipts: what a decision on a held call binds (the call's arguments hash and the version
of the policy rule that held it), and the decisions people can trust: the trust keys of a tool
(``risk: high``, ``editable``), edit-then-approve, the receipt and the audit row written with
a decision. The step-up a high-risk approval asks for is the decision flow's
(runtime.decisions.flow).

Everything here runs inside a decision's transaction (runtime.decisions.flow) or the
turn's (runtime.turn.approval_check, before a call is sent), with the task's row locked; none
opens a transaction of its own.
"""

import hashlib
import json
import logging
from datetime import UTC

from django.db.models import Q

from config.site import site_url
from runtime.agents.agent_models import Agent
from runtime.agents.policy_history import policy_hash
from runtime.decisions.answers import Answer
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.signing import receipt_sign
from runtime.decisions.summaries import impact_render, redacted
from runtime.kernel import extensions as ext
from runtime.kernel.errors import InvalidParams
from runtime.kernel.shapes import decider_public
from runtime.kernel.task_models import Task
from runtime.kernel.task_state import TurnBatch, row_add
from runtime.policy.needs import Needs
from runtime.policy.rules import PolicyRule, policy_rule_for
from runtime.policy.title_syntax import call_terms
from runtime.tools.catalog import tool_spec, validate_arguments

logger = logging.getLogger(__name__)


# How a decision reached the core; a receipt's channel. ``rule``: a standing rule allowed the
# call (runtime.decisions.standing_rules calls receipt_record with the rule's id); ``system``: a void
# approval; ``slack`` and ``email``: the tenant's Slack app, an e-mail's one-time link.
CHANNELS = (
    "page",
    "rest",
    "inband",
    "bulk",
    "rule",
    "expiry",
    "system",
    "slack",
    "email",
    "policy",
)
RISK_LEVELS = ("normal", "high")


def canonical_hash(value) -> str:
    """SHA-256 of canonical JSON: sorted keys, no spaces, ASCII escapes. The same bytes as the
    effect journal's ``arguments_hash`` (runtime.turn.calls), so the two compare directly."""
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def policy_version(agent: Agent) -> str:
    """The version of the agent's whole tool policy: the SHA-256 of it, canonical. Django
    admin shows it and audits a change with it; what an approval binds is the version of the
    rule that held its call (rule_version), so another tool's entry changing voids nothing."""
    return policy_hash(agent.tool_policy)


def receipt_record(
    *,
    effect: Effect,
    agent: Agent,
    decision: str,
    decider: str,
    channel: str,
    interaction_id: str = "",
    shown_hash: str | None = None,
    edited: bool = False,
    stepped_up: bool = False,
    rule_id: str = "",
    reason: str = "",
    channel_user: str = "",
    on_behalf_of: str = "",
    shown_arguments: dict | None = None,
    redact: tuple[str, ...] = (),
    held: PolicyRule | None = None,
    decided_by: list[str] | None = None,
    batch: TurnBatch | None = None,
) -> Receipt:
    """Write the receipt of one decision on ``effect`` in the caller's transaction.

    ``shown_hash``: the SHA-256 of the arguments the decider saw (the effect's own hash when
    not given); the effect's current ``arguments_hash`` is what will be sent (after an edit,
    the edited arguments'). ``held``: the policy rule that holds the call as ``agent`` has
    it now (read here when the caller has not); the receipt binds its version. Standing
    rules (channel ``rule``) call this with their ``rule_id``. ``channel_user``: who the
    channel knew the decider as. The arguments shown (``shown_arguments``, else the
    effect's) and sent are kept, the fields of ``redact`` and of ``held`` as ``•••``.
    ``decided_by``: everyone whose approval made the decision (a quorum's), else the decider.
    The rule's ``impact`` line is kept over the arguments shown. The receipt is signed
    (runtime.decisions.signing) as it is written, now or with ``batch``'s statement
    (runtime.kernel.task_state.row_add)."""
    held = held or policy_rule_for(agent, effect.server, effect.tool, effect.arguments)
    hidden = receipt_redaction(held, redact)
    shown = redacted(shown_arguments if shown_arguments is not None else effect.arguments, hidden)
    impact = call_terms(held.rule).get("impact")
    context = {
        "caller": effect.task.subject,
        "agent": agent.slug,
        "server": effect.server,
        "tool": effect.tool,
    }
    receipt = Receipt(
        tenant_id=effect.tenant_id,
        agent_slug=agent.slug,
        task_public_id=effect.task.public_id,
        interaction_public_id=interaction_id,
        effect_public_id=effect.public_id,
        server=effect.server,
        tool=effect.tool,
        decision=decision,
        decider=decider,
        channel=channel,
        channel_user=channel_user[:200],
        on_behalf_of=on_behalf_of[:200],
        arguments_hash=shown_hash or effect.arguments_hash,
        sent_arguments_hash=effect.arguments_hash,
        edited=edited,
        arguments=shown,
        sent_arguments=redacted(effect.arguments, hidden),
        # What the decider was told approving does: the rule's impact over what they saw.
        impact=impact_render(impact, shown, context) if impact else "",
        policy_version=held.version,
        policy_entry=held.entry,
        policy_rule=held.number,
        stepped_up=stepped_up,
        rule_id=rule_id,
        reason=reason[:1000],
    )
    receipt.jws = receipt_sign(
        receipt_claims(
            receipt,
            tenant=effect.task.tenant.slug,
            decided_by=decided_by or [decider],
        )
    )
    # Its INSERT written once per process (runtime.kernel.rowsql), as the audit row's: no receiver
    # listens for a receipt's save; the model's own save() only refuses updates.
    row_add(receipt, batch)
    return receipt


def receipt_claims(receipt: Receipt, *, tenant: str, decided_by: list[str]) -> dict:
    """What a receipt's JWS says: the receipt as a caller sees it (the arguments as approved,
    redacted, and the hash of those to run), with the tenant, agent, task and interaction it
    belongs to, the issuer and when it was signed."""
    return {
        "receipt_id": receipt.public_id,
        "approved": receipt.decision in (Receipt.Decision.APPROVED, Receipt.Decision.ALLOWED),
        "decision": receipt.decision,
        "tool": f"{receipt.server}/{receipt.tool}",
        "arguments": receipt.sent_arguments,
        "arguments_sha256": receipt.sent_arguments_hash,
        "edited": receipt.edited,
        "policy": {
            "entry": receipt.policy_entry,
            "rule": receipt.policy_rule or 0,
            "version": receipt.policy_version,
        },
        "decided_by": list(dict.fromkeys(decided_by)),
        "channel": receipt.channel,
        "decided_at": receipt.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": receipt.reason,
        "tenant": tenant,
        "agent": receipt.agent_slug,
        "task_id": receipt.task_public_id,
        "interaction_id": receipt.interaction_public_id,
        "iss": site_url(),
        "iat": int(receipt.created_at.timestamp()),
    }


def receipt_redaction(held: PolicyRule, recorded=()) -> list[str]:
    """What a receipt keeps as ``•••``: what the approval recorded when it opened, and what
    the rule that holds the call says now (``held``: a receipt is never rewritten, so the
    stricter of both)."""
    now = call_terms(held.rule).get("redact", [])
    return list(dict.fromkeys([*recorded, *now]))


def receipt_binding(effect: Effect) -> Receipt | None:
    """The effect's latest receipt (what the call's sending must still match), or None for a
    call no decision bound (allowed by the policy, or journalled before receipts)."""
    return (
        Receipt.objects.filter(tenant_id=effect.tenant_id, effect_public_id=effect.public_id)
        .order_by("-created_at", "-id")
        .first()
    )


def receipt_mismatch(receipt: Receipt, *, effect: Effect, agent: Agent) -> str | None:
    """Why the call may not be sent on this receipt, or None when it still binds.

    The receipt binds the version of the rule that held the call: the same rule must hold it
    now, as written then. A receipt from before rules had versions (the whole policy's hash)
    still binds while the whole policy is unchanged."""
    if not receipt.binds:
        return f"its last decision is {receipt.decision}, not an approval"
    current = policy_rule_for(agent, effect.server, effect.tool, effect.arguments)
    if receipt.policy_version not in (current.version, policy_version(agent)):
        # The reason reaches the caller (the status, ``detail.reason``): versions only, never
        # the rule's conditions, which name argument values.
        return (
            f"the tool policy changed after the approval (its rule for {effect.server}/"
            f"{effect.tool}: version {receipt.policy_version[:12]} then, "
            f"{current.version[:12]} now)"
        )
    if (
        canonical_hash(effect.arguments) != receipt.sent_arguments_hash
        or effect.arguments_hash != receipt.sent_arguments_hash
    ):
        return "the call's arguments no longer match what was approved"
    return None


# --- before the decision -------------------------------------------------------------------


def decision_edit_apply(
    *, task: Task, interaction: Interaction, answer: dict, arguments, needs: Needs | None
) -> PolicyRule | None:
    """Apply an operator's edit of the held call's ``arguments`` (``editable: true`` in the
    tool's policy as the decision read it, ``needs``; valid for the tool's schema; held by
    the same rule): the effect then holds them and their hash. The policy rule that holds
    the edited call (the receipt's), or None when there is no edit."""
    effect = held_call_of(interaction)
    if effect is None:
        if arguments is not None:
            raise InvalidParams("arguments", "only an approval of a held call takes arguments")
        return None
    if arguments is None:
        return None
    if answer.get("approved") is not True:
        raise InvalidParams("arguments", "arguments are edited only when approving")
    if needs is None or needs.rule is None or not needs.editable:
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
        return None
    held, edited = needs.rule, policy_rule_for(task.agent, effect.server, effect.tool, arguments)
    if edited.version != held.version:
        # Another rule would hold the edited call (say, production's two people for a
        # staging deploy edited into a production one): this approval is not that rule's.
        raise InvalidParams(
            "arguments",
            f"the edited arguments fall under another rule of the tool policy "
            f"({edited.label()}), not the one that held this call ({held.label()}); deny it "
            "and let the agent make that call, or edit within this rule",
        )
    moved = Effect.objects.filter(pk=effect.pk, state=Effect.State.HELD).update(
        arguments=arguments, arguments_hash=new_hash
    )
    if moved != 1:
        raise InvalidParams("arguments", "the call is no longer held; its arguments stay")
    # The item's record of its call follows (written by its close): the arguments sent,
    # and those the decider was shown (the receipt keeps both).
    call = (interaction.request or {}).get("call")
    if isinstance(call, dict):
        shown = {"arguments": arguments, "shownArguments": effect.arguments}
        interaction.request = {**interaction.request, "call": {**call, **shown}}
    effect.arguments, effect.arguments_hash = arguments, new_hash
    return edited


# --- with the decision ---------------------------------------------------------------------


def decision_receipt(
    *,
    task: Task,
    interaction: Interaction,
    answer: Answer,
    reason: str | None = None,
    batch: TurnBatch | None = None,
) -> Receipt | None:
    """The receipt of ``answer`` on ``interaction``'s held call (approvals only; questions
    bind no call): the decision that closed it, or one approval of several (``reason``: what
    it says in place of the answer's reason); written now or with ``batch``'s statement."""
    effect = held_call_of(interaction)
    if effect is None:
        return None
    if interaction.state == Interaction.State.EXPIRED:
        decision = Receipt.Decision.EXPIRED
    elif answer.value.get("approved") is True:
        decision = Receipt.Decision.APPROVED
    else:
        decision = Receipt.Decision.DENIED
    call = (interaction.request or {}).get("call")
    call = call if isinstance(call, dict) else {}
    shown = call.get("shownArguments") if answer.edited else None
    # A quorum's receipt names everyone whose approval counted (one approval of several: the
    # approvals so far, this one's last).
    approvals = answer.approvals or interaction.approvals or []
    decided_by = [str(a.get("by")) for a in approvals if isinstance(a, dict) and a.get("by")]
    return receipt_record(
        effect=effect,
        agent=task.agent,
        decided_by=[*decided_by, answer.by] if decision == Receipt.Decision.APPROVED else None,
        decision=decision,
        decider=answer.by,
        channel=answer.via,
        interaction_id=interaction.public_id,
        shown_hash=answer.shown_hash,
        edited=answer.edited,
        stepped_up=answer.stepped_up,
        reason=str(answer.value.get("reason", "")) if reason is None else reason,
        channel_user=answer.channel_user,
        on_behalf_of=answer.on_behalf_of,
        shown_arguments=shown if isinstance(shown, dict) else None,
        redact=tuple(call_terms(call).get("redact", ())),
        held=answer.rule,
        batch=batch,
    )


def decision_outcome(interaction: Interaction) -> dict:
    """The interactions/v1 data of the status that follows a decision: what was decided, by
    what kind of decider, and ``edited`` for an approval whose arguments an operator changed.
    Never the arguments, never an operator's identity."""
    answer = interaction.answer or {}
    outcome = decision_word(interaction)
    data: dict[str, str | bool | None] = {
        "interactionId": interaction.public_id,
        "kind": interaction.kind,
        "outcome": outcome,
        "decidedBy": decider_public(interaction.answered_by, interaction.answered_via),
        "decidedVia": interaction.answered_via,
    }
    if interaction.kind == Interaction.Kind.APPROVAL:
        data["edited"] = answer.get("edited") is True
    return {ext.INTERACTIONS: data}


def decision_word(interaction: Interaction) -> str:
    """What a decided interaction came to, in one word: the audit's action and the
    interactions/v1 ``outcome`` (expired, approved, denied, connected, declined, answered)."""
    answer = interaction.answer or {}
    if interaction.state == Interaction.State.EXPIRED:
        return "expired"
    if interaction.kind == Interaction.Kind.APPROVAL:
        return "approved" if answer.get("approved") else "denied"
    if interaction.kind == Interaction.Kind.CONNECTION:
        return "connected" if answer.get("connected") else "declined"
    return "answered"


# --- reads (selectors: always by tenant) ---------------------------------------------------


def receipts_for(
    *, tenant, task_public_id: str | None = None, effect_public_id: str | None = None
) -> list[Receipt]:
    """A task's (or one held call's) receipts, oldest first."""
    rows = Receipt.objects.filter(tenant=tenant)
    if task_public_id is not None:
        rows = rows.filter(task_public_id=task_public_id)
    if effect_public_id is not None:
        rows = rows.filter(effect_public_id=effect_public_id)
    return list(rows.order_by("created_at", "id")[:200])


def receipts_page(*, tenant, after: tuple | None, size: int) -> list[Receipt]:
    """A keyset page of the tenant's receipts, newest first: those before ``after``
    ((created_at, id) of the last row of the previous page). One indexed query per page."""
    rows = Receipt.objects.filter(tenant=tenant)
    if after is not None:
        when, pk = after
        rows = rows.filter(Q(created_at__lt=when) | Q(created_at=when, id__lt=pk))
    return list(rows.order_by("-created_at", "-id")[:size])
