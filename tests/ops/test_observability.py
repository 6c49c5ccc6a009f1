"""Spans and metrics of decisions, tool calls and notifications: a
decision is a span of its task's trace and the turn it resumes its child, across a worker
(the Celery message carries the decision's context, taken when the turn was enqueued); each
tool call and notification attempt is a span; notifications are counted by channel kind and
outcome; the oldest open interaction's age is a gauge; OTEL_TRACES_EXPORTER=console prints."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config import metrics, tracing
from runtime.decisions.decision_metrics import open_interactions_collect
from runtime.decisions.decision_models import Interaction
from runtime.kernel import task_state
from runtime.kernel.errors import DecisionMisfit
from tests.core import decide, flow_answer, start
from tests.notifications.conftest import HOLD, channel, receivers

__all__ = ["channel", "receivers"]  # fixtures

pytestmark = pytest.mark.django_db


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


def named(exporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_decision_made_outside_any_span_still_starts_the_resumed_turn_in_its_trace(
    agents, spans, monkeypatch, django_capture_on_commit_callbacks
):
    """The Celery message of the resumed turn carries the decision's span (it has ended by
    the time the transaction commits and the message goes out), and a tool call is the
    resumed turn's child."""
    task = start(agents.a, "deployer", HOLD)
    held = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    published = []
    monkeypatch.setattr(
        task_state, "_turn_message_send", lambda pk: published.append(tracing.context_for_later())
    )
    spans.clear()
    with django_capture_on_commit_callbacks(execute=True):
        decide(held, by=agents.a.operator.subject, approved=True)
    [taken] = named(spans, "decision")
    assert trace_hex(taken) == task.trace_id and not taken.links  # no request span around it
    [context] = published
    carried = trace.get_current_span(context).get_span_context()
    assert (carried.trace_id, carried.span_id) == (taken.context.trace_id, taken.context.span_id)

    # The worker's side: the turn runs under the carried context, as Celery's prerun sets it.
    with tracing.context_attached(context):
        from tests.core import run

        run(task)
    [turn] = named(spans, "turn")
    assert turn.parent.span_id == taken.context.span_id
    [call] = named(spans, "tool call")
    assert call.parent.span_id == turn.context.span_id
    assert call.attributes["countersign.tool"] == "deploy_build"
    assert call.attributes["countersign.tool_server"] == "deploy"
    assert "2026" not in json.dumps(dict(call.attributes))  # never the call's arguments


def test_a_refused_decision_is_a_span_with_the_fault(agents, spans):
    task = start(agents.a, "deployer", HOLD)
    held = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    spans.clear()
    with pytest.raises(DecisionMisfit):  # an approval takes approved, not value
        flow_answer(
            tenant=agents.a.tenant,
            interaction_id=held.public_id,
            answer={"value": "yes"},
            by=agents.a.operator.subject,
            via="page",
        )
    [taken] = named(spans, "decision")
    assert taken.status.status_code == trace.StatusCode.ERROR
    assert taken.attributes["countersign.channel"] == "page"


@pytest.mark.django_db(transaction=True)
def test_notification_attempts_are_counted_by_kind_and_outcome_in_a_span(
    agents, notify, receivers, channel, spans
):
    def count(kind, outcome):
        return metrics.NOTIFICATIONS.labels(kind=kind, outcome=outcome)._value.get()

    keys = [("webhook", "failed"), ("webhook", "sent"), ("slack", "gave_up"), ("email", "sent")]
    before = {key: count(*key) for key in keys}
    hook = receivers(script=[500])
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    gone = receivers(script=[404])
    channel(agents.a.tenant, "gone", "slack", url=gone.url)
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator"])
    task = start(agents.a, "deployer", HOLD)  # its pause fans out as the turn commits
    first = named(spans, "notification send")
    # Queued from the turn's pause: in the task's trace.
    assert len(first) == 3 and {trace_hex(s) for s in first} == {task.trace_id}
    assert sorted(s.attributes["countersign.outcome"] for s in first) == [
        "failed",
        "gave_up",
        "sent",
    ]
    from notifications.tasks import sweep_notifications

    sweep_notifications()  # the webhook's second attempt
    grew = {key: count(*key) - value for key, value in before.items()}
    assert grew == dict.fromkeys(keys, 1)
    assert len(named(spans, "notification send")) == 4


@pytest.fixture
def notify(settings, eager):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.NOTIFY_RETRY_BASE_SECONDS = 0
    settings.PUBLIC_BASE_URL = "https://countersign.example"


def test_the_oldest_open_interaction_is_a_gauge_by_kind(agents):
    def gauge() -> dict:
        families = {f.name: f for f in open_interactions_collect()}
        oldest = families["countersign_interactions_open_oldest_seconds"]
        return {sample.labels["kind"]: sample.value for sample in oldest.samples}

    assert gauge() == {"approval": 0.0, "question": 0.0, "connection": 0.0}
    task = start(agents.a, "deployer", HOLD)
    Interaction.objects.filter(task=task).update(created_at=timezone.now() - timedelta(hours=2))
    start(agents.a, "deployer", HOLD)  # a newer one: the oldest counts
    found = gauge()
    assert 7200 <= found["approval"] < 7200 + 600
    assert found["question"] == found["connection"] == 0.0


def test_the_console_exporter_prints_spans_without_a_collector():
    code = (
        "from config import tracing; tracing.tracing_setup();"
        "span = tracing.span('looked at', **{'countersign.x': 1});"
        "span.__enter__(); span.__exit__(None, None, None);"
        "tracing.provider_current().shutdown()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="countersign-console")
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    printed = json.loads(result.stdout)
    assert printed["name"] == "looked at"
    assert printed["attributes"] == {"countersign.x": 1}
    assert printed["resource"]["attributes"]["service.name"] == "countersign-console"
    assert not tracing.tracing_enabled_by_env({"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.tracing_enabled_by_env({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.tracing_enabled_by_env(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}
    )
