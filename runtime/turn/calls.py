"""Tool calls: the effect journal. A call is recorded in the transcript, checked, and journalled
as an effect under the tool policy (allowed, denied, or held for a person) before it is sent;
the journal says "sending" before the call leaves, so a lost outcome is seen as uncertain,
never as "not sent".

The turn's steps of a call (runtime.turn.runner calls them): each runs in the run's locked
block (runtime.turn.batch), holding the task's row lock, and returns a Step. The call itself is
the Outbound that ``_send`` returns: the block that marked it sending commits, the call is
made with no transaction open, and ``_sent`` records its outcome in the next block."""

import hashlib
import json
import logging
from typing import Any

from django.utils import timezone

from runtime.decisions.approval_groups import HeldApproval
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.interaction_state import approval_open, interaction_open
from runtime.decisions.replay import has_shadow_rules, shadow_record
from runtime.decisions.standing_rules import rule_for_call, rule_use_record
from runtime.kernel import extensions as ext
from runtime.kernel.rowsql import row_move
from runtime.kernel.shapes import agent_message
from runtime.kernel.store import call_journal_read
from runtime.kernel.task_models import Task, TaskState, new_key
from runtime.kernel.task_state import row_move_later, task_pause, with_plan
from runtime.llm.actions import CallTool
from runtime.policy.lookup import Policy, policy_for
from runtime.tools.catalog import (
    BUILTIN_SERVER,
    REQUEST_CONNECTION,
    REQUEST_CONNECTION_SCHEMA,
    tool_spec,
    tool_unavailable,
    validate_arguments,
)
from runtime.tools.protocol import CallContext
from runtime.tools.servers import GATE_SERVER, server_for
from runtime.turn.approval_check import UNREAD, approval_stale, approval_void
from runtime.turn.batch import Outbound, Step, turn_save
from runtime.turn.elicitation import call_made, elicitation_ask
from runtime.turn.results import result_capped
from runtime.turn.transcript import (
    TURN_FIELDS,
    action_record,
    approval_reason,
    tool_result_record,
)
from runtime.turn.turn_metrics import call_span

logger = logging.getLogger(__name__)


def arguments_hash(arguments: dict) -> str:
    return hashlib.sha256(
        json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


# --- a new call ------------------------------------------------------------------------------


def call_start(task: Task, action: CallTool, reason: str | None = None) -> Step:
    """Record the model's call; check it; then hold, deny or allow it (the next step sends
    an allowed call: call_continue). ``reason``: what its approval says of it, in place of
    the tool's own (a gate's caller's, runtime.turn.gate)."""
    call = {
        "kind": "call",
        "server": action.server,
        "tool": action.tool,
        "arguments": action.arguments,
    }
    step = action_record(task, call, action.cursor)
    if (
        action.server == BUILTIN_SERVER
        and action.tool == REQUEST_CONNECTION
        and task.agent.connections_enabled
    ):
        return _connection_request(task, step, action.arguments)
    spec = tool_spec(task.agent, action.server, action.tool)
    error = call_error(task, action, spec)
    if error or spec is None:  # with no spec, call_error says the tool is unknown
        tool_result_record(task, step, ok=False, error=error or "unknown tool")
        turn_save(task)
        return True
    return _journal(task, step, action, spec if reason is None else {**spec, "reason": reason})


def _connection_request(task: Task, step: int, arguments: dict) -> Step:
    """The built-in request_connection: ask a person to connect an app."""
    error = validate_arguments(REQUEST_CONNECTION_SCHEMA, arguments)
    if error:
        tool_result_record(task, step, ok=False, error=error)
        turn_save(task)
        return True
    app = str(arguments["app"])[:80]
    reason = str(arguments.get("reason", ""))[:280]
    prompt = f"Connect {app}: {reason}" if reason else f"Connect {app}"
    interaction_open(
        task=task,
        kind=Interaction.Kind.CONNECTION,
        public_id=new_key("con_", 12),
        prompt=prompt,
        detail={"app": app, "reason": reason},
        request={"step": step},
        state=TaskState.AUTH_REQUIRED,
        also=TURN_FIELDS,
    )
    return False


def _server(task: Task, name: str):
    """The tool server a call of ``task`` goes to: a gate's own (runtime.turn.gate), else the
    demo server or the tenant's server of that name."""
    return GATE_SERVER if task.agent.is_gate else server_for(task.tenant, name)


def call_error(task: Task, action: CallTool, spec: dict | None) -> str | None:
    """Why the call cannot be made: an unknown tool, a tool server that no longer offers
    it, or invalid arguments."""
    declared = any(
        s.get("server") == action.server and s.get("tool") in (action.tool, None)
        for s in task.agent.tools or []
    )
    if declared:
        gone = tool_unavailable(task.agent, action.server, action.tool)
        if gone:
            return gone
    if spec is None or _server(task, action.server) is None:
        return f"unknown tool {action.server} / {action.tool}"
    # Arguments are checked before the policy: invalid ones never reach a person.
    return validate_arguments(spec.get("schema"), action.arguments)


def _journal(task: Task, step: int, action: CallTool, spec: dict) -> Step:
    """Journal the call as an effect under the tool policy: allow, deny or hold."""
    effect, policy = call_journal(task, step, action, spec)
    if policy.action == "approve":
        approval_open(task=task, held=held_call_approval(effect, spec, policy), also=TURN_FIELDS)
        return False
    turn_save(task)
    return True  # allowed: the next step sends it (continue_call); denied: the model is told


def call_journal(task: Task, step: int, action: CallTool, spec: dict) -> tuple[Effect, Policy]:
    """Journal the call as an effect under the tool policy (a standing rule may allow a call
    the policy holds): allowed (the next step sends it), denied (its tool.denied result is
    recorded) or held (the caller asks a person: held_call_approval)."""
    policy = policy_for(task.agent, action.server, action.tool, action.arguments)
    # A standing rule made from an earlier decision allows a matching held call.
    rule = (
        rule_for_call(task=task, server=action.server, tool=action.tool, arguments=action.arguments)
        if policy.action == "approve"
        else None
    )
    if rule is not None:
        policy = Policy(action="allow")
    # A shadow rule holds nothing: what it would have done is kept with the call.
    shadow = (
        shadow_record(task.agent, action.server, action.tool, action.arguments)
        if has_shadow_rules(task.agent)
        else None
    )
    effect = Effect.objects.create(
        public_id=new_key("eff_", 12),
        tenant_id=task.tenant_id,
        task=task,
        step=step,
        server=action.server,
        tool=action.tool,
        arguments=action.arguments,
        arguments_hash=arguments_hash(action.arguments),
        idempotent=bool(spec.get("idempotent", False)),
        state=Effect.State.APPROVED
        if policy.action == "allow"
        else Effect.State.DENIED
        if policy.action == "deny"
        else Effect.State.HELD,
        approved_by=f"rule:{rule.public_id}"
        if rule is not None
        else "policy"
        if policy.action == "allow"
        else "",
        shadow=shadow,
    )
    if rule is not None:
        rule_use_record(rule=rule, task=task, effect=effect)
    if policy.action == "deny":
        effect.outcome = {"error": "tool.denied", "reason": "denied by the tool policy"}
        effect.closed_at = timezone.now()
        effect.save(update_fields=["outcome", "closed_at"])
        tool_result_record(
            task, step, ok=False, error="tool.denied", reason="denied by the tool policy"
        )
    return effect, policy


def held_call_approval(effect: Effect, spec: dict, policy: Policy) -> HeldApproval:
    """The approval that asks a person about the held call ``effect``."""
    reason = spec.get("reason", "The tool policy holds this call for a person.")
    return HeldApproval.of_call(effect, policy, reason=reason)


# --- a call in the journal -------------------------------------------------------------------


def call_continue(task: Task, pending: dict) -> Step:
    """The journalled call of the transcript's last step: send it, decide it, record what
    came of it, or wait (for a person, for an operator's resolution)."""
    step = pending["step"]
    call = pending["action"]
    if call["server"] == BUILTIN_SERVER and call["tool"] == REQUEST_CONNECTION:
        return _connection_continue(task, step)
    # Read under the task's lock, as every step is: the receipt read here is the one the send
    # checks (a decision or a void writes receipts under that lock too).
    effect, interaction, receipt = call_journal_read(task=task, step=step)
    if effect is None:
        tool_result_record(task, step, ok=False, error="the call was lost before it was journalled")
        turn_save(task)
        return True
    if effect.state == Effect.State.HELD:
        return _held_decide(task, effect, interaction, receipt)
    if effect.state == Effect.State.APPROVED:
        return _send(task, effect, binding=receipt)
    if effect.state == Effect.State.SENDING:
        # We find the call sent but not closed: its worker died mid-call. An idempotent
        # tool is simply sent again; otherwise a person must say what happened.
        if effect.idempotent:
            return _send(task, effect, resend=True)
        return _uncertain_mark(task, effect)
    if effect.state == Effect.State.UNCERTAIN:
        return False  # waiting for an operator's resolution
    if effect.state == Effect.State.SUCCEEDED:
        # The model sees what the tool returned, as after a normal send, not the
        # journal's envelope (an operator's "happened" stores {result, resolvedBy}).
        result = (effect.outcome or {}).get("result")
        tool_result_record(task, step, ok=True, result=result)
    else:
        outcome = effect.outcome or {}
        tool_result_record(
            task,
            step,
            ok=False,
            error=outcome.get("error", "failed"),
            reason=outcome.get("reason", ""),
        )
    turn_save(task)
    return True


def _held_decide(task: Task, effect: Effect, interaction: Interaction | None, binding) -> Step:
    """The held call's decision (``interaction``, read with the effect): send it, deny it, or
    keep waiting; ``binding`` is its receipt."""
    if interaction is None or interaction.state == Interaction.State.OPEN:
        return False  # still waiting for a person
    answer = interaction.answer or {}
    if answer.get("approved") is True:
        # Sent in this same step: approving and "sending" commit together, before it
        # leaves, in one write (_send's ``approved_by``).
        turn_save(task)
        return _send(task, effect, binding=binding, approved_by=interaction.answered_by)
    reason = answer.get("reason") or (
        "expired" if interaction.state == Interaction.State.EXPIRED else "denied"
    )
    Effect.objects.filter(pk=effect.pk, state=Effect.State.HELD).update(
        state=Effect.State.DENIED,
        outcome={"error": "tool.denied", "reason": reason, "by": interaction.answered_by},
        closed_at=timezone.now(),
    )
    tool_result_record(task, effect.step, ok=False, error="tool.denied", reason=reason)
    turn_save(task)
    return True


def _send(
    task: Task, effect: Effect, resend: bool = False, *, binding=UNREAD, approved_by: str = ""
) -> Step:
    """Mark an approved call sending and hand its call out (``resend``: one found sending, an
    idempotent tool's). ``approved_by``: the call is still held and this run approves it
    (_held_decide), in the same write that marks it sending."""
    # The tool may have gone while the call was held (its server deleted or deactivated, or
    # a refresh no longer finds it): then the call is closed as failed, never sent.
    server = _server(task, effect.server)
    gone = (
        f"there is no tool server {effect.server} for this tenant"
        if server is None
        else tool_unavailable(task.agent, effect.server, effect.tool)
    )
    if not resend:
        # An approval binds its receipt's arguments hash and the policy version;
        # one that no longer matches is void and nothing is sent.
        stale = approval_stale(task=task, effect=effect, receipt=binding)
        if stale is not None:
            if approved_by and not _approve(effect, approved_by):
                return True  # not held any more: look again
            return approval_void(task=task, effect=effect, reason=stale)
    if resend:
        from_state, values = Effect.State.SENDING, {}
    elif approved_by:
        from_state, values = Effect.State.HELD, {"approved_by": approved_by}
    else:
        from_state, values = Effect.State.APPROVED, {}
    moved = row_move(
        Effect,
        effect.pk,
        where={"state": from_state},
        values={"state": Effect.State.SENDING, "sent_at": timezone.now(), **values},
    )
    if moved != 1:
        return True  # not as read any more (decided, sent or closed elsewhere): look again
    if approved_by:
        effect.approved_by = approved_by
    # ``effect`` holds the arguments stored for the decision that let it go (an operator's
    # edit included: approval_stale read them again).
    if arguments_hash(effect.arguments) != effect.arguments_hash:
        return _sent(
            task, effect, ("error", "the stored arguments do not match their hash; not sent")
        )
    if gone:
        return _sent(task, effect, ("error", f"{gone}; not sent"))
    context = CallContext(
        tenant=task.tenant,
        effect_id=effect.public_id,
        subject=task.subject,
        # The policy's own timeout for the tool, else the server's.
        timeout=policy_for(task.agent, effect.server, effect.tool, effect.arguments).timeout,
        # The run's MCP sessions (runtime.turn.runner): one per tool server for the run.
        sessions=getattr(task, "tool_sessions", None),
    )
    if getattr(server, "in_process", False):
        # A gate's call does no I/O (runtime.tools.servers.GateServer): its outcome is
        # recorded in this block, with no commit in between.
        return _sent(task, effect, _call(server, task, effect, context))
    # The journal says "sending" and is committed before the call leaves (this block ends
    # first), so a crash after this point is seen as an uncertain outcome, never as "not sent".
    return Outbound(
        call=lambda: _call(server, task, effect, context),
        then=lambda task, outcome: _sent(task, effect, outcome),
    )


def _call(server, task: Task, effect: Effect, context: CallContext) -> tuple[str, object]:
    """The tool call itself (network I/O, no transaction open), in a span of its own:
    runtime.turn.elicitation's call_made outcomes."""

    def spanned():
        with call_span(task, effect):  # a call that fails ends its span with the fault
            return server.call(effect.tool, effect.arguments, context)

    return call_made(spanned)


def _sent(task: Task, effect: Effect, outcome: tuple[str, Any]) -> Step:
    """Record the call's outcome (and its tool result for the model) in the block after it:
    ``(kind, value)``, the value's type by its kind (runtime.turn.elicitation.call_made)."""
    kind, value = outcome
    if kind == "asks":
        # The server asks a person something, and the call stays open until it has the answer.
        return elicitation_ask(task, effect, value, sent=_sent)
    if kind == "lost":
        # Sent, and no answer in time: the tool may have acted. Uncertain (effects/v1) for an
        # operator to resolve, as after a crash; an idempotent tool's call is simply failed
        # (the model may make it again).
        if not effect.idempotent:
            return _uncertain_mark(task, effect, why=value)
        kind = "error"
    ok = kind == "ok"
    shown = None
    if ok:
        # What the model is sent: cut to the agent's limit, the whole kept as a task file.
        shown, stored = result_capped(task=task, effect=effect, result=value)
    else:
        stored = {"error": value}
    # Written with the block's statement (the task row's): nothing in this block reads the
    # call's journal state again.
    row_move_later(
        task,
        Effect,
        effect.pk,
        where={"state": Effect.State.SENDING},
        values={
            "state": Effect.State.SUCCEEDED if ok else Effect.State.FAILED,
            "outcome": stored,
            "closed_at": timezone.now(),
        },
    )
    if ok:
        # The approver's reason goes to the model with the result (every provider).
        tool_result_record(
            task,
            effect.step,
            ok=True,
            result=shown,
            reason=approval_reason(task, effect.public_id),
        )
    else:
        tool_result_record(task, effect.step, ok=False, error=value)
    turn_save(task)
    return True


def _approve(effect: Effect, approved_by: str) -> bool:
    """Held to approved (the approval is void: approval_void takes it from there)."""
    approved = row_move(
        Effect,
        effect.pk,
        where={"state": Effect.State.HELD},
        values={"state": Effect.State.APPROVED, "approved_by": approved_by},
    )
    if approved == 1:
        effect.state, effect.approved_by = Effect.State.APPROVED, approved_by
    return approved == 1


def _uncertain_mark(task: Task, effect: Effect, why: str = "") -> Step:
    Effect.objects.filter(pk=effect.pk, state=Effect.State.SENDING).update(
        state=Effect.State.UNCERTAIN, **({"outcome": {"error": why}} if why else {})
    )
    # profile v2: the task stays WORKING, with `uncertain` under effects/v1. Its lease is
    # freed: the sweep leaves turns with an uncertain effect alone.
    task_pause(
        task,
        TaskState.WORKING,
        agent_message(
            task,
            f"The outcome of {effect.server} / {effect.tool} was lost; an operator is checking.",
        ),
        status_ext=with_plan(task, {ext.EFFECTS: {"uncertain": effect.public_id}}),
        also=TURN_FIELDS,
    )
    logger.warning("effect %s is uncertain", effect.public_id)
    return False


def _connection_continue(task: Task, step: int) -> Step:
    interaction = (
        Interaction.objects.filter(task=task, kind=Interaction.Kind.CONNECTION, request__step=step)
        .order_by("-created_at")
        .first()
    )
    if interaction is None or interaction.state == Interaction.State.OPEN:
        return False
    app = interaction.detail.get("app", "")
    connected = (interaction.answer or {}).get("connected") is True
    tool_result_record(
        task, step, ok=connected, result=f"Connected: {app}", error=f"Not connected: {app}"
    )
    turn_save(task)
    return True
