"""Decisions' metrics: how long interactions wait, and how many are open (at scrape)."""

from django.db import transaction
from django.db.models import Count, Min
from django.utils import timezone
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
    oldest = GaugeMetricFamily(
        "countersign_interactions_open_oldest_seconds",
        "Age of the oldest interaction waiting for a decision, by kind (0 when none waits).",
        labels=["kind"],
    )
    # One statement for both: the count and the oldest of each kind.
    rows = {
        kind: (count, first)
        for kind, count, first in Interaction.objects.filter(state=Interaction.State.OPEN)
        .values("kind")
        .annotate(n=Count("id"), first=Min("created_at"))
        .values_list("kind", "n", "first")
    }
    now = timezone.now()
    for kind in Interaction.Kind.values:
        count, first = rows.get(kind, (0, None))
        family.add_metric([kind], count)
        oldest.add_metric([kind], max(0.0, (now - first).total_seconds()) if first else 0.0)
    yield family
    yield oldest
