"""The a2a-sdk 0.3 client itself (a2a-sdk==0.3.26, tests/interop/sdk03/client03.py in the
virtualenv .venv-sdk03 that `make install` makes) against a live server of its own: its
default ``ClientFactory.connect(url)`` reads the card (no A2A-Version) and completes a send,
streamed and not; and a push config it registers receives 0.3 Task bodies, which its own
Task type reads."""

import subprocess
import uuid

import pytest

from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.task_models import Task
from tenants.models import Tenant
from tests.a2a_endpoint.receiver import Receiver
from tests.interop.clients03 import PYTHON03, client03
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        live = LiveStack(
            tmp_path_factory.mktemp("sdk03"),
            extra_env={
                "CELERY_QUEUE": f"test-sdk03-{uuid.uuid4().hex[:8]}",
                # The receiver is on loopback.
                "PUSH_ALLOW_PRIVATE_HOSTS": "true",
                "PUSH_RETRY_BASE_SECONDS": "0.1",
            },
        ).start()
    yield live
    live.stop()


def test_the_0_3_client_is_0_3(stack):
    version = subprocess.run(
        [str(PYTHON03), "-c", "import importlib.metadata as m; print(m.version('a2a-sdk'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version.startswith("0.3."), version


@pytest.mark.parametrize("streaming", [True, False], ids=["message/stream", "message/send"])
def test_default_connect_reads_the_card_and_completes_a_send(stack, demo, streaming):
    url = f"{stack.url}{demo['agents']['support']}"
    answer = client03(
        {
            "do": "send",
            "url": url,
            "token": demo["token"],
            "text": "How do I reset my password?",
            "streaming": streaming,
        }
    )
    # The card it read: the 0.3 fields beside the 1.0 ones (a2a_endpoint.dialect03.card_wanted).
    assert answer["card_url"] == url and answer["transport"] == "JSONRPC"
    # A completed direct reply is a Message (streamed: its one frame), no task.
    [event] = answer["events"]
    assert event["kind"] == "message"
    reply = event["message"]
    assert reply["role"] == "agent" and "taskId" not in reply
    assert "Reset password" in reply["parts"][0]["text"]
    assert Task.objects.get().direct


def test_a_push_config_it_registers_receives_0_3_task_bodies(stack, demo):
    tenant = Tenant.objects.get(slug=demo["tenant"])
    push = PushSettings.objects.get_or_create(tenant=tenant)[0]
    push.allowed_hosts = "127.0.0.1"
    push.save()
    receiver = Receiver(secret=push.secret).start()
    try:
        answer = client03(
            {
                "do": "follow",
                "url": f"{stack.url}{demo['agents']['code-reviewer']}",
                "token": demo["token"],
                "text": "Review this diff of payments-api",
                "push_url": receiver.url,
                "push_token": "tok-03",
                "answer": "main",
            }
        )
        task_id = answer["task_id"]
        assert answer["config"]["taskId"] == task_id
        assert PushConfig.objects.get(task__public_id=task_id).dialect == "0.3"
        wait_until(
            lambda: any(b["status"]["state"] == "completed" for b in receiver.events),
            60,
            what="the completed task's push",
        )
        bodies = list(receiver.events)
    finally:
        receiver.stop()
    assert all(b["kind"] == "task" and b["id"] == task_id for b in bodies)
    assert all(r["headers"]["x-a2a-notification-token"] == "tok-03" for r in receiver.requests)
    # The 0.3 SDK's own Task type reads every body.
    parsed = client03({"do": "parse_tasks", "bodies": bodies})
    assert parsed["ids"] == [task_id] * len(bodies)
    assert parsed["states"][-1] == "completed" and "working" in parsed["states"]
