"""Decisions' metrics: how long interactions wait, and how many are open (at scrape)."""

from django.db import transaction
from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from config import metrics
from runtime.decisions.decision_models import Interaction


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
