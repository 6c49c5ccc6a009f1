"""Prometheus metrics: the process-local instruments, the scrape-time collectors, ``/metrics``.

Counters and histograms live in the process that observes them: requests and blocking waiters
in the web processes, turns in the Celery workers, decision latency in whichever process
records the decision. The web process serves ``/metrics``; to include what the workers count,
every process (web and worker) gets the same ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
multiprocess mode: each process writes its values to files there, and the scrape adds them
up). Without it, ``/metrics`` shows the serving process only.

Values that are state rather than events (open interactions, push deliveries and their
backlog) are read from the database at scrape time, by collectors the apps register with
``collector_register`` (the lower layer cannot import their models).

``/metrics`` needs ``Authorization: Bearer <METRICS_TOKEN>``: a missing or wrong token is 401
from any address; with no ``METRICS_TOKEN`` set the page does not exist (404).
"""

import hmac
import logging
import os
from collections.abc import Callable, Iterable

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import Metric

logger = logging.getLogger(__name__)

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # prometheus_client opens its files there as the metrics below are made.
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

A2A_REQUESTS = Counter(
    "countersign_a2a_requests",
    "A2A JSON-RPC requests by method and outcome (ok, or the JSON-RPC error code).",
    ["method", "outcome"],
)
A2A_WAITERS = Gauge(
    "countersign_a2a_waiters",
    "Blocking SendMessage calls waiting for their task right now.",
    multiprocess_mode="livesum",
)
TURNS_STARTED = Counter("countersign_turns_started", "Turns a worker claimed and started.")
TURNS_FINISHED = Counter(
    "countersign_turns_finished",
    "Turns that stopped, by the task's state when they stopped "
    "(completed, failed, input_required, auth_required, ...; working: the lease was lost).",
    ["state"],
)
TURNS_FAILED = Counter(
    "countersign_turns_failed",
    "Turns that ended the task as failed or raised an error in the worker.",
)
TURN_DURATION = Histogram(
    "countersign_turn_duration_seconds",
    "Wall time of a turn in a worker, from its claim until it paused, finished or stopped.",
    ["state"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
DECISION_LATENCY = Histogram(
    "countersign_decision_latency_seconds",
    "Time from an interaction opening to its decision, by kind and how it was decided.",
    ["kind", "via"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400),
)
DECISIONS = Counter(
    "countersign_decisions",
    "Decisions people, programs and callers took, by channel (page, rest, bulk, inband, "
    "connection, slack, email) and outcome (approved, denied, answered, connected, declined; "
    "recorded: one approval of several).",
    ["channel", "outcome"],
)
MCP_GATEWAY_CALLS = Counter(
    "countersign_mcp_gateway_calls",
    "Tool calls of MCP clients through a gateway, by outcome: allowed (sent upstream at once), "
    "approved (held, approved, sent), denied, expired, refused (unknown, invalid or denied by "
    "the policy), failed (upstream failed) or waiting (the maximum wait passed; still open).",
    ["gateway", "outcome"],
)
NOTIFICATIONS = Counter(
    "countersign_notifications",
    "Notification attempts by channel kind (email, slack, webhook) and outcome: sent, "
    "failed (tried again later) or gave_up (failed for good).",
    ["kind", "outcome"],
)
CALL_SUMMARIES = Counter(
    "countersign_call_summaries",
    "AI summaries of held calls, by outcome: written, flagged (written; the check found "
    "values the arguments do not hold), failed (the model did not answer; tried again) or "
    "gave_up (failed for good; the item stays as it is).",
    ["outcome"],
)

# name -> a function returning the families it reads (from the database) at scrape time.
_collectors: dict[str, Callable[[], Iterable[Metric]]] = {}


def collector_register(name: str, collect: Callable[[], Iterable[Metric]]) -> None:
    """Add a scrape-time collector (idempotent by name)."""
    _collectors[name] = collect


class _ScrapeTime:
    def __init__(self, collect: Callable[[], Iterable[Metric]]):
        self._collect = collect

    def collect(self):
        try:
            return list(self._collect())
        except Exception:
            # The database is down, say: the process's own metrics are still worth serving.
            logger.warning("a scrape-time metrics collector failed", exc_info=True)
            return []


def multiprocess_dir() -> str:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def metrics_text() -> bytes:
    """The exposition: this process's (or every process's) instruments plus the database's."""
    if multiprocess_dir():
        base = CollectorRegistry()
        multiprocess.MultiProcessCollector(base)
    else:
        base = REGISTRY
    scraped = CollectorRegistry(auto_describe=False)
    for collect in _collectors.values():
        scraped.register(_ScrapeTime(collect))
    return generate_latest(base) + generate_latest(scraped)


def _token_ok(request) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return False
    return hmac.compare_digest(given.strip().encode(), settings.METRICS_TOKEN.encode())


@require_GET
def metrics_view(request):
    if not settings.METRICS_TOKEN:
        return HttpResponse(
            "Not found: set METRICS_TOKEN to serve /metrics.\n",
            status=404,
            content_type="text/plain",
        )
    if not _token_ok(request):
        response = HttpResponse(
            "Send Authorization: Bearer <METRICS_TOKEN>.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # The classic text format (0.0.4): every Prometheus version reads it.
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_PLAIN_0_0_4)


def process_exited(pid: int) -> None:
    """Drop a dead process's live gauges (multiprocess mode); Celery's pool children call it
    as they exit (gunicorn.conf.py does the same for gunicorn's workers)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)


def celery_hooks_connect() -> None:
    from celery.signals import worker_process_shutdown

    def shutdown(**_kwargs):
        process_exited(os.getpid())

    worker_process_shutdown.connect(shutdown, weak=False, dispatch_uid="metrics-process-dead")
