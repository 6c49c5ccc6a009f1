"""OpenTelemetry: one trace per task, from the SendMessage in the web process to the turns in
the worker (spans captured in memory)."""

import pytest
from celery.signals import before_task_publish, task_postrun, task_prerun
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config import tracing
from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import Task
from tests.a2a_client import result_of, rpc, user_message
from tests.core import flow_answer

SUPPORT = "/a2a/acme/support"
REVIEWER = "/a2a/acme/code-reviewer"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.provider_use(provider)
    yield exporter
    tracing.provider_use(None)


def trace_hex(span) -> str:
    return trace.format_trace_id(span.context.trace_id)


def test_tracing_is_off_unless_an_endpoint_is_configured():
    assert not tracing.tracing_enabled_by_env({})
    assert tracing.tracing_enabled_by_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"})
    assert tracing.tracing_enabled_by_env({"OTEL_TRACES_ENABLED": "true"})
    assert not tracing.tracing_enabled_by_env(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318", "OTEL_SDK_DISABLED": "true"}
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_without_tracing_no_span_is_made_and_tasks_still_get_a_trace_id(agents, client):
    tracing.provider_use(None)
    result = result_of(
        rpc(client, SUPPORT, "SendMessage", {"message": user_message("hi")}, token=agents.a.token)
    )
    task = Task.objects.get(public_id=result["task"]["id"])
    assert len(task.trace_id) == 32 and int(task.trace_id, 16)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_send_message_and_its_turn_share_the_tasks_trace(agents, client, spans):
    result = result_of(
        rpc(client, SUPPORT, "SendMessage", {"message": user_message("hi")}, token=agents.a.token)
    )
    task = Task.objects.get(public_id=result["task"]["id"])
    finished = spans.get_finished_spans()
    request = [s for s in finished if s.name == "A2A SendMessage"]
    turns = [s for s in finished if s.name == "turn"]
    assert len(request) == 1 and len(turns) == 1
    assert trace_hex(request[0]) == trace_hex(turns[0]) == task.trace_id
    # The turn ran from the request's enqueue: it is the request's child.
    assert turns[0].parent.span_id == request[0].context.span_id
    assert turns[0].attributes["countersign.task_id"] == task.public_id
    assert turns[0].attributes["countersign.task_state"] == "completed"
    assert request[0].attributes["rpc.method"] == "SendMessage"
    assert request[0].kind == trace.SpanKind.SERVER


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_a_callers_traceparent_is_continued(agents, client, spans):
    traceparent = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
    result = result_of(
        rpc(
            client,
            SUPPORT,
            "SendMessage",
            {"message": user_message("hi")},
            token=agents.a.token,
            headers={"traceparent": traceparent},
        )
    )
    task = Task.objects.get(public_id=result["task"]["id"])
    assert task.trace_id == CALLER_TRACE
    assert {trace_hex(s) for s in spans.get_finished_spans()} == {CALLER_TRACE}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_a_turn_resumed_by_an_operator_stays_in_the_tasks_trace(agents, client, spans):
    result = result_of(
        rpc(
            client,
            REVIEWER,
            "SendMessage",
            {"message": user_message("Review")},
            token=agents.a.token,
        )
    )
    task = Task.objects.get(public_id=result["task"]["id"])
    asked = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    spans.clear()
    with tracing.tracer().start_as_current_span("operator decision") as decision:
        flow_answer(
            tenant=agents.a.tenant,
            interaction_id=asked.public_id,
            answer={"value": "main"},
            by="operator@acme.test",
            via="rest",
        )
    finished = spans.get_finished_spans()
    turns = [s for s in finished if s.name == "turn"]
    [taken] = [s for s in finished if s.name == "decision"]
    assert len(turns) == 1
    # The decision is a span of the task's trace, linked to the request that made it; the
    # turn it resumed is its child (never a trace with no link to the decision).
    assert trace_hex(turns[0]) == trace_hex(taken) == task.trace_id != trace_hex(decision)
    assert [link.context.span_id for link in taken.links] == [decision.context.span_id]
    assert turns[0].parent.span_id == taken.context.span_id
    assert taken.attributes["countersign.interaction_id"] == asked.public_id
    assert taken.attributes["countersign.channel"] == "rest"
    assert taken.attributes["countersign.interaction_state"] == "answered"


class FakeRequest:
    headers = None


class FakeTask:
    request = FakeRequest()


def test_the_trace_context_travels_in_the_celery_message_headers(spans):
    """What the publishing process injects, the worker's task runs under."""
    headers = {}
    with tracing.tracer().start_as_current_span("enqueue") as span:
        before_task_publish.send(sender="runtime.tasks.run_turn", body=None, headers=headers)
    assert headers["traceparent"].split("-")[1] == trace_hex(span)

    task = FakeTask()
    task.request.traceparent = headers["traceparent"]
    assert not trace.get_current_span().get_span_context().is_valid
    task_prerun.send(sender=task, task_id="x", task=task, args=(), kwargs={})
    try:
        current = trace.get_current_span().get_span_context()
        assert current.trace_id == span.context.trace_id
        assert current.span_id == span.context.span_id
    finally:
        task_postrun.send(sender=task, task_id="x", task=task, args=(), kwargs={}, retval=None)
    assert not trace.get_current_span().get_span_context().is_valid


def test_an_otlp_endpoint_turns_tracing_on_and_receives_the_spans(monkeypatch):
    """A local OTLP/HTTP receiver (a real server) gets the spans, service name included."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    received = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()
            self.wfile.write(b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "countersign-test")
    tracing.provider_use(None)
    try:
        tracing.tracing_setup()
        with tracing.tracer().start_as_current_span("exported") as span:
            trace_id = tracing.current_trace_id()
        provider = tracing.provider_current()
        assert provider.force_flush(10_000)
        provider.shutdown()
    finally:
        tracing.provider_use(None)
        server.shutdown()
    assert trace_id == trace_hex(span)
    (path, content_type, body), *_ = received
    assert path == "/v1/traces" and content_type == "application/x-protobuf"
    export = ExportTraceServiceRequest.FromString(body)
    resource = export.resource_spans[0].resource
    attributes = {a.key: a.value.string_value for a in resource.attributes}
    assert attributes["service.name"] == "countersign-test"
    spans_sent = export.resource_spans[0].scope_spans[0].spans
    assert [s.name for s in spans_sent] == ["exported"]
    assert spans_sent[0].trace_id.hex() == trace_id
