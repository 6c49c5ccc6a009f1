"""Notifications' metrics and spans (config.metrics, config.tracing): every attempt counted by
its channel's kind and outcome, and told to the span it runs in (notifications.tasks)."""

from opentelemetry import trace

from config import metrics


def attempt_observed(*, kind: str, sent: bool, given_up: bool) -> None:
    """One attempt of a delivery ended: ``sent``, or failed (``given_up``: for good)."""
    outcome = "sent" if sent else "gave_up" if given_up else "failed"
    metrics.NOTIFICATIONS.labels(kind=kind, outcome=outcome).inc()
    current = trace.get_current_span()
    current.set_attribute("countersign.channel_kind", kind)
    current.set_attribute("countersign.outcome", outcome)
