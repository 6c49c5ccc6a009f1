"""Tool calls: the effect journal. A call is recorded in the transcript, checked, and journalled
as an effect under the tool policy (allowed, denied, or held for a person) before it is sent;
the journal says "sending" before the call leaves, so a lost outcome is seen as uncertain,
never as "not sent"."""

import functools
import hashlib
import json
import logging

from django.db import connection
from django.utils import timezone

from runtime.agents.llm.actions import CallTool
from runtime.agents.tools import (
    BUILTIN_SERVER,
    REQUEST_CONNECTION,
    REQUEST_CONNECTION_SCHEMA,
    CallContext,
    Policy,
    ToolError,
    ToolOutcomeLost,
    policy_for,
    tool_spec,
    tool_unavailable,
    validate_arguments,
)
from runtime.agents.toolservers import server_for
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.interactions import interaction_open
from runtime.decisions.receipts import tool_trust
from runtime.decisions.rules import rule_for_call, rule_use_record
from runtime.kernel import extensions as ext
from runtime.kernel.rowsql import Columns, Statements, column, row_move
from runtime.kernel.shapes import agent_message
from runtime.kernel.task_models import Task, TaskState, new_key
from runtime.kernel.task_state import task_pause, with_plan
from runtime.turn.approval_check import UNREAD, approval_stale, approval_void
from runtime.turn.claim import lease_kept
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


class _JournalRead(Statements):
    """continue_call's reads, written once: the step's effect, the interaction that holds it
    (an approval's id is its effect's) and the effect's latest receipt (what its sending must
    still match, runtime.turn.approval_check), in one statement.

    As querysets they were three statements, each compiled anew: a third of the worker's CPU
    for a turn resumed by an approval (bench/decisions.py, py-spy).
    """

    def __init__(self) -> None:
        self.effect = Columns(Effect, "e")
        self.interaction = Columns(Interaction, "i")
        self.receipt = Columns(Receipt, "r")
        super().__init__()

    def build(self, connection) -> str:
        q, col = connection.ops.quote_name, functools.partial(column, using=connection.alias)
        e, i, r, latest = q("e"), q("i"), q("r"), q("latest")
        receipts, receipt_pk = q(Receipt._meta.db_table), q(Receipt._meta.pk.column)
        # The latest receipt as receipt_binding orders them (Receipt.Meta.ordering).
        return (
            f"SELECT {self.effect.sql()}, {self.interaction.sql()}, {self.receipt.sql()} "
            f"FROM {q(Effect._meta.db_table)} {e} "
            f"LEFT JOIN {q(Interaction._meta.db_table)} {i} "
            f"ON {i}.{col(Interaction, 'tenant')} = {e}.{col(Effect, 'tenant')} "
            f"AND {i}.{col(Interaction, 'public_id')} = {e}.{col(Effect, 'public_id')} "
            f"LEFT JOIN {receipts} {r} ON {r}.{receipt_pk} = ("
            f"SELECT {latest}.{receipt_pk} FROM {receipts} {latest} "
            f"WHERE {latest}.{col(Receipt, 'tenant')} = {e}.{col(Effect, 'tenant')} "
            f"AND {latest}.{col(Receipt, 'effect_public_id')} = {e}.{col(Effect, 'public_id')} "
            f"ORDER BY {latest}.{col(Receipt, 'created_at')} DESC, {latest}.{receipt_pk} DESC "
            f"LIMIT 1) "
            f"WHERE {e}.{col(Effect, 'task')} = %s AND {e}.{col(Effect, 'step')} = %s"
        )

    def __call__(
        self, *, task: Task, step: int
    ) -> tuple[Effect | None, Interaction | None, Receipt | None]:
        with connection.cursor() as cursor:
            cursor.execute(self.sql(), [task.pk, step])
            row = cursor.fetchone()
        if row is None:
            return None, None, None
        effect = self.effect.build(row)
        effect.task = task
        at = len(self.effect)
        interaction = self.interaction.build(row, at) if row[at] is not None else None
        at += len(self.interaction)
        receipt = self.receipt.build(row, at) if row[at] is not None else None
        return effect, interaction, receipt


_journal_read = _JournalRead()


class ToolCalls:
    """The tool-call steps of TurnRunner (runtime.turn.runner), which mixes them in: they use
    its ``write`` (the task, in the open transaction, its row locked and still this run's),
    ``commit`` (before a call leaves) and ``save``."""

    task_pk: int
    worker_id: str
    task: Task
    _atomic: object | None  # the open transaction, whose statements hold the task's lock

    def write(self) -> Task:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def save(self, task: Task) -> None:
        raise NotImplementedError

    # --- a new call (the caller holds the task lock) ----------------------------------------

    def start_call(self, task: Task, action: CallTool) -> bool:
        """Record the call; check it; then hold, deny or send it (caller holds the lock)."""
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
            return self.request_connection(task, step, action.arguments)
        spec = tool_spec(task.agent, action.server, action.tool)
        error = self.call_error(task, action, spec)
        if error:
            tool_result_record(task, step, ok=False, error=error)
            self.save(task)
            return True
        return self.journal_call(task, step, action, spec)

    def request_connection(self, task: Task, step: int, arguments: dict) -> bool:
        """The built-in request_connection: ask a person to connect an app."""
        error = validate_arguments(REQUEST_CONNECTION_SCHEMA, arguments)
        if error:
            tool_result_record(task, step, ok=False, error=error)
            self.save(task)
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

    @staticmethod
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
        if spec is None or server_for(task.tenant, action.server) is None:
            return f"unknown tool {action.server} / {action.tool}"
        # Arguments are checked before the policy: invalid ones never reach a person.
        return validate_arguments(spec.get("schema"), action.arguments)

    def journal_call(self, task: Task, step: int, action: CallTool, spec: dict) -> bool:
        """Journal the call as an effect under the tool policy: allow, deny or hold."""
        policy = policy_for(task.agent, action.server, action.tool)
        # A standing rule made from an earlier decision allows a matching held call.
        rule = (
            rule_for_call(
                task=task, server=action.server, tool=action.tool, arguments=action.arguments
            )
            if policy.action == "approve"
            else None
        )
        if rule is not None:
            policy = Policy(action="allow")
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
            self.save(task)
            return True
        if policy.action == "approve":
            interaction_open(
                task=task,
                kind=Interaction.Kind.APPROVAL,
                public_id=effect.public_id,  # interactions/v1: for a held call, the effect id
                prompt=f"Approve {action.server} / {action.tool}?",
                detail={
                    "server": action.server,
                    "tool": action.tool,
                    "reason": spec.get("reason", "The tool policy holds this call for a person."),
                },
                request={"step": step},
                state=TaskState.AUTH_REQUIRED,
                deciders=policy.deciders,
                approvers=policy.approvers,
                approvals_required=policy.required,
                risk=tool_trust(task.agent, action.server, action.tool).risk,
                also=TURN_FIELDS,
            )
            return False
        self.save(task)
        return True  # allowed: the next step sends it (continue_call)

    # --- a call in the journal ----------------------------------------------------------------

    def continue_call(self, task: Task, pending: dict) -> bool:
        step = pending["step"]
        call = pending["action"]
        if call["server"] == BUILTIN_SERVER and call["tool"] == REQUEST_CONNECTION:
            return self.continue_connection(task, step)
        # A receipt read under the task's lock (a transaction is open) is the one the send
        # checks: a decision or a void writes receipts under that lock too.
        locked = self._atomic is not None
        effect, interaction, receipt = _journal_read(task=task, step=step)
        if effect is None:
            task = self.write()
            tool_result_record(
                task, step, ok=False, error="the call was lost before it was journalled"
            )
            self.save(task)
            return True
        binding = receipt if locked else UNREAD
        if effect.state == Effect.State.HELD:
            return self.decide_held(effect, interaction, binding)
        if effect.state == Effect.State.APPROVED:
            return self.send(effect, binding=binding)
        if effect.state == Effect.State.SENDING:
            # We find the call sent but not closed: its worker died mid-call. An idempotent
            # tool is simply sent again; otherwise a person must say what happened.
            if effect.idempotent:
                return self.send(effect, resend=True)
            return self.mark_uncertain(effect)
        if effect.state == Effect.State.UNCERTAIN:
            return False  # waiting for an operator's resolution
        task = self.write()
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
        self.save(task)
        return True

    def decide_held(self, effect: Effect, interaction: Interaction | None, binding) -> bool:
        """The held call's decision (``interaction``, read with the effect): send it, deny
        it, or keep waiting; ``binding`` is its receipt, or UNREAD."""
        if interaction is None or interaction.state == Interaction.State.OPEN:
            return False  # still waiting for a person
        task = self.write()
        answer = interaction.answer or {}
        if answer.get("approved") is True:
            # Sent in this same step: approving and "sending" commit together, before it
            # leaves, in one write (send's ``approved_by``).
            self.save(task)
            return self.send(effect, binding=binding, approved_by=interaction.answered_by)
        reason = answer.get("reason") or (
            "expired" if interaction.state == Interaction.State.EXPIRED else "denied"
        )
        Effect.objects.filter(pk=effect.pk, state=Effect.State.HELD).update(
            state=Effect.State.DENIED,
            outcome={"error": "tool.denied", "reason": reason, "by": interaction.answered_by},
            closed_at=timezone.now(),
        )
        tool_result_record(task, effect.step, ok=False, error="tool.denied", reason=reason)
        self.save(task)
        return True

    def send(
        self, effect: Effect, resend: bool = False, *, binding=UNREAD, approved_by: str = ""
    ) -> bool:
        """Send an approved call (``resend``: one found sending, an idempotent tool's) and
        record its outcome. ``approved_by``: the call is still held and this run approves it
        (decide_held), in the same write that marks it sending."""
        # The tool may have gone while the call was held (its server deleted or deactivated,
        # or a refresh no longer finds it): then the call is closed as failed, never sent.
        server = server_for(self.task.tenant, effect.server)
        gone = (
            f"there is no tool server {effect.server} for this tenant"
            if server is None
            else tool_unavailable(self.task.agent, effect.server, effect.tool)
        )
        # The journal says "sending" and is committed before the call leaves, so a crash
        # after this point is seen as an uncertain outcome, never as "not sent".
        task = self.write()
        if not resend:
            # Issue 13: an approval binds its receipt's arguments hash and the policy
            # version; one that no longer matches is void and nothing is sent.
            stale = approval_stale(task=task, effect=effect, receipt=binding)
            if stale is not None:
                if approved_by and not self.approve(effect, approved_by):
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
        self.commit()
        # ``effect`` holds the arguments stored for the decision that let it go (an operator's
        # edit included: approval_stale read them again).
        if arguments_hash(effect.arguments) != effect.arguments_hash:
            outcome, ok = {"error": "the stored arguments do not match their hash; not sent"}, False
        elif gone:
            outcome, ok = {"error": f"{gone}; not sent"}, False
        else:
            try:
                with (
                    lease_kept(task_pk=self.task_pk, worker_id=self.worker_id),
                    call_span(task, effect),
                ):
                    result = server.call(
                        effect.tool,
                        effect.arguments,
                        CallContext(
                            tenant=task.tenant,
                            effect_id=effect.public_id,
                            subject=task.subject,
                            # The policy's own timeout for the tool, else the server's.
                            timeout=policy_for(task.agent, effect.server, effect.tool).timeout,
                        ),
                    )
                outcome, ok = {"result": result}, True
            except ToolOutcomeLost as exc:
                # Sent, and no answer in time: the tool may have acted. Uncertain (effects/v1)
                # for an operator to resolve, as after a crash; an idempotent tool's call is
                # simply failed (the model may make it again).
                if not effect.idempotent:
                    return self.mark_uncertain(effect, why=str(exc))
                outcome, ok = {"error": str(exc)}, False
            except ToolError as exc:
                outcome, ok = {"error": str(exc)}, False
        # The outcome and its tool result go on in the next transaction, with the steps that
        # follow it until the next wait on the network.
        task = self.write()
        shown = None
        if ok:
            # What the model is sent: cut to the agent's limit, the whole kept as a task file.
            shown, outcome = result_capped(task=task, effect=effect, result=outcome["result"])
        row_move(
            Effect,
            effect.pk,
            where={"state": Effect.State.SENDING},
            values={
                "state": Effect.State.SUCCEEDED if ok else Effect.State.FAILED,
                "outcome": outcome,
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
            tool_result_record(task, effect.step, ok=False, error=outcome["error"])
        self.save(task)
        return True

    @staticmethod
    def approve(effect: Effect, approved_by: str) -> bool:
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

    def mark_uncertain(self, effect: Effect, why: str = "") -> bool:
        task = self.write()
        Effect.objects.filter(pk=effect.pk, state=Effect.State.SENDING).update(
            state=Effect.State.UNCERTAIN, **({"outcome": {"error": why}} if why else {})
        )
        # profile v2: the task stays WORKING, with `uncertain` under effects/v1. Its lease
        # is freed: the sweep leaves turns with an uncertain effect alone.
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

    def continue_connection(self, task: Task, step: int) -> bool:
        interaction = (
            Interaction.objects.filter(
                task=task, kind=Interaction.Kind.CONNECTION, request__step=step
            )
            .order_by("-created_at")
            .first()
        )
        if interaction is None or interaction.state == Interaction.State.OPEN:
            return False
        task = self.write()
        app = interaction.detail.get("app", "")
        connected = (interaction.answer or {}).get("connected") is True
        tool_result_record(
            task, step, ok=connected, result=f"Connected: {app}", error=f"Not connected: {app}"
        )
        self.save(task)
        return True
