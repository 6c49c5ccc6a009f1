"""An MCP client's held calls through a gateway (runtime.gateway.gateway_models.GatewayCall):
opened as a turn of the gateway with the call in it (held, decided and sent as a hosted agent's
call is: runtime.turn.calls), joined when the same call comes again, and read back as what the
client is told: who is asked and how far the approval is, then the call's outcome."""

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.gateway.gateway_models import GatewayCall
from runtime.kernel.audit import audit_record
from runtime.kernel.task_models import TERMINAL_STATES, Task
from runtime.llm.gateway_model import MCP_CALL
from runtime.policy.approver_syntax import DEFAULT_APPROVERS
from runtime.turn.intake import message_send


def call_key(server: str, tool: str, arguments: dict) -> str:
    """What makes two calls the same call: the tool and its canonical arguments."""
    canonical = json.dumps([server, tool, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class HeldCall:
    """The held call a request waits on; ``joined``: it was open already (the same call sent
    again), and this request joined it."""

    pk: int
    task_pk: int | None
    joined: bool


def gateway_call_hold(
    *,
    gateway: Agent,
    token_pk: int,
    subject: str,
    server: str,
    tool: str,
    arguments: dict,
    client_name: str = "",
    client_version: str = "",
) -> HeldCall:
    """Open the held call as a turn of ``gateway``, or join the same call (same tool,
    arguments and token) whose outcome no client has been given yet."""
    key = call_key(server, tool, arguments)
    mine = {"gateway": gateway, "token_id": token_pk, "call_key": key}
    found = GatewayCall.objects.filter(**mine, delivered_at__isnull=True).first()
    if found is not None:
        return HeldCall(pk=found.pk, task_pk=found.task_id, joined=True)
    try:
        with transaction.atomic():
            row = GatewayCall.objects.create(
                tenant_id=gateway.tenant_id,
                subject=subject,
                server=server,
                tool=tool,
                client_name=client_name[:200],
                client_version=client_version[:100],
                **mine,
            )
    except IntegrityError:
        # The same call came at the same moment and committed first: join it.
        found = GatewayCall.objects.filter(**mine, delivered_at__isnull=True).first()
        if found is None:
            raise
        return HeldCall(pk=found.pk, task_pk=found.task_id, joined=True)
    message = {
        "messageId": f"mcp-{uuid.uuid4().hex}",
        "role": "ROLE_USER",
        "parts": [{"data": {MCP_CALL: {"server": server, "tool": tool, "arguments": arguments}}}],
    }
    try:
        sent = message_send(tenant=gateway.tenant, agent=gateway, subject=subject, message=message)
    except Exception:
        # Nothing was opened: a later call must not wait on this one.
        GatewayCall.objects.filter(pk=row.pk).delete()
        raise
    with transaction.atomic():
        GatewayCall.objects.filter(pk=row.pk).update(task=sent.task)
        audit_record(
            tenant_id=gateway.tenant_id,
            actor=subject,
            action="gateway_call",
            via="mcp",
            task=sent.task,
            detail={
                "gateway": gateway.slug,
                "server": server,
                "tool": tool,
                "client": {"name": client_name, "version": client_version},
            },
        )
    return HeldCall(pk=row.pk, task_pk=sent.task.pk, joined=False)


@dataclass
class CallStatus:
    """What a waiting client is told: ``done`` with the outcome, or who is asked and how far."""

    done: bool
    task_pk: int | None = None
    interaction_id: str = ""
    asked: str = ""
    approvals: int = 0
    required: int = 1
    stage: int = 0
    stages: int = 0
    ok: bool = False
    result: Any = None
    reason: str = ""
    receipt: dict = field(default_factory=dict)

    @property
    def progress_text(self) -> str:
        if not self.interaction_id:
            return "The call is being checked."
        text = f"Waiting for approval by {self.asked}"
        if self.stages > 1:
            text += f" (stage {self.stage} of {self.stages})"
        if self.required > 1:
            text += f": {self.approvals} of {self.required} approvals"
        return text + "."


def gateway_call_status(*, call_pk: int, tenant_id: int) -> CallStatus:
    """Where the held call stands (its tenant's rows only)."""
    row = GatewayCall.objects.filter(pk=call_pk, tenant_id=tenant_id).first()
    if row is None:
        # Its opening failed (gateway_call_hold took the row back): nothing waits for a person.
        return CallStatus(done=True, reason="the call could not be held for approval; call again")
    if row.task_id is None:
        return CallStatus(done=False)  # being opened by the request that made the row
    task = Task.objects.filter(pk=row.task_id, tenant_id=tenant_id).first()
    if task is None:
        return CallStatus(done=True, reason="the call's record is gone")
    if task.state not in TERMINAL_STATES:
        status = CallStatus(done=False, task_pk=task.pk)
        interaction = (
            Interaction.objects.filter(
                task=task, kind=Interaction.Kind.APPROVAL, state=Interaction.State.OPEN
            )
            .order_by("-created_at")
            .first()
        )
        if interaction is not None:
            _waiting_on(status, interaction)
        return status
    return _outcome(task)


def _waiting_on(status: CallStatus, interaction: Interaction) -> None:
    status.interaction_id = interaction.public_id
    stages = (interaction.request or {}).get("stages") or []
    approvers = list(interaction.approvers or []) or list(DEFAULT_APPROVERS)
    approvers += [r for r in interaction.widened_to or () if r not in approvers]
    status.approvals = len(interaction.approvals or [])
    status.required = max(1, interaction.approvals_required)
    if len(stages) > 1:
        status.stages = len(stages)
        done = 0
        for index, stage in enumerate(stages):
            done += int(stage.get("required", 1))
            if status.approvals < done:
                status.stage = index + 1
                approvers = list(stage.get("approvers") or approvers)
                break
    status.asked = ", ".join(_said(a) for a in approvers)


def _said(approver: str) -> str:
    """An approver as a person reads it: ``group:release`` is "the release group"."""
    if approver.startswith("group:"):
        return f"the {approver.removeprefix('group:')} group"
    return {"admin": "admins", "operator": "operators", "caller": "the caller"}.get(
        approver, approver
    )


def _outcome(task: Task) -> CallStatus:
    results = [e for e in task.transcript or [] if e.get("type") == "tool_result"]
    status = CallStatus(done=True, task_pk=task.pk)
    if not results:
        status.reason = "the call was not sent: the gateway's turn ended without it"
        return status
    last = results[-1]
    status.ok = bool(last.get("ok"))
    status.result = last.get("result")
    status.reason = str(last.get("reason") or last.get("error") or "")
    effect = Effect.objects.filter(task=task).order_by("-step").first()
    if effect is not None:
        if not status.ok and effect.state == Effect.State.DENIED:
            by = (effect.outcome or {}).get("by") or ""
            status.reason = _denial(status.reason, by)
        receipt = (
            Receipt.objects.filter(tenant_id=task.tenant_id, effect_public_id=effect.public_id)
            .exclude(decision=Receipt.Decision.VOID)
            .order_by("-created_at", "-id")
            .first()
        )
        if receipt is not None:
            status.receipt = receipt_meta(receipt)
    return status


def _denial(reason: str, by: str) -> str:
    if reason == "expired" or by.startswith("system:expiry"):
        return (
            "Nobody approved this call before its approval expired; it was not run. "
            "Ask the person who approves it, or make the call again to ask anew."
        )
    said = f" by {by}" if by else ""
    why = f": {reason}" if reason and reason != "denied" else ""
    return f"A person denied this call{said}{why}. It was not run; do not retry it unchanged."


def receipt_meta(receipt: Receipt) -> dict:
    """The receipt of the decision that let the call go (or stopped it), for ``_meta``: its
    id and its signature (the compact JWS it was signed with; none on a receipt written
    before receipts were signed)."""
    meta = {
        "id": receipt.public_id,
        "decision": receipt.decision,
        "decider": receipt.decider,
        "edited": receipt.edited,
    }
    if receipt.jws:
        meta["jws"] = receipt.jws
    return meta


def gateway_call_deliver(*, call_pk: int) -> bool:
    """Record that a client was given the call's outcome: the same call sent again from now
    on opens a new approval. True for the first delivery."""
    return (
        GatewayCall.objects.filter(pk=call_pk, delivered_at__isnull=True).update(
            delivered_at=timezone.now()
        )
        == 1
    )
