"""OpenTelemetry tracing: off by default, on when an OTLP endpoint is configured.

``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, or
``OTEL_TRACES_ENABLED=true``, turns it on: spans go to that collector over OTLP/HTTP
(protobuf), batched; the exporter reads the other standard ``OTEL_EXPORTER_OTLP_*`` variables
(headers, timeout) itself, ``OTEL_SERVICE_NAME`` names the service (``countersign``).
``OTEL_TRACES_EXPORTER`` chooses the exporters as the OpenTelemetry SDKs read it: ``otlp``
(the default), ``console`` (each span printed as JSON on stdout, to look at without a
collector), both comma-separated, or ``none``.

One task, one trace: a task's ``trace_id`` (the ``trace=`` of every log line about it) is the
trace id of the span that created it (``current_trace_id``), and each turn in a worker runs
in a span of that trace (``task_span``), as does each decision on it (runtime.decisions.flow).
The Celery message carries the W3C ``traceparent`` of the span that enqueued it (taken when
the turn was enqueued, ``context_for_later``, not when the transaction committed), so a turn
started by a SendMessage is that request's child and a turn resumed by a decision is the
decision's; a span started outside the task's trace (the sweep, an operator's request) is
linked to, not continued.
"""

import logging
import os
import secrets
from collections.abc import Sequence
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

logger = logging.getLogger(__name__)

INSTRUMENTATION = "countersign"
_state: dict = {"provider": None}
_CELERY_TOKEN = "_otel_context_token"


EXPORTERS = ("otlp", "console")


def exporters_by_env(environ=os.environ) -> list[str]:
    """The span exporters OTEL_TRACES_EXPORTER names (otlp, console; none: none), in order."""
    named = [
        name.strip().lower()
        for name in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
        if name.strip()
    ]
    unknown = [name for name in named if name not in (*EXPORTERS, "none")]
    if unknown:
        logger.warning("OTEL_TRACES_EXPORTER: unknown exporter(s) %s ignored", ", ".join(unknown))
    return [name for name in named if name in EXPORTERS]


def tracing_enabled_by_env(environ=os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = exporters_by_env(environ)
    if not exporters:
        return False
    if "console" in exporters:
        return True  # asked for by name: nothing else to configure
    if environ.get("OTEL_TRACES_ENABLED", "").strip().lower() in {"1", "true", "yes", "on"}:
        return True
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def tracing_setup() -> None:
    """Install the exporters once per process when tracing is configured (else nothing)."""
    if _state["provider"] is not None or not tracing_enabled_by_env():
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "countersign")})
    provider = TracerProvider(resource=resource)
    exporters = exporters_by_env()
    for name in exporters:
        # BatchSpanProcessor restarts its thread after a fork (Celery's prefork children).
        provider.add_span_processor(BatchSpanProcessor(span_exporter_new(name)))
    provider_use(provider)
    logger.info("tracing on: %s exporter(s) configured", ", ".join(exporters))


def span_exporter_new(name: str):
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(service_name=os.environ.get("OTEL_SERVICE_NAME"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def provider_use(provider) -> None:
    """Send this process's spans to ``provider`` (None: tracing off). Tests pass an SDK
    provider with an in-memory exporter."""
    _state["provider"] = provider


def provider_current():
    """The provider this process's spans go to (None: tracing off)."""
    return _state["provider"]


def tracer() -> trace.Tracer:
    provider = _state["provider"]
    if provider is None:
        return trace.NoOpTracer()
    return provider.get_tracer(INSTRUMENTATION)


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the current span, if one is being recorded."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return trace.format_trace_id(context.trace_id)


@contextmanager
def request_span(name: str, headers, **attributes):
    """A server span for an incoming request, continuing the caller's ``traceparent``."""
    if _state["provider"] is None:  # tracing off: not even the header is read
        yield trace.INVALID_SPAN
        return
    parent = propagate.extract({k.lower(): v for k, v in headers.items()})
    with tracer().start_as_current_span(
        name, context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as current:
        yield current


def _remote_parent(trace_id: str):
    """A context whose parent is in trace ``trace_id`` (not a span we hold: a remote one)."""
    span_context = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=secrets.randbits(64) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


@contextmanager
def span(name: str, **attributes):
    """An internal span, the current span's child (a notification sent, ...)."""
    if _state["provider"] is None:
        yield trace.INVALID_SPAN
        return
    with tracer().start_as_current_span(name, attributes=attributes) as current:
        yield current


def context_for_later():
    """The current trace context, for work that starts after this span has ended (a turn
    enqueued in a transaction starts once it commits); None when tracing is off."""
    if _state["provider"] is None:
        return None
    return otel_context.get_current()


def carrier_now() -> dict:
    """The current trace context as message headers (``traceparent``), for work another
    process starts; empty when tracing is off."""
    carrier: dict = {}
    if _state["provider"] is not None:
        propagate.inject(carrier)
    return carrier


def context_from_carrier(carrier):
    """The trace context ``carrier_now`` wrote, for context_attached; None when tracing is off
    or the carrier is empty."""
    if _state["provider"] is None or not carrier:
        return None
    return propagate.extract(carrier)


@contextmanager
def context_attached(context):
    """Run with ``context`` (context_for_later's) as the current one; None changes nothing."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def task_span(name: str, trace_id: str, *, kind: SpanKind = SpanKind.CONSUMER, **attributes):
    """A span in the task's trace: the current span's child when it is of that trace (the
    request that enqueued the turn), else a new span of that trace linking to the current one."""
    if _state["provider"] is None:
        yield trace.INVALID_SPAN
        return
    current = trace.get_current_span().get_span_context()
    try:
        wanted = int(trace_id, 16)
    except (TypeError, ValueError):
        wanted = 0
    links: Sequence[trace.Link] = ()
    if not wanted or (current.is_valid and current.trace_id == wanted):
        parent = None
    else:
        parent = _remote_parent(trace_id)
        links = [trace.Link(current)] if current.is_valid else ()
    with tracer().start_as_current_span(
        name, context=parent, links=links, kind=kind, attributes=attributes
    ) as started:
        yield started


# --- Celery: the trace context travels in the message headers -----------------------------


def _before_publish(headers=None, **_kwargs):
    if headers is not None:
        propagate.inject(headers)


def _prerun(task=None, **_kwargs):
    if task is None:
        return
    request = task.request
    carrier = {}
    for key in ("traceparent", "tracestate"):
        value = getattr(request, key, None) or (request.headers or {}).get(key)
        if value:
            carrier[key] = value
    context = context_from_carrier(carrier)
    if context is None:
        return
    setattr(request, _CELERY_TOKEN, otel_context.attach(context))


def _postrun(task=None, **_kwargs):
    token = getattr(task.request, _CELERY_TOKEN, None) if task is not None else None
    if token is not None:
        otel_context.detach(token)
        setattr(task.request, _CELERY_TOKEN, None)


def celery_hooks_connect() -> None:
    from celery.signals import before_task_publish, task_postrun, task_prerun

    before_task_publish.connect(_before_publish, weak=False, dispatch_uid="otel-publish")
    task_prerun.connect(_prerun, weak=False, dispatch_uid="otel-prerun")
    task_postrun.connect(_postrun, weak=False, dispatch_uid="otel-postrun")
