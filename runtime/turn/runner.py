"""The turn loop: asks the model for the next action and applies it, step by step, until the
turn pauses, finishes or loses its lease.

Steps are committed in batches: a run writes in one transaction until it must wait on the
network (a hosted model, a tool server, a url part, a scripted wait) or stops, and commits
then. So every step that must be durable before something acts (a call journalled as
"sending" before it leaves) is, and a run of steps that wait on nothing (the claim, a model's
reply and the actions it holds, a scripted agent's steps, the finish) is one transaction:
one lock, one save of the task row, one wake-up for its waiters (runtime.kernel.task_state.TurnBatch).
A crash loses at most the uncommitted steps, which acted on nothing outside and are made
again from the committed transcript.

While it holds its lease the run is the only writer of its task row (answers, decisions and
resolutions wait for a paused task; cancel changes the state; a sweep's or a duplicate
message's claim changes the run id), so it keeps the row in memory from the claim on, and each
transaction starts by locking the row on condition that it is still this run's (``write``).
"""

import logging
from decimal import Decimal

from django.db import transaction

from config.logging import log_context
from runtime.agents.limits import action_error, bad_reply_error, steps_error, tokens_error
from runtime.agents.llm.actions import (
    AdvancePlan,
    AgentError,
    Ask,
    BadReply,
    BadToolCall,
    CallTool,
    EmitArtifact,
    Fail,
    ModelError,
    ModelTurn,
    Reply,
    SetPlan,
    Wait,
    reply_problem,
)
from runtime.agents.llm.prices import cost_usd
from runtime.agents.llm.registry import model_for
from runtime.decisions.decision_models import Interaction
from runtime.decisions.interactions import interaction_open
from runtime.kernel import extensions as ext
from runtime.kernel.shapes import agent_message
from runtime.kernel.store import task_lock_for_run
from runtime.kernel.task_models import Task, TaskState, new_key
from runtime.kernel.task_state import (
    STATUS_FIELDS,
    TurnBatch,
    events_write,
    task_end,
    task_save,
    task_status_set,
    task_write,
    with_plan,
)
from runtime.kernel.wakeups import task_changed
from runtime.turn.artifacts import artifact_add
from runtime.turn.calls import ToolCalls
from runtime.turn.claim import LeaseLost, claim_locked, lease_expiry, lease_kept, lease_wait
from runtime.turn.inputs import inputs_fetch, inputs_recorded, inputs_store, inputs_wanted
from runtime.turn.memory import memory_record, memory_wanted
from runtime.turn.transcript import (
    TURN_FIELDS,
    ConnectedApps,
    action_record,
    model_turn_record,
    pending_call,
    queued_applied,
    queued_next,
    tool_result_record,
    turn_view,
    unusable_record,
)
from runtime.turn.turn_metrics import turn_observed

logger = logging.getLogger(__name__)
MAX_STEPS = 200
COST_PLACES = Decimal("0.000001")  # Task.cost_usd's decimal places
PLAN_LIMIT = 20


class TurnRunner(ToolCalls):
    def __init__(self, task: Task, worker_id: str):
        self.task_pk = task.pk
        self.worker_id = worker_id
        # The claim's read of the task (tenant and agent joined): the run's copy of the row,
        # which it alone changes while it holds the lease (see the module's docstring).
        self.task = task
        self.run_id = task.run_id
        self.agent = task.agent
        self.model = model_for(self.agent)
        # A model that runs in this process (scripted) waits on nothing: its steps go on in
        # the open transaction. Any other is asked with the transaction committed.
        self.in_process = bool(getattr(self.model, "in_process", False))
        self._atomic = None  # the open transaction of the current batch, if any

    # --- transactions -----------------------------------------------------------------------

    @classmethod
    def claimed(cls, *, task_pk: int, worker_id: str) -> "TurnRunner | None":
        """Claim the turn in a transaction that the run's first steps go on in."""
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            batch = TurnBatch()
            task = claim_locked(task_pk=task_pk, worker_id=worker_id, batch=batch)
            if task is None:
                atomic.__exit__(None, None, None)
                return None
            runner = cls(task, worker_id)
        except BaseException as exc:
            atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise
        runner._atomic = atomic
        return runner

    def write(self) -> Task:
        """The task, to change in the open transaction; opening one (and locking the row,
        on condition that it is still this run's) when none is. Raises LeaseLost."""
        if self._atomic is not None:
            return self.task
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            # Only the row's lock and the run's check: the row itself is in memory. The
            # agent's tool policy comes along in the same statement: the run may have waited
            # (a model, a tool, a fetch) while an admin changed it, and every call it journals
            # or sends from here on is judged by the policy in force now.
            tool_policy = task_lock_for_run(
                task_pk=self.task_pk, run_id=self.run_id, worker_id=self.worker_id
            )
        except BaseException as exc:
            atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if tool_policy is None:
            atomic.__exit__(None, None, None)
            raise LeaseLost()
        if tool_policy != self.task.agent.tool_policy:
            self.task.agent.tool_policy = tool_policy
        self._atomic = atomic
        self.task.turn_batch = TurnBatch()
        return self.task

    def commit(self) -> None:
        """Save what the open transaction's steps changed, announce it once, and commit."""
        atomic, self._atomic = self._atomic, None
        if atomic is None:
            return
        task = self.task
        batch: TurnBatch = task.turn_batch
        try:
            try:
                events_write(task, batch.events)
            finally:
                task.turn_batch = None
            if batch.fields:
                fields = set(batch.fields)
                if task.lease_owner == self.worker_id:
                    task.lease_expires_at = lease_expiry()  # every commit renews the lease
                    fields.add("lease_expires_at")
                # The row and its announcement (NOTIFY) in one statement.
                task_write(task, fields, announce=batch.announce)
            elif batch.announce:
                task_changed(task)
        except BaseException as exc:
            atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise
        atomic.__exit__(None, None, None)

    def rollback(self, exc: BaseException) -> None:
        atomic, self._atomic = self._atomic, None
        if atomic is not None:
            self.task.turn_batch = None
            atomic.__exit__(type(exc), exc, exc.__traceback__)

    def save(self, task: Task) -> None:
        task_save(task, [*STATUS_FIELDS, *TURN_FIELDS])

    # --- the loop -------------------------------------------------------------------------

    def run(self) -> str:
        """Run until the turn pauses, finishes or is taken away; return its state as this run
        left it."""
        try:
            self.steps()
            self.commit()
        except BaseException as exc:
            self.rollback(exc)
            raise
        return self.task.state

    def steps(self) -> None:
        for _ in range(MAX_STEPS):
            task = self.task
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
        try:
            task = self.write()
        except LeaseLost:
            return
        self.finish(task, TaskState.FAILED, "The turn took too many steps and was stopped.")

    def step(self, task: Task) -> bool:
        """Do one step; return False when the turn paused, finished or was taken away. What
        it changed is committed by the next wait on the network or by ``commit``."""
        if self._atomic is None:
            self.task = task  # a caller may hand in the row as just read
        try:
            if self.fetch_inputs(task):
                return True  # look again at the task as stored, inputs and all
            if memory_wanted(task, self.model):
                # The context's earlier turns, read once before the model is first asked.
                task = self.write()
                memory_record(task)
                self.save(task)
                return True
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
            view = turn_view(task, connected_apps=ConnectedApps(task.tenant))
            try:
                if self.in_process:
                    action = self.model.next_action(view)
                else:
                    # A hosted model's call is network I/O (and may be retried with backoff):
                    # it is asked with the steps so far committed, outside any lock, with the
                    # lease kept and the database connection given back while it is out.
                    self.commit()
                    with lease_kept(task_pk=self.task_pk, worker_id=self.worker_id):
                        action = self.model.next_action(view)
            except AgentError as exc:
                return self.agent_failed(exc)
            except ModelError as exc:
                logger.warning("the model call failed: %s", exc)
                return self.stop(task, str(exc))
            problem = reply_problem(action)
            if problem is not None and not self.unusable(problem, action):
                return False
            if isinstance(action, ModelTurn):
                return self.model_turn(task, action)
            return self.apply(task, action)
        except LeaseLost:
            logger.info("turn stopped: lease lost or task no longer working")
            return False

    def stop(self, task: Task, text: str) -> bool:
        """Fail the turn with ``text`` (a limit hit, a model that cannot answer)."""
        task = self.write()
        self.finish(task, TaskState.FAILED, text)
        return False

    def unusable(self, problem: str, reply) -> bool:
        """The model's reply could not be used: note it; its error goes back to the model
        (the reply's own steps), unless too many replies in a row could not be used, when
        the turn fails (loop.limits.bad_replies). Return False when it failed."""
        task = self.write()
        streak = unusable_record(task, problem)
        logger.info("the model's reply could not be used (%s in a row): %s", streak, problem)
        error = bad_reply_error(task, streak, problem)
        if error:
            logger.warning("turn stopped: %s", error)
            if isinstance(reply, ModelTurn):
                self.usage_add(task, reply)  # the reply is not recorded, but it was paid for
            # The transcript's last entry says why (Django admin shows the transcript), as
            # for an agent that failed (agent_failed).
            action_record(task, {"kind": "fail", "text": error, "error": problem[:1000]})
            self.finish(task, TaskState.FAILED, error)
            return False
        return True

    def model_turn(self, task: Task, turn: ModelTurn) -> bool:
        """Record a model's reply (its queued actions and its usage); the actions it holds are
        applied by the next steps, in the same transaction until one waits on the network."""
        task = self.write()
        if not turn.actions:
            self.finish(task, TaskState.FAILED, "The model's reply held nothing to do.")
            return False
        model_turn_record(task, turn)
        self.usage_add(task, turn)
        error = tokens_error(task)
        if error:
            self.finish(task, TaskState.FAILED, error)
            return False
        self.save(task)
        return True

    @staticmethod
    def usage_add(task: Task, turn: ModelTurn) -> None:
        if turn.usage is not None:
            task.tokens += turn.usage.input_tokens + turn.usage.output_tokens
            cost = cost_usd(turn.usage.model, turn.usage.input_tokens, turn.usage.output_tokens)
            # As the column keeps it: telemetry made from the row in memory says what a
            # reader of the stored row would.
            task.cost_usd = (task.cost_usd + cost).quantize(COST_PLACES)

    def fetch_inputs(self, task: Task) -> bool:
        """Fetch the caller's url parts once, before the model's first step; a part that cannot
        be fetched is recorded as failed, with why, for the model to see (files/v1: it fails
        that part, not the turn). Return True when this step stored them. Raises LeaseLost
        when the turn was taken away meanwhile."""
        wanted = inputs_wanted(task)
        if not wanted:
            return False
        # Network I/O, so committed first and outside any lock. Each part may take the fetch
        # timeout, so several slow parts could outlast the lease: keep it, or the sweep hands
        # the turn to another worker that fetches everything again, and again.
        self.commit()
        with lease_kept(task_pk=self.task_pk, worker_id=self.worker_id):
            fetched = inputs_fetch(wanted)
        task = self.write()
        if inputs_recorded(task):
            return True
        inputs_store(task, fetched)
        self.save(task)
        return True

    # --- the model's actions --------------------------------------------------------------

    def apply(self, task: Task, action, queued_id: str | None = None) -> bool:
        """Apply the model's action; return False when the turn stopped. ``queued_id``: the
        action is the next queued one of the model's last reply."""
        if isinstance(action, Wait):
            self.commit()
            lease_wait(task_pk=self.task_pk, worker_id=self.worker_id, seconds=action.seconds)
        task = self.write()
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
            case BadReply():
                return self.bad_reply(task, action)
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

    def bad_reply(self, task: Task, action: BadReply) -> bool:
        """A reply that cannot be used at all: the model is told why when it is asked again."""
        action_record(task, {"kind": "bad_reply", "error": action.error[:1000]}, action.cursor)
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
        task = self.write()
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
    runner = TurnRunner.claimed(task_pk=task_pk, worker_id=worker_id)
    if runner is None:
        return
    task = runner.task
    # Every line the turn logs names its task and tenant, a crash's traceback too.
    with (
        log_context(
            task_id=task.public_id,
            tenant=task.tenant.slug,
            subject=task.subject,
            trace_id=task.trace_id,
        ),
        turn_observed(task) as observed,
    ):
        try:
            observed.state = runner.run()
        except Exception:
            logger.exception("the turn crashed")
            raise
