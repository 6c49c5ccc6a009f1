"""An approval gate: an agent with no model that holds the calls its callers describe.

A caller that runs its own tools sends one message whose data part says the call it wants to
make, ``{"tool": "payments/send", "arguments": {...}, "reason": "..."}`` (text alongside is its
note). The gate's turn makes that call under the gate's policy exactly as a hosted agent's
call is made (runtime.turn.calls: the policy's entry and rule, a standing rule, held for
people with its title, redaction, approvers, stages, risk, ladder and expiry), except that
"sending" it runs nothing (runtime.tools.servers.GateServer): the caller runs it. The turn then
ends with the decision's signed receipt as the artifact ``receipt``: COMPLETED when the call
may run (as approved, after any edit), REJECTED when it was denied or expired.

The message is checked as it comes in (gate_call_of, from runtime.turn.intake): a call the
gate cannot take is refused there and nothing is created.
"""

import re
from dataclasses import dataclass

from runtime.agents.agent_models import GATE_DEFAULT_ENTRY, Agent
from runtime.decisions.decision_models import Effect, Receipt
from runtime.decisions.receipts import receipt_binding, receipt_record
from runtime.decisions.signing import jws_claims
from runtime.kernel.errors import InvalidParams
from runtime.kernel.task_models import Task, TaskState
from runtime.llm.actions import CallTool, EmitArtifact
from runtime.policy.rules import policy_entry, policy_rule_for
from runtime.tools.catalog import tool_spec, validate_arguments
from runtime.turn.artifacts import artifact_add
from runtime.turn.batch import Step
from runtime.turn.calls import call_start
from runtime.turn.outcomes import turn_end

# ``server/tool``: a policy entry's key names the server, or the server and the tool.
TOOL_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.\-]{0,99})/([A-Za-z0-9_][A-Za-z0-9_.:/\-]{0,99})$")
REASON_MAX = 1000
RECEIPT = "receipt"
# The receipt artifact's fields (the JWS's claims but the tenant, agent, task, issuer and time
# of signing, which the caller already knows or checks), and the JWS itself.
RECEIPT_FIELDS = (
    "receipt_id",
    "approved",
    "decision",
    "tool",
    "arguments",
    "arguments_sha256",
    "edited",
    "policy",
    "decided_by",
    "channel",
    "decided_at",
    "reason",
)


@dataclass(frozen=True)
class GateCall:
    server: str
    tool: str
    arguments: dict
    reason: str


def gate_call_of(agent: Agent, data: list) -> GateCall:
    """The call a caller's message asks the gate about (its data parts, ``data``), or
    InvalidParams saying what is wrong with it: not one call, a tool not named
    ``server/tool``, arguments not an object or not what the tool's schema says, a tool the
    gate's policy does not name (and no default entry, ``*``)."""
    calls = [d for d in data if isinstance(d, dict) and "tool" in d]
    where = "message.parts[].data"
    if len(calls) != 1:
        raise InvalidParams(
            where,
            "an approval gate takes one data part "
            '{"tool": "server/tool", "arguments": {...}, "reason": "..."} '
            f"(this message has {len(calls)})",
        )
    asked = calls[0]
    tool = asked["tool"]
    match = TOOL_RE.fullmatch(tool) if isinstance(tool, str) else None
    if match is None:
        raise InvalidParams(
            f"{where}.tool", "must name the tool as server/tool, e.g. payments/send"
        )
    arguments = asked.get("arguments", {})
    if not isinstance(arguments, dict):
        raise InvalidParams(f"{where}.arguments", "must be an object")
    reason = asked.get("reason", "")
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise InvalidParams(f"{where}.reason", f"must be text of at most {REASON_MAX} characters")
    arguments = whole_numbers(arguments)
    server, name = match.group(1), match.group(2)
    key, _ = policy_entry(agent, server, name)
    if not key:
        raise InvalidParams(
            f"{where}.tool",
            f"this gate's policy does not name {tool} and has no default entry "
            f"({GATE_DEFAULT_ENTRY!r}); ask the gate's owner to add it",
        )
    spec = tool_spec(agent, server, name) or {}
    problem = validate_arguments(spec.get("schema"), arguments)
    if problem:
        raise InvalidParams(f"{where}.arguments", problem)
    return GateCall(server=server, tool=name, arguments=arguments, reason=reason)


def whole_numbers(value):
    """``value`` with every whole float written as an integer (250.0 as 250). JSON does not
    tell them apart, but the hash of the arguments does: a caller whose SDK carries numbers as
    doubles (protobuf's Struct) and one that sends 250 get the same hash for the same call."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def gate_step(task: Task) -> Step:
    """The gate's next step (the turn loop sends, waits on and records its call): make the
    caller's call, or, once it has its outcome, end the turn with its receipt."""
    calls = [e for e in task.transcript if e["type"] == "action"]
    if not calls:
        try:
            call = gate_call_of(task.agent, task.transcript[0].get("data") or [])
        except InvalidParams as exc:
            # Checked as the message came in; the gate's policy changed since.
            turn_end(task, TaskState.REJECTED, exc.description)
            return False
        reason = call.reason or "The gate's policy holds this call for a person."
        action = CallTool(server=call.server, tool=call.tool, arguments=call.arguments)
        return call_start(task, action, reason=reason)
    return gate_conclude(task, calls[-1]["step"])


def gate_conclude(task: Task, step: int) -> Step:
    """End the gate's turn with the call's receipt: the decision's, or (a call the policy
    allowed or denied outright) one the policy signs now."""
    result = next(e for e in task.transcript if e["type"] == "tool_result" and e["step"] == step)
    effect = Effect.objects.filter(task=task, step=step).first()
    denied = not result["ok"] and result.get("error") == "tool.denied"
    if effect is None or not (result["ok"] or denied):
        turn_end(task, TaskState.FAILED, f"The call could not be decided: {result.get('error')}")
        return False
    effect.task = task  # the locked task (its tenant read with it): not read again
    # A call the policy allowed has no receipt yet (it is written here); any other may.
    receipt = None if effect.approved_by == "policy" else receipt_binding(effect)
    if receipt is None or receipt.decision == Receipt.Decision.VOID:
        receipt = receipt_record(
            effect=effect,
            agent=task.agent,
            decision=Receipt.Decision.ALLOWED if result["ok"] else Receipt.Decision.DENIED,
            decider="policy",
            channel="policy",
            reason="" if result["ok"] else str(result.get("reason") or "denied by the policy"),
            held=policy_rule_for(task.agent, effect.server, effect.tool, effect.arguments),
        )
    claims = jws_claims(receipt.jws)
    data = {field: claims.get(field) for field in RECEIPT_FIELDS}
    data["jws"] = receipt.jws
    artifact_add(
        task,
        EmitArtifact(
            artifact_id=RECEIPT,
            name=RECEIPT,
            parts=({"data": data, "mediaType": "application/json"},),
            description="The decision on the call, signed (verify it against "
            "/.well-known/jwks.json).",
        ),
    )
    tool = f"{effect.server}/{effect.tool}"
    if result["ok"]:
        turn_end(task, TaskState.COMPLETED, f"Approved: {tool} may run ({receipt.decision}).")
    else:
        why = result.get("reason") or receipt.reason or receipt.decision
        turn_end(task, TaskState.REJECTED, f"Not approved: {tool} ({receipt.decision}: {why}).")
    return False
