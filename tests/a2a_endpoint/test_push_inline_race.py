"""A push config sent inside SendMessage must not lose the first turn's
events. On a live stack (uvicorn and a real Celery worker on PostgreSQL), the worker's turn
races the config's creation for the task's row lock; whoever wins, every event of the task
reaches the receiver, exactly once each and in order: the outside probe's 20 non-blocking
and 10 blocking sends with ``configuration.taskPushNotificationConfig`` (A2A 1.0), the same
with ``configuration.pushNotificationConfig`` (0.3 ``message/send``), and the deployer's
sends, whose AUTH_REQUIRED was lost too."""

import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from a2a_endpoint.wire03 import state_out
from runtime.kernel.task_models import TaskEvent, TaskState
from runtime.models import PushDelivery, PushSettings
from tenants.models import Tenant
from tests.a2a_endpoint.receiver import Receiver
from tests.live import LiveStack, wait_until

# The race is PostgreSQL's: a locked read waits for the config's transaction.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_only")]

SUPPORT_TEXT = "How do I reset my password?"
DEPLOY_TEXT = "deploy build 2026.10.06-1 to staging"


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        live = LiveStack(
            tmp_path_factory.mktemp("push-race"),
            extra_env={
                "CELERY_QUEUE": f"test-push-race-{uuid.uuid4().hex[:8]}",
                "PUSH_ALLOW_PRIVATE_HOSTS": "true",  # the receiver is on loopback
                "PUSH_RETRY_BASE_SECONDS": "0.1",
            },
        ).start()
    yield live
    live.stop()


@pytest.fixture
def receiver(stack, demo):
    tenant = Tenant.objects.get(slug=demo["tenant"])
    push = PushSettings.objects.get_or_create(tenant=tenant)[0]
    push.allowed_hosts = "127.0.0.1"
    push.save()
    found = Receiver(secret=push.signing_secrets()[0]).start()
    yield found
    found.stop()
    stack.quiesce()


def send_1_0(client, url: str, token: str, text: str, hook: str, *, blocking: bool) -> str:
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    configuration = {
        "returnImmediately": not blocking,
        "taskPushNotificationConfig": {"url": hook, "token": "tok-10"},
    }
    response = client.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": message, "configuration": configuration},
        },
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
    )
    body = response.json()
    assert "result" in body, body
    return body["result"]["task"]["id"]


def send_0_3(client, url: str, token: str, text: str, hook: str, *, blocking: bool) -> str:
    message = {
        "kind": "message",
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
    }
    configuration = {
        "blocking": blocking,
        "pushNotificationConfig": {"url": hook, "token": "tok-03"},
    }
    response = client.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {"message": message, "configuration": configuration},
        },
        headers={"Authorization": f"Bearer {token}"},
    )
    body = response.json()
    assert "result" in body and body["result"].get("kind") == "task", body
    return body["result"]["id"]


def body_task_and_state(body: dict) -> tuple[str, str]:
    """The task a push body is about, and the state it tells (1.0 StreamResponse or 0.3 Task)."""
    if "statusUpdate" in body:
        return body["statusUpdate"]["taskId"], body["statusUpdate"]["status"]["state"]
    if "artifactUpdate" in body:
        return body["artifactUpdate"]["taskId"], "artifact"
    if "task" in body:
        return body["task"]["id"], body["task"]["status"]["state"]
    return body["id"], ("artifact" if body.get("artifacts") else body["status"]["state"])


@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
def test_every_event_of_a_task_sent_with_its_push_config_is_delivered_once_in_order(
    stack, demo, receiver, dialect
):
    send = send_1_0 if dialect == "1.0" else send_0_3
    support = f"{stack.url}{demo['agents']['support']}"
    deployer = f"{stack.url}{demo['agents']['deployer']}"
    sends = (
        [(support, SUPPORT_TEXT, False)] * 20
        + [(support, SUPPORT_TEXT, True)] * 10
        + [(deployer, DEPLOY_TEXT, False)] * 10
    )
    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(8) as pool:
        task_ids = list(
            pool.map(
                lambda s: send(client, s[0], demo["token"], s[1], receiver.url, blocking=s[2]),
                sends,
            )
        )
    settled = {TaskState.COMPLETED, TaskState.AUTH_REQUIRED}

    def all_settled_and_sent():
        events = TaskEvent.objects.filter(task__public_id__in=task_ids)
        if events.filter(task__state__in=settled).values("task").distinct().count() < len(task_ids):
            return False
        # Every delivery that exists has been made; a lost event has none to wait for.
        return not PushDelivery.objects.filter(
            event__task__public_id__in=task_ids, state=PushDelivery.State.PENDING
        ).exists()

    wait_until(all_settled_and_sent, 120, interval=0.2, what="the tasks and their deliveries")
    received = defaultdict(list)
    for body in receiver.events:
        task_id, state = body_task_and_state(body)
        received[task_id].append(state)
    webhook_ids = [r["headers"]["webhook-id"] for r in receiver.requests if r["status"] == 200]
    assert len(webhook_ids) == len(set(webhook_ids)), "a delivery was made twice"

    missing = {}
    for task_id in task_ids:
        stored = [
            "artifact" if e.kind == TaskEvent.Kind.ARTIFACT else e.state
            for e in TaskEvent.objects.filter(task__public_id=task_id).order_by("seq")
        ]
        # 0.3 bodies are Tasks in 0.3's states (an approval's pause is input-required there).
        expected = stored if dialect == "1.0" else [state_out(s) for s in stored]
        if received[task_id] != expected:
            missing[task_id] = {"stored": expected, "received": received[task_id]}
    assert not missing, f"{len(missing)} of {len(task_ids)} tasks: {missing}"
    finals = {TaskState.COMPLETED: 0, TaskState.AUTH_REQUIRED: 0}
    for task_id in task_ids:
        last = TaskEvent.objects.filter(task__public_id=task_id).order_by("-seq").first()
        finals[last.state] += 1
    assert finals == {TaskState.COMPLETED: 30, TaskState.AUTH_REQUIRED: 10}
