"""The turn loop: asks the model for the next action and applies it, step by step, until the
turn pauses, finishes or loses its lease.

The steps run in the run's locked blocks (runtime.turn.batch): ``turn_run`` below is where the
transactions are, and reads as the run goes. The claim's block runs the first steps; a step
that must wait on the network returns what it waits for (an Outbound), the block commits, the
wait is made with no transaction open (the lease kept, the database connection given back),
and the next block applies its result and goes on. Every method of TurnRunner but ``wait``
runs inside a block, on the locked task it is given.
"""

import logging
from contextlib import ExitStack
from decimal import Decimal

from config.logging import log_context
from runtime.agents.limits import action_error, bad_reply_error, steps_error, tokens_error
from runtime.decisions.decision_models import Interaction
from runtime.decisions.interaction_state import interaction_open
from runtime.kernel import extensions as ext
from runtime.kernel.shapes import agent_message
from runtime.kernel.task_models import Task, TaskState, new_key
from runtime.kernel.task_state import task_status_set
from runtime.llm.actions import (
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
from runtime.llm.prices import cost_usd
from runtime.llm.registry import model_for
from runtime.tools.mcp_sessions import ToolSessions
from runtime.turn.artifacts import artifact_add
from runtime.turn.batch import Outbound, RunBatch, Step, turn_save
from runtime.turn.calls import call_continue
from runtime.turn.claim import LeaseLost, lease_kept, lease_wait
from runtime.turn.gate import gate_step
from runtime.turn.groups import call_or_group_start
from runtime.turn.inputs import inputs_fetch, inputs_recorded, inputs_store, inputs_wanted
from runtime.turn.live_output import LiveReply, live_asked, live_reply
from runtime.turn.memory import memory_record, memory_wanted
from runtime.turn.outcomes import (
    turn_attempts_max,
    turn_attempts_spent,
    turn_crashed,
    turn_end,
    turn_log_fields,
)
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


def turn_run(*, task_pk: int, worker_id: str) -> None:
    """Claim and run (or resume) a turn until it pauses, finishes or loses its lease. A crash
    is logged and handled here (runtime.turn.outcomes.turn_crashed), never raised."""
    batch = RunBatch(task_pk=task_pk, worker_id=worker_id)
    observed = None
    with ExitStack() as run:
        try:
            with batch.claimed() as task:
                if task is None:
                    return
                # Every line the turn logs names its task and tenant, a crash's traceback too.
                run.enter_context(turn_logged(task))
                observed = run.enter_context(turn_observed(task))
                if task.attempts > turn_attempts_max():
                    turn_attempts_spent(task)  # its runs so far all crashed or were lost
                    waiting = None
                else:
                    runner = TurnRunner(batch, task)
                    # One MCP session per tool server for the whole run, closed when the run
                    # stops (runtime.tools.mcp_sessions); its calls find them on the task.
                    task.tool_sessions = run.enter_context(ToolSessions())
                    waiting = runner.steps(task)
            # Each wait on the network, with no transaction open; then the block that applies
            # its result and goes on until the next wait or the turn's end.
            while waiting is not None:
                result = runner.wait(waiting)
                with batch.locked() as task:
                    waiting = runner.steps(task, waiting.then(task, result))
            observed.state = task.state
        except LeaseLost:
            logger.info("turn stopped: lease lost or task no longer working")
            if observed is not None and task is not None:  # observed: the claim read it
                observed.state = task.state
        except Exception as exc:
            if observed is None:  # the claim never read its task
                run.enter_context(log_context(**turn_log_fields(task_pk)))
            else:
                observed.state = "error"
            logger.exception("the turn crashed")
            # Not raised to Celery, whose own line would name neither the task nor the tenant.
            try:
                turn_crashed(task_pk=task_pk, worker_id=worker_id, run_id=batch.run_id, exc=exc)
            except Exception:
                logger.exception("the crash could not be recorded; the sweep retries the turn")


def turn_logged(task: Task):
    """The log context of the turn's lines: its task, tenant, subject and trace."""
    return log_context(
        task_id=task.public_id,
        tenant=task.tenant.slug,
        subject=task.subject,
        trace_id=task.trace_id,
    )


class TurnRunner:
    """One run's steps. Each takes the locked task of the block it runs in and returns a Step:
    True to go on, False when the turn stopped, or the network I/O it needs (Outbound)."""

    def __init__(self, batch: RunBatch, task: Task):
        self.batch = batch
        self.worker_id = batch.worker_id
        self.model = model_for(task.agent)
        # A model that runs in this process (scripted) waits on nothing: it is asked inside
        # the block. Any other is asked with the block committed (an Outbound).
        self.in_process = bool(getattr(self.model, "in_process", False))
        self.steps_taken = 0

    def steps(self, task: Task, first: Step = True) -> Outbound | None:
        """Run steps on the locked ``task`` (``first``: what the block's first one, the result of
        a wait applied, said) until one waits on the network (returned) or the turn stops."""
        outcome = first
        while outcome is True:
            if task.lease_owner != self.worker_id or task.state != TaskState.WORKING:
                return None
            if self.steps_taken >= MAX_STEPS:
                self.finish(task, TaskState.FAILED, "The turn took too many steps and was stopped.")
                return None
            self.steps_taken += 1
            outcome = self.step(task)
        return outcome or None

    def wait(self, waiting: Outbound):
        """Make the network I/O a step asked for (no transaction is open): with the turn's
        lease kept and the database connection given back while it is out."""
        if waiting.keeps_lease:
            return waiting.call()
        with lease_kept(task_pk=self.batch.task_pk, worker_id=self.worker_id):
            return waiting.call()

    def step(self, task: Task) -> Step:
        """Do the turn's next step."""
        wanted = inputs_wanted(task)
        if wanted:
            # The caller's url parts, fetched once before the model's first step (files/v1):
            # network I/O. Each part may take the fetch timeout, so several slow parts could
            # outlast the lease: it is kept, or the sweep would hand the turn to another
            # worker that fetches everything again, and again.
            return Outbound(call=lambda: inputs_fetch(wanted), then=self.inputs_fetched)
        if memory_wanted(task, self.model):
            # The context's earlier turns, read once before the model is first asked.
            memory_record(task)
            turn_save(task)
            return True
        pending = pending_call(task)
        if pending is not None:
            return call_continue(task, pending)
        queued = queued_next(task)
        if queued is not None:
            # The model's last reply held several actions: apply the next one, without
            # asking the model again until each has its result.
            call_id, action = queued
            return self.apply(task, action, queued_id=call_id)
        if task.agent.is_gate:
            return gate_step(task)  # no model: the caller's call, then its receipt
        error = steps_error(task)
        if error:
            return self.stop(task, error)
        view = turn_view(task, connected_apps=ConnectedApps(task.tenant))
        if self.in_process:
            return self.model_replied(task, self.model_asked(view))
        # A hosted model's call is network I/O (and may be retried with backoff): asked with
        # the steps so far committed, outside any lock; streamed when the turn's caller
        # streams (live output).
        live = live_reply(task, self.model)
        return Outbound(call=lambda: self.model_asked(view, live), then=self.model_replied)

    def model_asked(self, view, live: LiveReply | None = None):
        """The model's next action, or the AgentError or ModelError that it raised."""
        try:
            if live is not None:
                return live_asked(self.model, view, live)
            return self.model.next_action(view)
        except (AgentError, ModelError) as exc:
            return exc

    def model_replied(self, task: Task, action) -> Step:
        if isinstance(action, AgentError):
            return self.agent_failed(task, action)
        if isinstance(action, ModelError):
            logger.warning("the model call failed: %s", action)
            return self.stop(task, str(action))
        problem = reply_problem(action)
        if problem is not None and not self.unusable(task, problem, action):
            return False
        if isinstance(action, ModelTurn):
            return self.model_turn(task, action)
        return self.apply(task, action)

    def inputs_fetched(self, task: Task, fetched) -> Step:
        """Store the url parts fetched; a part that could not be fetched is recorded as failed,
        with why, for the model to see (files/v1: it fails that part, not the turn)."""
        if not inputs_recorded(task):
            inputs_store(task, fetched)
            turn_save(task)
        return True

    def stop(self, task: Task, text: str) -> Step:
        """Fail the turn with ``text`` (a limit hit, a model that cannot answer)."""
        self.finish(task, TaskState.FAILED, text)
        return False

    def unusable(self, task: Task, problem: str, reply) -> bool:
        """The model's reply could not be used: note it; its error goes back to the model
        (the reply's own steps), unless too many replies in a row could not be used, when
        the turn fails (loop.limits.bad_replies). Return False when it failed."""
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

    def model_turn(self, task: Task, turn: ModelTurn) -> Step:
        """Record a model's reply (its queued actions and its usage); the actions it holds are
        applied by the next steps, in the same block until one waits on the network."""
        if not turn.actions:
            self.finish(task, TaskState.FAILED, "The model's reply held nothing to do.")
            return False
        model_turn_record(task, turn)
        self.usage_add(task, turn)
        error = tokens_error(task)
        if error:
            self.finish(task, TaskState.FAILED, error)
            return False
        turn_save(task)
        return True

    @staticmethod
    def usage_add(task: Task, turn: ModelTurn) -> None:
        if turn.usage is not None:
            task.tokens += turn.usage.input_tokens + turn.usage.output_tokens
            cost = cost_usd(turn.usage.model, turn.usage.input_tokens, turn.usage.output_tokens)
            # As the column keeps it: telemetry made from the row in memory says what a
            # reader of the stored row would.
            task.cost_usd = (task.cost_usd + cost).quantize(COST_PLACES)

    # --- the model's actions --------------------------------------------------------------

    def apply(self, task: Task, action, queued_id: str | None = None) -> Step:
        """Apply the model's action. ``queued_id``: the action is the next queued one of the
        model's last reply. A wait is made first, with the block committed."""
        if isinstance(action, Wait):
            return Outbound(
                call=lambda: lease_wait(
                    task_pk=self.batch.task_pk, worker_id=self.worker_id, seconds=action.seconds
                ),
                then=lambda task, _: self.applied(task, action, queued_id),
                keeps_lease=True,  # lease_wait renews it, and stops when it is lost
            )
        return self.applied(task, action, queued_id)

    def applied(self, task: Task, action, queued_id: str | None = None) -> Step:
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
                return call_or_group_start(task, action)
            case BadToolCall():
                return self.bad_call(task, action)
            case BadReply():
                return self.bad_reply(task, action)
        raise TypeError(f"unknown action {action!r}")

    def reply(self, task: Task, action: Reply) -> Step:
        action_record(
            task, {"kind": "reply", "text": action.text, "direct": action.direct}, action.cursor
        )
        message = agent_message(task, action.text, with_task=not action.direct)
        if action.direct:
            task.reply_message = message
        self.finish(task, TaskState.COMPLETED, message=message)
        return False

    def fail(self, task: Task, action: Fail) -> Step:
        action_record(
            task,
            {"kind": "reject" if action.reject else "fail", "text": action.text},
            action.cursor,
        )
        self.finish(task, TaskState.REJECTED if action.reject else TaskState.FAILED, action.text)
        return False

    def ask(self, task: Task, action: Ask) -> Step:
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

    def emit_artifact(self, task: Task, action: EmitArtifact) -> Step:
        action_record(task, {"kind": "artifact", "artifactId": action.artifact_id}, action.cursor)
        try:
            artifact_add(task, action)
        except ValueError as exc:
            self.finish(
                task, TaskState.FAILED, f"The agent made an artifact it cannot serve: {exc}"
            )
            return False
        turn_save(task)
        return True

    def set_plan(self, task: Task, action: SetPlan) -> Step:
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

    def advance_plan(self, task: Task, action: AdvancePlan) -> Step:
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
            turn_save(task)
        return True

    def plan_status_set(self, task: Task) -> None:
        """progress/v1: a changed plan is a status update that carries it."""
        task_status_set(
            task,
            TaskState.WORKING,
            status_ext={ext.PROGRESS: {"steps": task.plan}},
            also=TURN_FIELDS,
        )

    def bad_call(self, task: Task, action: BadToolCall) -> Step:
        """A call that cannot be made: its error goes back to the model; nothing is sent."""
        step = action_record(
            task,
            {"kind": "bad_call", "tool": action.tool[:200], "error": action.error},
            action.cursor,
        )
        tool_result_record(task, step, ok=False, error=action.error)
        turn_save(task)
        return True

    def bad_reply(self, task: Task, action: BadReply) -> Step:
        """A reply that cannot be used at all: the model is told why when it is asked again."""
        action_record(task, {"kind": "bad_reply", "error": action.error[:1000]}, action.cursor)
        turn_save(task)
        return True

    def waited(self, task: Task, action: Wait) -> Step:
        action_record(task, {"kind": "wait", "seconds": action.seconds}, action.cursor)
        turn_save(task)
        return True

    # --- outcomes -------------------------------------------------------------------------

    def agent_failed(self, task: Task, exc: AgentError) -> Step:
        """The model gave no usable action: the turn fails with a message for the partner;
        what went wrong is logged and kept on the transcript's entry, for the admin only."""
        logger.warning(
            "turn %s failed: the model gave no usable action: %s",
            task.public_id,
            exc.detail or exc,
        )
        action_record(task, {"kind": "fail", "text": str(exc), "error": exc.detail})
        self.finish(task, TaskState.FAILED, str(exc))
        return False

    def finish(self, task: Task, state: str, text: str = "", message: dict | None = None) -> None:
        turn_end(task, state, text, message)
