"""/metrics: Prometheus text behind a bearer token; what the endpoint, the turns, decisions
and the database report; the workers' counters through PROMETHEUS_MULTIPROC_DIR."""

import asyncio
import subprocess
import sys
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from a2a_endpoint import asyncdb
from config import metrics
from runtime.decisions.decision_models import Interaction
from tests.a2a_client import result_of, rpc, user_message
from tests.core import flow_answer
from tests.live import ROOT, LiveStack, wait_until

TOKEN = "metrics-test-token-0123456789"
SUPPORT = "/a2a/acme/support"
REVIEWER = "/a2a/acme/code-reviewer"


def samples(text: str) -> dict:
    """{(sample name, frozenset(labels)): value} of an exposition."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def scrape(client) -> dict:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return samples(response.content.decode())


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x"],
)
def test_metrics_refuses_a_caller_without_the_token_from_any_address(client, token, header):
    headers = {} if header is None else {"Authorization": header}
    for address in ("127.0.0.1", "10.0.0.5", "203.0.113.9"):
        response = client.get("/metrics", headers=headers, REMOTE_ADDR=address)
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"countersign_" not in response.content


@pytest.mark.django_db
def test_metrics_does_not_exist_without_a_token_configured(client, settings):
    settings.METRICS_TOKEN = ""
    response = client.get("/metrics", headers={"Authorization": "Bearer "})
    assert response.status_code == 404


@pytest.mark.django_db
def test_metrics_accepts_get_only(client, token):
    response = client.post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 405


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_0_3_methods_are_counted_by_their_own_names(agents, client, token):
    before = scrape(client)
    v03 = {"A2A-Version": "0.3"}
    message = {"kind": "message", "messageId": "m-03", "role": "user", "parts": []}
    message["parts"].append({"kind": "text", "text": "hi"})
    rpc(client, SUPPORT, "message/send", {"message": message}, token=agents.a.token, headers=v03)
    rpc(client, SUPPORT, "tasks/get", {"id": "t1.nope"}, token=agents.a.token, headers=v03)
    rpc(client, SUPPORT, "tasks/nope", {}, token=agents.a.token, headers=v03)
    after = scrape(client)

    def grew(**labels):
        name = "countersign_a2a_requests_total"
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew(method="message/send", outcome="ok") == 1
    assert grew(method="tasks/get", outcome="-32001") == 1
    assert grew(method="other", outcome="-32601") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_a_send_message_is_counted_with_its_turn(agents, client, token):
    before = scrape(client)
    response = rpc(
        client, SUPPORT, "SendMessage", {"message": user_message("hi")}, token=agents.a.token
    )
    assert result_of(response)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    rpc(client, SUPPORT, "NoSuchMethod", {}, token=agents.a.token)
    rpc(client, SUPPORT, "GetTask", {"id": "t1.nope"}, token=agents.a.token)
    after = scrape(client)

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "countersign_a2a_requests_total"
    assert grew(requests, method="SendMessage", outcome="ok") == 1
    assert grew(requests, method="other", outcome="-32601") == 1
    assert grew(requests, method="GetTask", outcome="-32001") == 1
    assert grew("countersign_turns_started_total") == 1
    assert grew("countersign_turns_finished_total", state="completed") == 1
    assert grew("countersign_turns_failed_total") == 0
    assert grew("countersign_turn_duration_seconds_count", state="completed") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_open_interactions_and_decision_latency(agents, client, token):
    before = scrape(client)
    assert value(before, "countersign_interactions_open", kind="question") == 0
    rpc(client, REVIEWER, "SendMessage", {"message": user_message("Review")}, token=agents.a.token)
    open_now = scrape(client)
    assert value(open_now, "countersign_interactions_open", kind="question") == 1
    assert value(open_now, "countersign_interactions_open", kind="approval") == 0

    asked = Interaction.objects.get(tenant=agents.a.tenant, state=Interaction.State.OPEN)
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=asked.public_id,
        answer={"value": "main"},
        by="operator@acme.test",
        via="rest",
    )
    after = scrape(client)
    assert value(after, "countersign_interactions_open", kind="question") == 0
    count = "countersign_decision_latency_seconds_count"
    assert (
        value(after, count, kind="question", via="rest")
        - value(before, count, kind="question", via="rest")
        == 1
    )


@pytest.mark.django_db
def test_push_deliveries_and_backlog_are_read_from_the_database(client, token):
    found = scrape(client)
    for state in ("pending", "delivered", "gave_up", "canceled"):
        assert ("countersign_push_deliveries", frozenset({("state", state)})) in found
    assert value(found, "countersign_push_backlog") == 0
    assert value(found, "countersign_push_backlog_oldest_seconds") == 0


def test_blocking_waiters_are_a_gauge_for_the_wait(monkeypatch):
    seen = []

    async def wait_for_state(*_args):
        seen.append(metrics.A2A_WAITERS._value.get())

    monkeypatch.setattr(asyncdb, "wait_for_state", wait_for_state)
    monkeypatch.setattr(asyncdb, "db", lambda fn, *a, **k: asyncio.sleep(0))
    before = metrics.A2A_WAITERS._value.get()

    class Row:
        pk = 1

    async def waits():
        await asyncdb.wait_for_settled(Row())

    asyncio.run(waits())
    assert seen == [before + 1]
    assert metrics.A2A_WAITERS._value.get() == before


WORKER = """
from config import metrics
metrics.TURNS_STARTED.inc()
metrics.TURNS_FINISHED.labels(state="completed").inc()
"""


@pytest.mark.django_db
def test_another_process_counts_appear_in_multiprocess_mode(client, token, tmp_path, monkeypatch):
    """What a worker counts (another process) is served by the web process when both share
    PROMETHEUS_MULTIPROC_DIR."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", WORKER], cwd=ROOT, env=env, check=True)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    found = scrape(client)
    assert value(found, "countersign_turns_started_total") == 2
    assert value(found, "countersign_turns_finished_total", state="completed") == 2
    # The database-derived families are served as well.
    assert ("countersign_push_backlog", frozenset()) in found


@pytest.mark.django_db(transaction=True)
def test_live_web_serves_the_worker_turn_counters(agents, tmp_path, settings):
    """uvicorn and a Celery worker sharing PROMETHEUS_MULTIPROC_DIR: after a SendMessage the
    web's /metrics shows the request and the turn the worker ran."""
    queue = f"test-metrics-{uuid.uuid4().hex[:8]}"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    shared = tmp_path / "metrics"
    shared.mkdir()
    stack = LiveStack(
        tmp_path,
        extra_env={
            "CELERY_QUEUE": queue,
            "PROMETHEUS_MULTIPROC_DIR": str(shared),
            "METRICS_TOKEN": TOKEN,
        },
    ).start()
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        response = httpx.post(
            f"{stack.url}{SUPPORT}",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": user_message("hi")},
            },
            headers={"Authorization": f"Bearer {agents.a.token}", "A2A-Version": "1.0"},
            timeout=30,
        )
        assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert httpx.get(f"{stack.url}/metrics", timeout=10).status_code == 401

        def scraped():
            found = samples(httpx.get(f"{stack.url}/metrics", headers=auth, timeout=10).text)
            done = value(found, "countersign_turns_finished_total", state="completed")
            return found if done >= 1 else None

        found = wait_until(scraped, 20, interval=0.2, what="the worker's turn counters")
        assert (
            value(found, "countersign_a2a_requests_total", method="SendMessage", outcome="ok") == 1
        )
        assert value(found, "countersign_turns_started_total") == 1
        assert value(found, "countersign_turn_duration_seconds_count", state="completed") == 1
    finally:
        stack.stop()


@pytest.mark.django_db
def test_a_failing_database_collector_leaves_the_rest_of_the_scrape(client, token, monkeypatch):
    def broken():
        raise RuntimeError("database unavailable")
        yield  # pragma: no cover - a generator, as the real collectors are

    monkeypatch.setitem(metrics._collectors, "broken", broken)
    found = scrape(client)
    assert ("countersign_push_backlog", frozenset()) in found
    assert any(name == "countersign_turns_started_total" for name, _ in found)
