"""Turns' metrics and spans (config.metrics, config.tracing): each claimed turn is counted,
timed and run in a span of its task's trace. Decisions' metrics are
runtime.decisions.decision_metrics'."""

import time
from contextlib import contextmanager
from typing import Any

from config import metrics
from config.tracing import span, task_span
from runtime.kernel.task_models import Task, TaskState


def state_label(state: str) -> str:
    return state.removeprefix("TASK_STATE_").lower()


class TurnOutcome:
    """What ``turn_observed`` is told of the run it watches: the state the run left."""

    state: str = ""


@contextmanager
def turn_observed(task: Task):
    """Count a claimed turn, time it, and run it in a span of the task's trace. The body sets
    the yielded outcome's ``state`` to the state the run left (no query to read it back)."""
    metrics.TURNS_STARTED.inc()
    started = time.monotonic()
    state = "error"
    outcome = TurnOutcome()
    attributes: dict[str, Any] = {
        "countersign.task_id": task.public_id,
        "countersign.tenant": task.tenant.slug,
        "countersign.agent": task.agent.slug,
    }
    try:
        with task_span("turn", task.trace_id, **attributes) as span:
            yield outcome
            state = state_label(outcome.state)
            span.set_attribute("countersign.task_state", state)
    finally:
        metrics.TURNS_FINISHED.labels(state=state).inc()
        if state in {"error", state_label(TaskState.FAILED)}:
            metrics.TURNS_FAILED.inc()
        metrics.TURN_DURATION.labels(state=state).observe(time.monotonic() - started)


def call_span(task: Task, effect):
    """A tool call's span, the turn's child: its server, tool and effect (never its
    arguments); a call that fails ends it with the fault recorded."""
    return span(
        "tool call",
        **{
            "countersign.task_id": task.public_id,
            "countersign.effect_id": effect.public_id,
            "countersign.tool_server": effect.server,
            "countersign.tool": effect.tool,
        },
    )
