"""The turn loop: asks the model for the next action and applies it, one committed step at a
time, until the turn pauses, finishes or loses its lease."""

import logging

from django.db import transaction

from config.logging import log_context
from runtime import extensions as ext
from runtime.llm.actions import (
    AdvancePlan,
    AgentError,
    Ask,
    BadToolCall,
    CallTool,
    EmitArtifact,
    Fail,
    ModelError,
    ModelTurn,
    Reply,
    SetPlan,
    Wait,
)
from runtime.llm.prices import cost_usd
from runtime.llm.registry import model_for
from runtime.models import Interaction, Task, TaskState, new_key
from runtime.observe import turn_observed
from runtime.services.interactions import interaction_open
from runtime.shapes import agent_message
from runtime.task_state import STATUS_FIELDS, task_end, task_status_set, with_plan
from runtime.turn.artifacts import artifact_add
from runtime.turn.calls import ToolCalls
from runtime.turn.claim import LeaseLost, lease_expiry, lease_kept, lease_wait, turn_claim
from runtime.turn.inputs import inputs_fetch, inputs_recorded, inputs_store, inputs_wanted
from runtime.turn.limits import action_error, steps_error, tokens_error
from runtime.turn.transcript import (
    TURN_FIELDS,
    action_record,
    model_turn_record,
    pending_call,
    queued_applied,
    queued_next,
    tool_result_record,
    turn_view,
)

logger = logging.getLogger(__name__)
MAX_STEPS = 200
PLAN_LIMIT = 20


class TurnRunner(ToolCalls):
    def __init__(self, task: Task, worker_id: str):
        self.task_pk = task.pk
        self.worker_id = worker_id
        self.agent = task.agent
        self.model = model_for(self.agent)
        # The claim's own read of the task (tenant and agent joined), just committed: the first
        # step starts from it instead of reading the row again.
        self.claimed: Task | None = task

    # --- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        for _ in range(MAX_STEPS):
            task, self.claimed = self.claimed, None
            if task is None:
                task = Task.objects.select_related("tenant", "agent").get(pk=self.task_pk)
            if task.lease_owner != self.worker_id or task.state != TaskState.WORKING:
                return
            with log_context(
                task_id=task.public_id,
                tenant=task.tenant.slug,
                subject=task.subject,
                trace_id=task.trace_id,
            ):
                if not self.step(task):
                    return
        with transaction.atomic():
            task = self.locked()
            self.finish(task, TaskState.FAILED, "The turn took too many steps and was stopped.")

    def locked(self) -> Task:
        # of=("self",): lock the task row only. Locking the joined tenant row too serialised
        # every turn of a tenant and deadlocked with the foreign-key checks of new tasks
        # (bench/waiters.py, 1000 callers on PostgreSQL).
        task = (
            Task.objects.select_for_update(of=("self",))
            .select_related("tenant", "agent")
            .get(pk=self.task_pk)
        )
        if task.lease_owner != self.worker_id or task.state != TaskState.WORKING:
            raise LeaseLost()
        task.lease_expires_at = lease_expiry()
        return task

    def save(self, task: Task) -> None:
        task.save(update_fields=[*STATUS_FIELDS, *TURN_FIELDS])

    def step(self, task: Task) -> bool:
        """Do one step; return False when the turn paused, finished or was taken away."""
        try:
            if self.fetch_inputs(task):
                return True  # look again at the task as stored, inputs and all
            pending = pending_call(task)
            if pending is not None:
                return self.continue_call(task, pending)
            queued = queued_next(task)
            if queued is not None:
                # The model's last reply held several actions: apply the next one, without
                # asking the model again until each has its result.
                call_id, action = queued
                return self.apply(task, action, queued_id=call_id)
            error = steps_error(task)
            if error:
                return self.stop(task, error)
            view = turn_view(task, connected_apps=self.connected_apps(task))
            # Asking the model is outside any lock: a hosted model's call is network I/O (and
            # may be retried with backoff), so the lease is kept and the database connection
            # given back while it is out.
            try:
                with lease_kept(task_pk=self.task_pk, worker_id=self.worker_id):
                    action = self.model.next_action(view)
            except AgentError as exc:
                return self.agent_failed(exc)
            except ModelError as exc:
                logger.warning("the model call failed: %s", exc)
                return self.stop(task, str(exc), expected=len(view.transcript))
            if isinstance(action, ModelTurn):
                return self.model_turn(task, action)
            return self.apply(task, action)
        except LeaseLost:
            logger.info("turn stopped: lease lost or task no longer working")
            return False

    def stop(self, task: Task, text: str, expected: int | None = None) -> bool:
        """Fail the turn with ``text`` (a limit hit, a model that cannot answer)."""
        with transaction.atomic():
            task = self.locked()
            if expected is not None and len(task.transcript) != expected:
                return True  # something else advanced the turn; look again
            self.finish(task, TaskState.FAILED, text)
        return False

    def model_turn(self, task: Task, turn: ModelTurn) -> bool:
        """Record a model's reply (its queued actions and its usage) in one committed step."""
        expected = len(task.transcript)
        with transaction.atomic():
            task = self.locked()
            if len(task.transcript) != expected:
                return True
            if not turn.actions:
                self.finish(task, TaskState.FAILED, "The model's reply held nothing to do.")
                return False
            model_turn_record(task, turn)
            if turn.usage is not None:
                task.tokens += turn.usage.input_tokens + turn.usage.output_tokens
                task.cost_usd += cost_usd(
                    turn.usage.model, turn.usage.input_tokens, turn.usage.output_tokens
                )
            error = tokens_error(task)
            if error:
                self.finish(task, TaskState.FAILED, error)
                return False
            self.save(task)
        return True

    def fetch_inputs(self, task: Task) -> bool:
        """Fetch the caller's url parts once, before the model's first step; a part that cannot
        be fetched is recorded as failed, with why, for the model to see (files/v1: it fails
        that part, not the turn). Return True when this step stored them. Raises LeaseLost
        when the turn was taken away meanwhile."""
        wanted = inputs_wanted(task)
        if not wanted:
            return False
        # Network I/O, so outside any lock. Each part may take the fetch timeout, so several
        # slow parts could outlast the lease: keep it, or the sweep hands the turn to another
        # worker that fetches everything again, and again.
        with lease_kept(task_pk=self.task_pk, worker_id=self.worker_id):
            fetched = inputs_fetch(wanted)
        with transaction.atomic():
            task = self.locked()
            if inputs_recorded(task):
                return True
            inputs_store(task, fetched)
            self.save(task)
        return True

    @staticmethod
    def connected_apps(task: Task) -> frozenset[str]:
        from connections.selectors import connected_app_slugs

        return frozenset(connected_app_slugs(tenant=task.tenant))

    # --- the model's actions --------------------------------------------------------------

    def apply(self, task: Task, action, queued_id: str | None = None) -> bool:
        """Apply the model's action in one transaction; return False when the turn stopped.
        ``queued_id``: the action is the next queued one of the model's last reply."""
        expected = len(task.transcript)
        if isinstance(action, Wait):
            lease_wait(task_pk=self.task_pk, worker_id=self.worker_id, seconds=action.seconds)
        with transaction.atomic():
            task = self.locked()
            if len(task.transcript) != expected:
                return True  # something else advanced the turn; look again
            error = action_error(task, action)
            if error:
                self.finish(task, TaskState.FAILED, error)
                return False
            if queued_id is not None:
                queued_applied(task, queued_id)
            match action:
                case Reply():
                    return self.reply(task, action)
                case Fail():
                    return self.fail(task, action)
                case Ask():
                    return self.ask(task, action)
                case EmitArtifact():
                    return self.emit_artifact(task, action)
                case SetPlan():
                    return self.set_plan(task, action)
                case AdvancePlan():
                    return self.advance_plan(task, action)
                case Wait():
                    return self.waited(task, action)
                case CallTool():
                    return self.start_call(task, action)
                case BadToolCall():
                    return self.bad_call(task, action)
        raise TypeError(f"unknown action {action!r}")

    def reply(self, task: Task, action: Reply) -> bool:
        action_record(
            task, {"kind": "reply", "text": action.text, "direct": action.direct}, action.cursor
        )
        message = agent_message(task, action.text, with_task=not action.direct)
        if action.direct:
            task.reply_message = message
        self.finish(task, TaskState.COMPLETED, message=message)
        return False

    def fail(self, task: Task, action: Fail) -> bool:
        action_record(
            task,
            {"kind": "reject" if action.reject else "fail", "text": action.text},
            action.cursor,
        )
        self.finish(task, TaskState.REJECTED if action.reject else TaskState.FAILED, action.text)
        return False

    def ask(self, task: Task, action: Ask) -> bool:
        position = action_record(
            task,
            {"kind": "ask", "questionId": action.question_id, "prompt": action.prompt},
            action.cursor,
        )
        detail = {}
        if action.choices:
            detail = {"choices": list(action.choices), "allowCustom": action.allow_custom}
        interaction_open(
            task=task,
            kind=Interaction.Kind.QUESTION,
            public_id=new_key("q_", 12),
            prompt=action.prompt,
            detail=detail,
            request={"questionId": action.question_id, "step": position, **detail},
            state=TaskState.INPUT_REQUIRED,
            also=TURN_FIELDS,
        )
        return False

    def emit_artifact(self, task: Task, action: EmitArtifact) -> bool:
        action_record(task, {"kind": "artifact", "artifactId": action.artifact_id}, action.cursor)
        try:
            artifact_add(task, action)
        except ValueError as exc:
            self.finish(
                task, TaskState.FAILED, f"The agent made an artifact it cannot serve: {exc}"
            )
            return False
        self.save(task)
        return True

    def set_plan(self, task: Task, action: SetPlan) -> bool:
        action_record(task, {"kind": "plan"}, action.cursor)
        task.plan = [
            {
                "label": str(s.get("label", ""))[:200],
                "state": s.get("state", "pending"),
                "note": s.get("note", ""),
            }
            for s in list(action.steps)[:PLAN_LIMIT]
        ]
        self.plan_status_set(task)
        return True

    def advance_plan(self, task: Task, action: AdvancePlan) -> bool:
        action_record(
            task, {"kind": "progress", "step": action.step, "state": action.state}, action.cursor
        )
        if 0 <= action.step < len(task.plan):
            task.plan[action.step] = {
                **task.plan[action.step],
                "state": action.state,
                "note": action.note[:500],
            }
            self.plan_status_set(task)
        else:
            self.save(task)
        return True

    def plan_status_set(self, task: Task) -> None:
        """progress/v1: a changed plan is a status update that carries it."""
        task_status_set(
            task,
            TaskState.WORKING,
            status_ext={ext.PROGRESS: {"steps": task.plan}},
            also=TURN_FIELDS,
        )

    def bad_call(self, task: Task, action: BadToolCall) -> bool:
        """A call that cannot be made: its error goes back to the model; nothing is sent."""
        step = action_record(
            task,
            {"kind": "bad_call", "tool": action.tool[:200], "error": action.error},
            action.cursor,
        )
        tool_result_record(task, step, ok=False, error=action.error)
        self.save(task)
        return True

    def waited(self, task: Task, action: Wait) -> bool:
        action_record(task, {"kind": "wait", "seconds": action.seconds}, action.cursor)
        self.save(task)
        return True

    # --- outcomes -------------------------------------------------------------------------

    def agent_failed(self, exc: AgentError) -> bool:
        """The model gave no usable action: the turn fails with a message for the partner;
        what went wrong is logged and kept on the transcript's entry, for the admin only."""
        with transaction.atomic():
            task = self.locked()
            logger.warning(
                "turn %s failed: the model gave no usable action: %s",
                task.public_id,
                exc.detail or exc,
            )
            action_record(task, {"kind": "fail", "text": str(exc), "error": exc.detail})
            self.finish(task, TaskState.FAILED, str(exc))
        return False

    def finish(self, task: Task, state: str, text: str = "", message: dict | None = None) -> None:
        message = message or agent_message(task, text)
        status_ext = {
            ext.TELEMETRY: {
                "steps": task.steps,
                "tokens": task.tokens,
                "costUsd": float(task.cost_usd),
                "traceId": task.trace_id,
            }
        }
        task_end(task, state, message, status_ext=with_plan(task, status_ext), also=TURN_FIELDS)
        logger.info("turn finished: %s", state)


def turn_run(*, task_pk: int, worker_id: str) -> None:
    """Claim and run (or resume) a turn until it pauses, finishes or loses its lease."""
    task = turn_claim(task_pk=task_pk, worker_id=worker_id)
    if task is None:
        return
    with turn_observed(task):
        TurnRunner(task, worker_id).run()
