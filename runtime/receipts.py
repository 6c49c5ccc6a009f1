"""Decision receipts (issue 13): what a decision on a held call binds, and the trust keys of a
tool's policy (``editable``, ``risk``).

A receipt holds the SHA-256 of the canonical arguments the decider was shown (and of those to
be sent, when an operator edited them) and the policy version in force: the SHA-256 of the
agent's whole tool policy. ``receipt_record`` writes one inside the caller's transaction, like
``runtime.audit.audit_record``; the check before a call is sent is in
``runtime.services.receipts``.
"""

import hashlib
import json
from dataclasses import dataclass

from django.db.models import Q

from runtime.models import Agent, Effect, Receipt
from runtime.rowsql import row_insert

# How a decision reached the core; a receipt's channel. ``rule``: a standing rule allowed the
# call (runtime.rules calls receipt_record with the rule's id); ``system``: a void approval.
CHANNELS = ("page", "rest", "inband", "bulk", "rule", "expiry", "system")
RISK_LEVELS = ("normal", "high")


def canonical_hash(value) -> str:
    """SHA-256 of canonical JSON: sorted keys, no spaces, ASCII escapes. The same bytes as the
    effect journal's ``arguments_hash`` (runtime.turn.calls), so the two compare directly."""
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def policy_version(agent: Agent) -> str:
    """The version of the agent's tool policy: the SHA-256 of the whole policy, canonical.

    Any change to the policy (another tool's entry included) makes a new version, so that an
    approval given under one policy never sends a call under another."""
    return canonical_hash(agent.tool_policy or {})


@dataclass(frozen=True)
class ToolTrust:
    """The keys of a tool's policy entry that issue 13 adds: ``editable: true`` lets an
    operator change the arguments before approving; ``risk: high`` asks the decider to have
    re-authenticated recently (step-up)."""

    editable: bool = False
    risk: str = "normal"

    @property
    def high_risk(self) -> bool:
        return self.risk == "high"


def tool_trust(agent: Agent, server: str, tool: str) -> ToolTrust:
    """The trust keys of the tool's policy entry (``server/tool``, else ``server``), as
    runtime.tools.policy_for picks the entry."""
    rules = agent.tool_policy or {}
    rule = rules.get(f"{server}/{tool}", rules.get(server))
    if not isinstance(rule, dict):
        return ToolTrust()
    return ToolTrust(
        editable=rule.get("editable") is True,
        risk="high" if rule.get("risk") == "high" else "normal",
    )


def decider_public(by: str, via: str) -> str:
    """Who decided, as a partner may read it (interactions/v1 ``decidedBy``): the kind of
    decider, never an operator's e-mail or a program's name. Seed 000 records the caller's
    subject as ``approvedBy`` server side; what goes back on the wire says only the role."""
    if via == "inband":
        return "caller"
    if via == "rule" or by.startswith("rule:"):
        return "rule"
    if by.startswith("system:"):
        return by  # system:expiry, system:cancel, ...: names no person
    return "operator"


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
) -> Receipt:
    """Write the receipt of one decision on ``effect`` in the caller's transaction.

    ``shown_hash``: the SHA-256 of the arguments the decider saw (the effect's own hash when
    not given); the effect's current ``arguments_hash`` is what will be sent (after an edit,
    the edited arguments'). The policy version is read from ``agent`` as the caller holds it.
    Standing rules (channel ``rule``) call this with their ``rule_id`` and the rule's subject
    as ``decider``.
    """
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
        arguments_hash=shown_hash or effect.arguments_hash,
        sent_arguments_hash=effect.arguments_hash,
        edited=edited,
        policy_version=policy_version(agent),
        stepped_up=stepped_up,
        rule_id=rule_id,
        reason=reason[:1000],
    )
    # Its INSERT written once per process (runtime.rowsql), as the audit row's: no receiver
    # listens for a receipt's save; the model's own save() only refuses updates.
    row_insert(receipt)
    return receipt


def receipt_binding(effect: Effect) -> Receipt | None:
    """The effect's latest receipt (what the call's sending must still match), or None for a
    call no decision bound (allowed by the policy, or journalled before receipts)."""
    return (
        Receipt.objects.filter(tenant_id=effect.tenant_id, effect_public_id=effect.public_id)
        .order_by("-created_at", "-id")
        .first()
    )


def receipt_mismatch(receipt: Receipt, *, effect: Effect, agent: Agent) -> str | None:
    """Why the call may not be sent on this receipt, or None when it still binds."""
    if not receipt.binds:
        return f"its last decision is {receipt.decision}, not an approval"
    current = policy_version(agent)
    if current != receipt.policy_version:
        return (
            f"the agent's tool policy changed after the approval (version "
            f"{receipt.policy_version[:12]} then, {current[:12]} now)"
        )
    if (
        canonical_hash(effect.arguments) != receipt.sent_arguments_hash
        or effect.arguments_hash != receipt.sent_arguments_hash
    ):
        return "the call's arguments no longer match what was approved"
    return None


# --- reads (selectors: always by tenant) -----------------------------------------------------


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
