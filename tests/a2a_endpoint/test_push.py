import socket
import threading
import time

import pytest
from django.test import Client

from connections.outbound import OutboundRefused, fetch_url
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.push import push_configs, push_delivery
from runtime.kernel.push.push_models import PushAttempt, PushConfig, PushDelivery, PushSettings
from runtime.kernel.task_models import Task, TaskEvent
from runtime.turn.runner import turn_run
from tests.a2a_endpoint.receiver import Receiver
from tests.core import decide

SUPPORT = {
    "provider": "scripted",
    "script": [{"steps": [{"reply": "All good."}]}],
}
REVIEWER = {
    "provider": "scripted",
    "script": [
        {
            "steps": [
                {"ask": {"id": "base", "prompt": "Which base branch?"}},
                {"artifact": {"name": "review.json", "data": {"base": "{{ answers.base }}"}}},
                {"reply": "Reviewed against {{ answers.base }}."},
            ]
        }
    ],
}
DEPLOYER = {
    "provider": "scripted",
    "script": [
        {
            "steps": [
                {
                    "plan": [
                        {"label": "Get approval", "state": "active"},
                        {"label": "Deploy", "state": "pending"},
                    ]
                },
                {
                    "call": {
                        "server": "deploy",
                        "tool": "deploy_build",
                        "args": {"build": "b1", "environment": "staging"},
                    }
                },
                {"progress": {"step": 0, "state": "completed", "note": "approved"}},
                {"reply": "Deployed."},
            ]
        }
    ],
}
DEPLOY_TOOL = [
    {
        "server": "deploy",
        "tool": "deploy_build",
        "description": "Deploy.",
        "schema": {"type": "object"},
    }
]


@pytest.fixture
def push_world(world, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.PUSH_RETRY_BASE_SECONDS = 0.01
    settings.A2A_WAIT_MS = 100
    for side in (world.a, world.b):
        PushSettings.objects.create(tenant=side.tenant, allowed_hosts="127.0.0.1\n*.test")
        for slug, model, extra in (
            ("support", SUPPORT, {}),
            ("reviewer", REVIEWER, {}),
            (
                "deployer",
                DEPLOYER,
                {"tools": DEPLOY_TOOL, "tool_policy": {"deploy/deploy_build": "approve"}},
            ),
        ):
            Agent.objects.create(
                tenant=side.tenant, slug=slug, name=slug, description=slug, model=model, **extra
            )
    return world


@pytest.fixture
def receiver(push_world):
    secret = PushSettings.objects.get(tenant=push_world.a.tenant).secret
    found = Receiver(secret=secret).start()
    yield found
    found.stop()


def rpc(side, agent: str, method: str, params: dict, extensions: str = ""):
    headers = {"Authorization": f"Bearer {side.token}", "A2A-Version": "1.0"}
    if extensions:
        headers["A2A-Extensions"] = extensions
    response = Client().post(
        f"/a2a/{side.tenant.slug}/{agent}",
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 200, response.content
    return response


def send(side, agent: str, text: str, *, push_url: str = "", task_id: str = "", ext_header=""):
    message = {
        "role": "ROLE_USER",
        "messageId": f"m-{time.monotonic_ns()}",
        "parts": [{"text": text}],
    }
    if task_id:
        task = Task.objects.get(public_id=task_id)
        message.update(taskId=task_id, contextId=task.wire_context_id)
    configuration = {"returnImmediately": True}
    if push_url:
        configuration["taskPushNotificationConfig"] = {
            "id": "hook",
            "url": push_url,
            "token": "tok-1",
            "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
        }
    body = rpc(
        side, agent, "SendMessage", {"message": message, "configuration": configuration}, ext_header
    ).json()
    assert "result" in body, body
    return body["result"]["task"]["id"]


def run(task_id: str) -> None:
    turn_run(task_pk=Task.objects.get(public_id=task_id).pk, worker_id="test-worker")


def drain(deadline: float = 20) -> None:
    """Deliver every due delivery, as the Celery tasks would, until none is pending."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        pending = PushDelivery.objects.filter(state=PushDelivery.State.PENDING)
        if not pending.exists():
            return
        for pk in set(pending.values_list("config_id", flat=True)):
            push_delivery.push_deliver(config_pk=pk, worker_id="test-push")
    raise TimeoutError("deliveries still pending")


def stored_events(task_id: str, activated=frozenset()) -> list[dict]:
    from a2a_endpoint.wire import event_wire

    return [
        event_wire(e.payload, activated)
        for e in TaskEvent.objects.filter(task__public_id=task_id).order_by("seq")
    ]


# --- configs ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_push_config_crud_accepts_snake_case_and_delete_is_idempotent(push_world, receiver):
    a = push_world.a
    task_id = send(a, "support", "hi")
    created = rpc(
        a,
        "support",
        "CreateTaskPushNotificationConfig",
        {
            "task_id": task_id,
            "id": "c1",
            "url": receiver.url,
            "authentication": {"scheme": "Bearer", "credentials": "x"},
        },
    ).json()["result"]
    assert created == {
        "id": "c1",
        "taskId": task_id,
        "url": receiver.url,
        "authentication": {"scheme": "Bearer"},
    }
    got = rpc(a, "support", "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"}).json()
    assert got["result"]["id"] == "c1"
    listed = rpc(a, "support", "ListTaskPushNotificationConfigs", {"task_id": task_id}).json()
    assert listed["result"] == {"configs": [created], "nextPageToken": ""}
    for _ in range(2):
        deleted = rpc(
            a, "support", "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"}
        )
        assert deleted.json()["result"] == {}
    missing = rpc(a, "support", "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"})
    assert missing.json()["error"]["code"] == -32001


@pytest.mark.django_db(transaction=True)
def test_another_subject_or_tenant_sees_no_configs(push_world, receiver):
    from tenants.tokens import api_token_create

    a, b = push_world.a, push_world.b
    task_id = send(a, "support", "hi", push_url=receiver.url)
    _, other_token = api_token_create(tenant=a.tenant, subject="partner:other", name="other")
    other = type(a)(**{**a.__dict__, "token": other_token})
    for side in (other, b):
        for method in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
            body = rpc(side, "support", method, {"taskId": task_id, "id": "hook"}).json()
            assert body["error"]["code"] == -32001
        body = rpc(side, "support", "ListTaskPushNotificationConfigs", {"taskId": task_id}).json()
        assert body["error"]["code"] == -32001
        body = rpc(
            side,
            "support",
            "CreateTaskPushNotificationConfig",
            {"taskId": task_id, "url": receiver.url},
        ).json()
        assert body["error"]["code"] == -32001
    assert PushConfig.objects.filter(task__public_id=task_id).count() == 1


@pytest.mark.django_db
def test_card_says_push_notifications(push_world):
    a = push_world.a
    card = (
        Client()
        .get(
            f"/a2a/{a.tenant.slug}/support/.well-known/agent-card.json",
            headers={"Authorization": f"Bearer {a.token}"},
        )
        .json()
    )
    assert card["capabilities"]["pushNotifications"] is True


@pytest.mark.django_db(transaction=True)
def test_a_url_the_tenant_does_not_allow_is_refused_at_create(push_world):
    a = push_world.a
    task_id = send(a, "support", "hi")
    body = rpc(
        a,
        "support",
        "CreateTaskPushNotificationConfig",
        {"taskId": task_id, "url": "https://evil.example/x"},
    ).json()
    assert body["error"]["code"] == -32602
    assert "not one this tenant allows" in body["error"]["message"]


# --- delivery -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_receiver_gets_every_event_of_flows_1_to_3_in_order_signed(push_world, receiver):
    a = push_world.a
    # Flow 1: answered at once.
    t1 = send(a, "support", "hello", push_url=receiver.url)
    run(t1)
    # Flow 2: a question, answered on the same task.
    t2 = send(a, "reviewer", "review this", push_url=receiver.url)
    run(t2)
    send(a, "reviewer", "main", task_id=t2)
    run(t2)
    # Flow 3: a held call, approved by an operator.
    t3 = send(a, "deployer", "deploy", push_url=receiver.url)
    run(t3)
    decide(Interaction.objects.get(task__public_id=t3), by=a.operator.subject, approved=True)
    run(t3)
    drain()

    assert receiver.bad_signatures == 0
    for task_id, final in ((t1, "COMPLETED"), (t2, "COMPLETED"), (t3, "COMPLETED")):
        got = [
            e
            for e in receiver.events
            if (e.get("statusUpdate") or e.get("artifactUpdate"))["taskId"] == task_id
        ]
        assert got == stored_events(task_id)
        assert got[-1]["statusUpdate"]["status"]["state"] == f"TASK_STATE_{final}"
    states = [
        e["statusUpdate"]["status"]["state"]
        for e in receiver.events
        if "statusUpdate" in e and e["statusUpdate"]["taskId"] == t2
    ]
    assert "TASK_STATE_INPUT_REQUIRED" in states
    for request in receiver.requests:
        assert request["headers"]["content-type"] == "application/a2a+json"
        assert request["headers"]["authorization"] == "Bearer s3cret"
        assert request["headers"]["x-a2a-notification-token"] == "tok-1"
    assert PushAttempt.objects.count() == len(receiver.requests)
    # Operators see the deliveries and their attempts on the task page.
    page = a.client_for(a.operator).get(f"/tasks/{t3}/").content.decode()
    assert "Push deliveries" in page and receiver.url in page and "HTTP 200" in page


@pytest.mark.django_db(transaction=True)
def test_receiver_down_then_up_gets_everything(push_world):
    secret = PushSettings.objects.get(tenant=push_world.a.tenant).secret
    down = Receiver(secret=secret)
    url = down.url
    down.server.server_close()  # nothing listens on the port now
    task_id = send(push_world.a, "support", "hello", push_url=url)
    run(task_id)
    config = PushConfig.objects.get()
    push_delivery.push_deliver(config_pk=config.pk, worker_id="w")
    first = PushDelivery.objects.order_by("seq").first()
    assert first.state == PushDelivery.State.PENDING and first.attempts >= 1
    assert "network error" in first.last_error
    # Nothing after the failed event was sent before it: order holds.
    assert PushDelivery.objects.filter(attempts__gt=0).count() == 1

    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0])
    up = Receiver(secret=secret)
    up.server.server_close()
    up.server = type(up.server)((host, port), up._handler())
    up.thread = threading.Thread(target=up.server.serve_forever, daemon=True)
    up.start()
    try:
        drain()
        assert up.events == stored_events(task_id)
    finally:
        up.stop()


@pytest.mark.django_db(transaction=True)
def test_500_and_429_are_retried_then_delivered(push_world, receiver):
    receiver.script = [500, 429, 503]
    task_id = send(push_world.a, "support", "hello", push_url=receiver.url)
    run(task_id)
    drain()
    assert receiver.events == stored_events(task_id)
    first = PushDelivery.objects.order_by("seq").first()
    assert first.state == PushDelivery.State.DELIVERED
    assert list(first.tries.values_list("status_code", flat=True)) == [500, 429, 503, 200]


@pytest.mark.django_db(transaction=True)
def test_410_disables_the_config(push_world, receiver):
    receiver.script = [410]
    task_id = send(push_world.a, "support", "hello", push_url=receiver.url)
    run(task_id)
    drain()
    config = PushConfig.objects.get()
    assert config.disabled_at is not None
    assert len(receiver.requests) == 1 and receiver.events == []
    assert not PushDelivery.objects.filter(state=PushDelivery.State.PENDING).exists()
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {
        PushDelivery.State.CANCELED
    }


@pytest.mark.django_db(transaction=True)
def test_an_admin_enables_a_disabled_config_again_and_cannot_edit_its_state(push_world, receiver):
    a = push_world.a
    receiver.script = [410]
    task_id = send(a, "reviewer", "review this", push_url=receiver.url)
    run(task_id)  # the reviewer asks a question: the task waits, its config disabled by the 410
    drain()
    config = PushConfig.objects.get()
    assert config.disabled_at is not None
    a.admin.is_staff = a.admin.is_superuser = True
    a.admin.save(update_fields=["is_staff", "is_superuser"])
    staff = a.client_for(a.admin)

    # The change form shows the state but has no field for it: a save from the form would
    # enable the config without the task's lock (push_config_enable sets its from_seq under it).
    form = staff.get(f"/admin/runtime/pushconfig/{config.pk}/change/").content.decode()
    assert "the receiver answered 410 Gone" in form
    assert 'name="disabled_at' not in form and 'name="disabled_reason"' not in form

    response = staff.post(
        "/admin/runtime/pushconfig/",
        {"action": "enable", "_selected_action": [config.pk]},
        follow=True,
    )
    assert "Enabled 1 push config(s)." in response.content.decode()
    config.refresh_from_db()
    assert (config.disabled_at, config.disabled_reason) == (None, "")

    # The next event of the task (the answer) is delivered to it.
    receiver.script = []
    send(a, "reviewer", "main", task_id=task_id)
    run(task_id)
    drain()
    assert receiver.events, receiver.requests


@pytest.mark.django_db(transaction=True)
def test_a_slow_receiver_does_not_delay_another(push_world, receiver, settings):
    settings.PUSH_MAX_CONCURRENCY_PER_RECEIVER = 1
    secret = PushSettings.objects.get(tenant=push_world.a.tenant).secret
    slow = Receiver(secret=secret).start()
    slow.hold = threading.Event()
    try:
        slow_task = send(push_world.a, "support", "slow one", push_url=slow.url)
        slow_task_2 = send(push_world.a, "support", "slow two", push_url=slow.url)
        fast_task = send(push_world.a, "support", "fast", push_url=receiver.url)
        slow_config = PushConfig.objects.get(task__public_id=slow_task)
        worker = threading.Thread(
            target=push_delivery.push_deliver,
            kwargs={"config_pk": slow_config.pk, "worker_id": "w-slow"},
        )
        worker.start()
        deadline = time.monotonic() + 10
        while slow.arrived == 0:  # the slow receiver has the request and sits on it
            assert time.monotonic() < deadline, "the slow receiver got nothing"
            time.sleep(0.02)
        # The slow receiver's only slot is taken: its other config waits without blocking...
        other = PushConfig.objects.get(task__public_id=slow_task_2)
        assert push_delivery.push_deliver(config_pk=other.pk, worker_id="w2") is not None
        assert not PushAttempt.objects.filter(delivery__config=other).exists()
        # ...and the fast receiver gets all of its events while the slow one still holds.
        fast = PushConfig.objects.get(task__public_id=fast_task)
        assert push_delivery.push_deliver(config_pk=fast.pk, worker_id="w3") is None
        assert receiver.events == stored_events(fast_task)
        assert slow.events == []
    finally:
        slow.hold.set()
        worker.join(10)
        slow.stop()


# --- outbound guard -----------------------------------------------------------------------


def test_private_and_loopback_addresses_are_refused_unless_allowed(settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    for url in (
        "http://127.0.0.1:9/x",
        "http://10.0.0.1/x",
        "http://[::1]/x",
        "http://169.254.169.254/latest",
    ):
        with pytest.raises(OutboundRefused):
            fetch_url(url, allowed_hosts=["*"], max_bytes=10, timeout=1)
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    with pytest.raises(OutboundRefused, match="not a public address"):
        fetch_url("http://169.254.169.254/latest", allowed_hosts=["*"], max_bytes=10, timeout=1)


def test_a_name_that_resolves_to_loopback_at_connect_time_is_refused(settings, loopback_only):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    receiver = Receiver().start()
    port = receiver.server.server_address[1]
    # The first lookup (anyone's check) sees a public address, the next one loopback.
    answers = iter(["93.184.216.34", "127.0.0.1"])
    loopback_only.answer("rebind.test", lambda: next(answers, "127.0.0.1"))
    socket.getaddrinfo("rebind.test", port)  # a check elsewhere used up the public answer
    try:
        with pytest.raises(OutboundRefused, match="refused addresses"):
            fetch_url(
                f"http://rebind.test:{port}/hook", allowed_hosts=["*"], max_bytes=10, timeout=2
            )
        assert receiver.requests == []
    finally:
        receiver.stop()


@pytest.mark.django_db(transaction=True)
def test_push_to_a_name_resolving_to_loopback_is_refused_when_not_allowed(
    push_world, receiver, settings, loopback_only
):
    port = receiver.server.server_address[1]
    loopback_only.answer("hooks.test", "127.0.0.1")
    task_id = send(push_world.a, "support", "hello", push_url=f"http://hooks.test:{port}/hook")
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    run(task_id)
    drain()
    assert receiver.requests == []
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {PushDelivery.State.GAVE_UP}
    assert all("refused" in a.error for a in PushAttempt.objects.all())


@pytest.mark.django_db(transaction=True)
def test_after_rotation_receivers_with_the_old_or_the_new_secret_both_verify(push_world):
    old = PushSettings.objects.get(tenant=push_world.a.tenant).secret
    rotated = push_configs.push_secret_rotate(tenant=push_world.a.tenant)
    assert rotated.secret != old
    with_old, with_new = Receiver(secret=old).start(), Receiver(secret=rotated.secret).start()
    try:
        first = send(push_world.a, "support", "one", push_url=with_old.url)
        second = send(push_world.a, "support", "two", push_url=with_new.url)
        run(first)
        run(second)
        drain()
        assert with_old.bad_signatures == with_new.bad_signatures == 0
        assert with_old.events == stored_events(first)
        assert with_new.events == stored_events(second)
    finally:
        with_old.stop()
        with_new.stop()


@pytest.mark.django_db(transaction=True)
def test_progress_and_telemetry_reach_only_callers_that_activated_them(push_world, receiver):
    a = push_world.a
    asked = f"{ext.PROGRESS}, {ext.TELEMETRY}"
    task_id = send(a, "deployer", "deploy", push_url=receiver.url, ext_header=asked)
    plain = send(a, "deployer", "deploy")
    for t in (task_id, plain):
        run(t)
    decide(Interaction.objects.get(task__public_id=task_id), by=a.operator.subject, approved=True)
    run(task_id)
    drain()
    plans = [
        (
            e["statusUpdate"].get("metadata")
            or e["statusUpdate"]["status"].get("message", {}).get("metadata")
            or {}
        ).get(ext.PROGRESS)
        for e in receiver.events
        if "statusUpdate" in e
    ]
    steps = [p["steps"] for p in plans if p]
    assert steps[0][0]["state"] == "active"
    assert steps[-1][0] == {"label": "Get approval", "state": "completed", "note": "approved"}
    final = receiver.events[-1]["statusUpdate"]["status"]["message"]["metadata"][ext.TELEMETRY]
    assert final["traceId"] == Task.objects.get(public_id=task_id).trace_id
    response = rpc(a, "deployer", "GetTask", {"id": task_id}, asked)
    assert set(response["A2A-Extensions"].split(", ")) == {ext.PROGRESS, ext.TELEMETRY}
    assert ext.TELEMETRY in response.json()["result"]["status"]["message"]["metadata"]
    bare = rpc(a, "deployer", "GetTask", {"id": task_id}).json()["result"]
    assert "metadata" not in bare["status"]["message"] and "A2A-Extensions" not in rpc(
        a, "deployer", "GetTask", {"id": task_id}
    )


# --- URLs that can never work, failures as attempts, the token at rest ---------------------

LEADING_ZERO_URL = "http://0177.0.0.1:8799/x"


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.django_db(transaction=True)
def test_a_url_with_a_leading_zero_octet_is_refused_at_the_edge(push_world):
    # Any host at all, so that the refusal is the parser's and not the allow-list's.
    PushSettings.objects.filter(tenant=push_world.a.tenant).update(allowed_hosts="*")
    a = push_world.a
    task_id = send(a, "support", "hi")
    created = rpc(
        a,
        "support",
        "CreateTaskPushNotificationConfig",
        {"taskId": task_id, "id": "c1", "url": LEADING_ZERO_URL},
    ).json()
    message = {"role": "ROLE_USER", "messageId": "m-inline", "parts": [{"text": "hi"}]}
    inline = rpc(
        a,
        "support",
        "SendMessage",
        {
            "message": message,
            "configuration": {"taskPushNotificationConfig": {"url": LEADING_ZERO_URL}},
        },
    ).json()
    for body in (created, inline):
        assert body["error"]["code"] == -32602, body
        assert "0177.0.0.1 is not a canonical IPv4 address" in body["error"]["message"]
    assert not PushConfig.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_push_config_that_can_never_work_is_given_up_not_retried_forever(push_world, eager):
    from runtime.tasks import sweep_push

    PushSettings.objects.filter(tenant=push_world.a.tenant).update(allowed_hosts="*")
    a = push_world.a
    task_id = send(a, "support", "hello")  # eager: the turn runs, its events are written
    task = Task.objects.get(public_id=task_id)
    # A row written before the edge parsed URLs: straight into the database.
    config = PushConfig.objects.create(
        tenant=a.tenant,
        task=task,
        subject=task.subject,
        public_id="old",
        url=LEADING_ZERO_URL,
        receiver="0177.0.0.1:8799",
    )
    events = TaskEvent.objects.filter(task=task).order_by("seq")
    for event in events:
        PushDelivery.objects.create(
            tenant=a.tenant, config=config, event=event, seq=event.seq, webhook_id=f"w{event.seq}"
        )
    assert events.count() > 1

    assert sweep_push() == 1  # delivers inline (eager), and must not raise

    config.refresh_from_db()
    assert config.disabled_at is not None
    assert config.disabled_reason.startswith("the URL can never work: ")
    assert "0177.0.0.1 is not a canonical IPv4 address" in config.disabled_reason
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {PushDelivery.State.GAVE_UP}
    (attempt,) = PushAttempt.objects.all()  # one attempt, then nothing more is tried
    assert "refused: " in attempt.error and "canonical IPv4" in attempt.error
    assert push_delivery.configs_due() == []
    assert sweep_push() == 0
    assert PushAttempt.objects.count() == 1
    # The caller still reads the config (A2A has no status field for it)...
    got = rpc(a, "support", "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "old"})
    assert got.json()["result"]["url"] == LEADING_ZERO_URL
    listed = rpc(a, "support", "ListTaskPushNotificationConfigs", {"taskId": task_id}).json()
    assert [c["id"] for c in listed["result"]["configs"]] == ["old"]
    # ...and operators see why it stopped, on the task page and in the admin.
    page = a.client_for(a.operator).get(f"/tasks/{task_id}/").content.decode()
    assert "the URL can never work" in page and "canonical IPv4" in page
    a.admin.is_staff = a.admin.is_superuser = True
    a.admin.save(update_fields=["is_staff", "is_superuser"])
    admin_page = a.client_for(a.admin).get("/admin/runtime/pushconfig/").content.decode()
    assert "the URL can never work" in admin_page


@pytest.mark.django_db(transaction=True)
def test_a_transient_failure_records_attempts_with_backoff(push_world, settings):
    settings.PUSH_RETRY_BASE_SECONDS = 60  # backoff of the first retry: 30 to 60 s
    url = f"http://127.0.0.1:{free_loopback_port()}/hook"  # nothing listens there
    task_id = send(push_world.a, "support", "hello", push_url=url)
    run(task_id)
    config = PushConfig.objects.get()
    before = time.time()

    retry = push_delivery.push_deliver(config_pk=config.pk, worker_id="w")

    assert retry is not None and 30 <= retry <= 60
    first = PushDelivery.objects.order_by("seq").first()
    assert first.state == PushDelivery.State.PENDING and first.attempts == 1
    assert "network error" in first.last_error
    assert first.next_attempt_at.timestamp() >= before + 30
    (attempt,) = PushAttempt.objects.all()
    assert attempt.status_code is None and "network error" in attempt.error
    config.refresh_from_db()
    assert config.disabled_at is None  # a refused connection may work later
    # Looked at again before the backoff is over, nothing is sent (events go in order)...
    again = push_delivery.push_deliver(config_pk=config.pk, worker_id="w")
    assert again is not None and 0 < again <= 60
    assert PushAttempt.objects.count() == 1
    # ...and once it is over, the sweep picks the config up again.
    assert push_delivery.configs_due(first.next_attempt_at) == [config.pk]


@pytest.mark.django_db(transaction=True)
def test_the_sweep_leaves_a_config_alone_while_its_first_delivery_backs_off(
    push_world, settings, monkeypatch
):
    from runtime.tasks import deliver_push, sweep_push

    settings.PUSH_RETRY_BASE_SECONDS = 60
    url = f"http://127.0.0.1:{free_loopback_port()}/hook"  # nothing listens there
    task_id = send(push_world.a, "support", "hello", push_url=url)
    run(task_id)
    config = PushConfig.objects.get()
    push_delivery.push_deliver(config_pk=config.pk, worker_id="w")
    first, *behind = PushDelivery.objects.filter(config=config).order_by("seq")
    now = push_delivery.timezone.now()
    # The events queued behind the first are old enough, but they go out only after it.
    assert behind and all(d.next_attempt_at <= now for d in behind)
    assert first.state == PushDelivery.State.PENDING and first.next_attempt_at > now

    enqueued = []
    monkeypatch.setattr(deliver_push, "apply_async", lambda *a, **k: enqueued.append(a))
    assert push_delivery.configs_due() == []
    assert sweep_push() == 0 and enqueued == []
    # Another config's holder draining the same receiver passes it over as well.
    push_delivery._drain_receiver(config.receiver, "other-worker")
    assert enqueued == [] and PushAttempt.objects.count() == 1

    # Once the first delivery is due again, the config is due (once, not once per event).
    assert push_delivery.configs_due(first.next_attempt_at) == [config.pk]
    # A config whose first pending delivery is due is found even when a later one backs off.
    PushDelivery.objects.filter(pk=first.pk).update(next_attempt_at=now)
    PushDelivery.objects.filter(pk=behind[0].pk).update(
        next_attempt_at=now + push_delivery.timedelta(hours=1)
    )
    assert push_delivery.configs_due() == [config.pk]


@pytest.mark.django_db(transaction=True)
def test_an_unexpected_error_is_an_attempt_not_a_crash(push_world, receiver, monkeypatch):
    task_id = send(push_world.a, "support", "hello", push_url=receiver.url)
    run(task_id)
    config = PushConfig.objects.get()

    def broken(*args, **kwargs):
        raise RuntimeError("the event cannot be serialised")

    monkeypatch.setattr(push_delivery, "_body_writer", broken)
    retry = push_delivery.push_deliver(config_pk=config.pk, worker_id="w")
    assert retry is not None
    first = PushDelivery.objects.order_by("seq").first()
    assert first.state == PushDelivery.State.PENDING and first.attempts == 1
    assert first.last_error == "unexpected error: RuntimeError: the event cannot be serialised"
    assert receiver.requests == []
    monkeypatch.undo()
    drain()
    assert receiver.events == stored_events(task_id)


@pytest.mark.django_db(transaction=True)
def test_push_token_is_encrypted_at_rest(push_world, receiver):
    from django.db import connection

    a = push_world.a
    token = "notification-token-in-plaintext-7f3a"
    task_id = send(a, "support", "hello")  # not run yet
    rpc(
        a,
        "support",
        "CreateTaskPushNotificationConfig",
        {"taskId": task_id, "id": "c1", "url": receiver.url, "token": token},
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT token FROM a2a_endpoint_pushconfig")
        (stored,) = cursor.fetchone()
    assert stored and token not in stored
    got = rpc(a, "support", "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"})
    assert got.json()["result"]["token"] == token
    listed = rpc(a, "support", "ListTaskPushNotificationConfigs", {"taskId": task_id}).json()
    assert listed["result"]["configs"][0]["token"] == token
    run(task_id)  # the turn's events go to the config
    drain()
    assert receiver.requests
    assert {r["headers"]["x-a2a-notification-token"] for r in receiver.requests} == {token}
    too_long = rpc(
        a,
        "support",
        "CreateTaskPushNotificationConfig",
        {"taskId": task_id, "id": "c2", "url": receiver.url, "token": "t" * 1001},
    ).json()
    assert too_long["error"]["code"] == -32602


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_the_tokens_already_stored(push_world):
    import importlib

    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    from connections.crypto import secret_decrypt

    migration = importlib.import_module("a2a_endpoint.migrations.0002_push_token_encrypted")
    # The models as that migration knew them (they are the runtime app's since its 0018).
    apps = (
        MigrationLoader(connection)
        .project_state(("a2a_endpoint", "0002_push_token_encrypted"))
        .apps
    )
    task_id = send(push_world.a, "support", "hello")
    task = Task.objects.get(public_id=task_id)
    for public_id, token in (("with", "old-plaintext"), ("without", "")):
        PushConfig.objects.create(
            tenant=task.tenant,
            task=task,
            subject=task.subject,
            public_id=public_id,
            url="http://127.0.0.1:9/x",
            receiver="127.0.0.1:9",
            token=token,  # as rows were before the migration
        )
    migration.tokens_encrypt(apps, None)
    stored = dict(PushConfig.objects.values_list("public_id", "token"))
    assert stored["without"] == ""
    assert "old-plaintext" not in stored["with"]
    assert secret_decrypt(stored["with"]) == "old-plaintext"
    assert PushConfig.objects.get(public_id="with").token_plaintext() == "old-plaintext"


@pytest.mark.django_db(transaction=True)
def test_a_token_that_cannot_be_sent_as_a_header_gives_the_config_up_without_quoting_it(
    push_world, receiver, eager
):
    from connections.crypto import secret_encrypt
    from runtime.tasks import sweep_push

    a = push_world.a
    task_id = send(a, "support", "hello")
    task = Task.objects.get(public_id=task_id)
    # A row written before the edge checked header values: straight into the database.
    config = PushConfig.objects.create(
        tenant=a.tenant,
        task=task,
        subject=task.subject,
        public_id="crlf",
        url=receiver.url,
        receiver=receiver.url.split("//")[1].split("/")[0],
        token=secret_encrypt("hush\r\nX-Injected: yes"),
    )
    event = TaskEvent.objects.filter(task=task).order_by("seq").first()
    PushDelivery.objects.create(
        tenant=a.tenant, config=config, event=event, seq=event.seq, webhook_id="w1"
    )

    sweep_push()

    config.refresh_from_db()
    assert config.disabled_at is not None
    assert "cannot be sent in an HTTP header" in config.disabled_reason
    errors = list(PushAttempt.objects.values_list("error", flat=True))
    errors += list(PushDelivery.objects.values_list("last_error", flat=True))
    assert errors and not any("hush" in e for e in errors)
    assert receiver.events == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "retry_after",
    ["9" * 40, "99999999999", "Fri, 31 Dec 9999 23:59:59 GMT"],
    ids=["forty-nines", "eleven-nines", "year-9999"],
)
def test_a_retry_after_past_the_retry_window_gives_the_delivery_up(
    push_world, receiver, retry_after
):
    # A Retry-After of 999...9 makes a date no datetime holds (an OverflowError at every
    # attempt, unless caught). A receiver that asks for a retry later than PUSH_RETRY_HOURS
    # gets none.
    receiver.script, receiver.retry_after = [429], retry_after
    task_id = send(push_world.a, "support", "hello", push_url=receiver.url)
    run(task_id)
    config = PushConfig.objects.get()

    push_delivery.push_deliver(config_pk=config.pk, worker_id="w")

    first = PushDelivery.objects.order_by("seq").first()
    assert first.state == PushDelivery.State.GAVE_UP and first.attempts == 1
    assert first.last_error == "HTTP 429; gave up after 24 hours"
    # The deliveries behind it go on.
    drain()
    assert len(receiver.events) == TaskEvent.objects.filter(task__public_id=task_id).count() - 1


def stored_push_secrets(tenant) -> tuple[str, str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT secret_encrypted, previous_secret_encrypted FROM a2a_endpoint_pushsettings "
            "WHERE tenant_id = %s",
            [tenant.pk],
        )
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_the_push_signing_secret_is_encrypted_at_rest_and_rotates(push_world):
    from connections.crypto import secret_decrypt

    tenant = push_world.a.tenant
    push = PushSettings.objects.get(tenant=tenant)
    secret, previous = stored_push_secrets(tenant)
    assert push.secret.startswith("whsec_") and "whsec_" not in secret and previous == ""
    assert secret_decrypt(secret) == push.secret

    rotated = push_configs.push_secret_rotate(tenant=tenant)

    secret, previous = stored_push_secrets(tenant)
    assert "whsec_" not in secret and "whsec_" not in previous
    assert secret_decrypt(previous) == push.secret != rotated.secret == secret_decrypt(secret)
    assert rotated.signing_secrets() == [rotated.secret, push.secret]


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_the_push_secrets_already_stored(push_world):
    import importlib

    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    tenant = push_world.a.tenant
    migration = importlib.import_module("runtime.migrations.0025_push_secret_encrypted")
    plain = "whsec_" + "c2VjcmV0LWluLXRoZS1jbGVhci0zMi1ieXRlcyEhISE="
    with connection.cursor() as cursor:  # as rows were before the migration
        cursor.execute(
            "UPDATE a2a_endpoint_pushsettings SET secret_encrypted = %s, "
            "previous_secret_encrypted = %s WHERE tenant_id = %s",
            [plain, "", tenant.pk],
        )
    apps = MigrationLoader(connection).project_state(("runtime", "0025_push_secret_encrypted")).apps

    migration.secrets_encrypt(apps, None)

    secret, previous = stored_push_secrets(tenant)
    assert plain not in secret and previous == ""
    assert PushSettings.objects.get(tenant=tenant).secret == plain
    migration.secrets_decrypt(apps, None)  # and back
    assert stored_push_secrets(tenant) == (plain, "")


@pytest.mark.django_db(transaction=True)
def test_a_push_secret_no_key_opens_is_an_attempt_that_says_so(push_world, receiver, settings):
    task_id = send(push_world.a, "support", "hello", push_url=receiver.url)
    run(task_id)
    settings.CONNECTIONS_ENCRYPTION_KEY = ["a-key-that-never-encrypted-anything-" + "x" * 20]

    push_delivery.push_deliver(config_pk=PushConfig.objects.get().pk, worker_id="w")

    first = PushDelivery.objects.order_by("seq").first()
    assert first.state == PushDelivery.State.PENDING and first.attempts == 1
    assert "push signing secret" in first.last_error and "cannot be decrypted" in first.last_error
    assert receiver.requests == []


@pytest.mark.django_db(transaction=True)
def test_admin_shows_the_signing_secret_it_stores_encrypted(push_world):
    a = push_world.a
    push = PushSettings.objects.get(tenant=a.tenant)
    a.admin.is_staff = a.admin.is_superuser = True
    a.admin.save(update_fields=["is_staff", "is_superuser"])

    page = a.client_for(a.admin).get(f"/admin/runtime/pushsettings/{push.pk}/change/")

    assert page.status_code == 200
    assert push.secret in page.content.decode()
    assert push.secret_encrypted not in page.content.decode()
