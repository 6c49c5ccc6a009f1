"""The core's metrics and spans (config.metrics, config.tracing): turns, decisions, and the
open interactions read from the database at scrape time."""

import time
from contextlib import contextmanager

from django.db import transaction
from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from config import metrics
from config.tracing import task_span
from runtime.models import Interaction, Task, TaskState


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
    try:
        with task_span(
            "turn",
            task.trace_id,
            **{
                "countersign.task_id": task.public_id,
                "countersign.tenant": task.tenant.slug,
                "countersign.agent": task.agent.slug,
            },
        ) as span:
            yield outcome
            state = state_label(outcome.state)
            span.set_attribute("countersign.task_state", state)
    finally:
        metrics.TURNS_FINISHED.labels(state=state).inc()
        if state in {"error", state_label(TaskState.FAILED)}:
            metrics.TURNS_FAILED.inc()
        metrics.TURN_DURATION.labels(state=state).observe(time.monotonic() - started)


def decision_observe(interaction: Interaction) -> None:
    """How long the interaction waited for its decision (counted once the decision commits)."""
    if interaction.answered_at is None:
        return
    seconds = max(0.0, (interaction.answered_at - interaction.created_at).total_seconds())
    labels = {"kind": interaction.kind, "via": interaction.answered_via or "unknown"}
    transaction.on_commit(lambda: metrics.DECISION_LATENCY.labels(**labels).observe(seconds))


def open_interactions_collect():
    family = GaugeMetricFamily(
        "countersign_interactions_open",
        "Interactions waiting for a decision, by kind (read from the database at scrape).",
        labels=["kind"],
    )
    counts = dict(
        Interaction.objects.filter(state=Interaction.State.OPEN)
        .values("kind")
        .annotate(n=Count("id"))
        .values_list("kind", "n")
    )
    for kind in Interaction.Kind.values:
        family.add_metric([kind], counts.get(kind, 0))
    yield family
