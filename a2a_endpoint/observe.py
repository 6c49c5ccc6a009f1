"""The endpoint's metrics and spans (config.metrics, config.tracing): each JSON-RPC request
counted by method and outcome in a server span, and push deliveries read at scrape time."""

import contextvars
import functools
from dataclasses import dataclass

from django.db.models import Count, Min, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from a2a_endpoint import dialect03
from a2a_endpoint.jsonrpc import STREAMING_METHODS
from a2a_endpoint.methods import HANDLERS
from config import metrics
from config.tracing import request_span
from runtime.kernel.push.push_models import PushDelivery

# The methods of both dialects, each by its own name (message/send is not SendMessage: a
# dashboard tells the 0.3 callers apart).
KNOWN_METHODS = (
    frozenset(HANDLERS)
    | frozenset(STREAMING_METHODS)
    | {"GetExtendedAgentCard"}
    | frozenset(dialect03.HANDLERS)
    | frozenset(dialect03.STREAMING_METHODS)
    | {"agent/getAuthenticatedExtendedCard"}
)


@dataclass
class _Call:
    method: str = "unknown"  # the envelope could not be read
    outcome: str = "ok"


_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("a2a_call", default=None)


def method_label(method) -> str:
    """A caller's method name as a metric label: unknown names share one label."""
    return method if isinstance(method, str) and method in KNOWN_METHODS else "other"


def a2a_method(method) -> None:
    """The view read the envelope: this is the request's method."""
    call = _call.get()
    if call is not None:
        call.method = method_label(method)


def a2a_error(code: int) -> None:
    """The request ends with this JSON-RPC error code."""
    call = _call.get()
    if call is not None:
        call.outcome = str(code)


def a2a_observed(view):
    """Count each request (method, outcome) and run it in a span that continues the caller's
    ``traceparent``; a task it creates takes the span's trace id (config.tracing)."""

    @functools.wraps(view)
    async def observed(request, tenant: str, agent: str, **route):
        call = _Call()
        token = _call.set(call)
        try:
            with request_span(
                "A2A",
                request.headers,
                **{"countersign.tenant": tenant, "countersign.agent": agent},
            ) as span:
                response = await view(request, tenant, agent, **route)
                span.update_name(f"A2A {call.method}")
                span.set_attribute("rpc.method", call.method)
                span.set_attribute("rpc.jsonrpc.error_code", call.outcome)
                span.set_attribute("http.response.status_code", response.status_code)
        finally:
            _call.reset(token)
        # JSON-RPC requests are POSTs; the HTTP+JSON binding's (``route``) use every verb.
        if request.method == "POST" or route:
            metrics.A2A_REQUESTS.labels(method=call.method, outcome=call.outcome).inc()
        return response

    return observed


def push_deliveries_collect():
    by_state = GaugeMetricFamily(
        "countersign_push_deliveries",
        "Push deliveries by state: pending, delivered, gave_up, canceled (database, at scrape).",
        labels=["state"],
    )
    counts = dict(
        PushDelivery.objects.values("state").annotate(n=Count("id")).values_list("state", "n")
    )
    for state in PushDelivery.State.values:
        by_state.add_metric([state], counts.get(state, 0))
    yield by_state
    now = timezone.now()
    backlog = PushDelivery.objects.filter(state=PushDelivery.State.PENDING).aggregate(
        due=Count("id", filter=Q(next_attempt_at__lte=now)), oldest=Min("created_at")
    )
    yield GaugeMetricFamily(
        "countersign_push_backlog",
        "Pending push deliveries due now (not waiting for a retry's backoff).",
        value=backlog["due"],
    )
    oldest = backlog["oldest"]
    yield GaugeMetricFamily(
        "countersign_push_backlog_oldest_seconds",
        "Age of the oldest pending push delivery (0 when none is pending).",
        value=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
    )
