"""A lost "notify" message: beat's sweep fans the interaction out once it is past its grace
period, and the first message arriving late sends nothing twice."""

import threading
import uuid
from datetime import timedelta
from unittest.mock import patch

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from notifications import services
from notifications.models import Delivery, FanOut
from notifications.services import fan_outs_missing, notifications_fan_out
from notifications.tasks import notify_interaction, sweep_fan_outs
from runtime.decisions.decision_models import Interaction
from tests.core import decide, start
from tests.live import LiveStack, wait_until
from tests.notifications.conftest import HOLD


def hold_with_the_message_lost(side, capture) -> Interaction:
    """Run a turn to its pause; the fan-out's message, asked for on commit, is never sent."""
    with capture(execute=False) as callbacks:
        task = start(side, "deployer", HOLD)
    assert callbacks, "the pause asks for its fan-out after the commit"
    return Interaction.objects.get(task=task, state="open")


@pytest.mark.django_db
def test_the_sweep_fans_out_what_a_lost_message_never_did_once(
    agents, notify, channel, settings, django_capture_on_commit_callbacks
):
    settings.NOTIFY_FAN_OUT_GRACE_SECONDS = 120
    capture = django_capture_on_commit_callbacks
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator"])
    held = hold_with_the_message_lost(agents.a, capture)
    assert not FanOut.objects.exists() and not mail.outbox

    # Within the grace period the first message may still be on its way.
    assert fan_outs_missing(now=held.created_at + timedelta(seconds=119)) == []
    assert fan_outs_missing(now=held.created_at + timedelta(seconds=120)) == [held.pk]

    Interaction.objects.filter(pk=held.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    with capture(execute=True):
        assert sweep_fan_outs() == 1  # eager: the fan-out and its delivery run inline
    assert [m.to for m in mail.outbox] == [["operator@acme.test"]]
    marker = FanOut.objects.get()
    assert (marker.interaction_id, marker.swept, marker.deliveries) == (held.pk, True, 1)

    # The sweep again, and the first message arriving late: nothing is sent twice.
    with capture(execute=True):
        assert sweep_fan_outs() == 0
        assert notify_interaction(held.pk) == 0
    assert len(mail.outbox) == 1 and Delivery.objects.count() == 1


@pytest.mark.django_db
def test_an_item_no_channel_matched_or_already_decided_is_not_swept(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    later = timezone.now() + timedelta(hours=1)
    # No channel at all: the fan-out ran, matched nothing, and is not asked for again.
    with capture(execute=True):
        start(agents.a, "deployer", HOLD)
    assert FanOut.objects.get().deliveries == 0
    assert fan_outs_missing(now=later) == []

    # A lost message, then the item decided: nobody needs telling any more.
    held = hold_with_the_message_lost(agents.b, capture)
    assert fan_outs_missing(now=later) == [held.pk]
    decide(held, by="user:operator@globex.test", approved=False, reason="no")
    assert fan_outs_missing(now=later) == []
    assert notifications_fan_out(interaction_pk=held.pk) == 0


# --- through the broker and a real worker ----------------------------------------------------


@pytest.fixture
def notify_worker(transactional_db, settings, tmp_path):
    """A Celery worker subprocess on the test database, consuming a queue of its own, with
    loopback receivers allowed (the session's live stack has neither)."""
    queue = f"test-fanout-{uuid.uuid4().hex[:8]}"
    stack = LiveStack(
        tmp_path,
        extra_env={
            "CELERY_QUEUE": queue,
            "PUSH_ALLOW_PRIVATE_HOSTS": "true",
            "NOTIFY_RETRY_BASE_SECONDS": "0",
        },
    )
    stack.start_worker()
    try:
        yield stack, queue
    finally:
        stack.quiesce()
        stack.stop()


@pytest.mark.django_db(transaction=True)
def test_a_lost_notify_message_is_swept_through_the_broker_and_a_late_one_sends_nothing(
    agents, notify_worker, channel, receivers, settings
):
    stack, queue = notify_worker
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    hook = receivers(path="/hook")
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)

    # The turn commits and publishes its fan-out to this run's in-process queue, which no
    # worker consumes: for the worker, the message is lost.
    held = Interaction.objects.get(task=start(agents.a, "deployer", HOLD), state="open")
    Interaction.objects.filter(pk=held.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.NOTIFY_FAN_OUT_GRACE_SECONDS + 60)
    )
    assert not FanOut.objects.exists()

    # Beat's sweep, through the broker, on the worker: the fan-out and its delivery follow.
    sweep_fan_outs.apply_async(queue=queue)
    wait_until(lambda: len(hook.events) >= 1, 60, what=f"the swept notification\n{stack.logs()}")
    assert hook.bad_signatures == 0
    assert hook.events[0]["type"] == "interaction.opened"
    assert hook.events[0]["data"]["interactionId"] == held.public_id
    assert FanOut.objects.get(interaction=held).swept is True

    # The first message arrives at last: the worker runs it, and nothing is sent again.
    notify_interaction.apply_async((held.pk,), queue=queue)
    worker_log = sorted(stack.logdir.glob("worker-*.log"))[-1]
    said = f"interaction {held.pk} was fanned out already: nothing sent again"
    wait_until(lambda: said in worker_log.read_text(errors="replace"), 60, what="the late message")
    assert len(hook.events) == 1 and hook.arrived == 1
    assert Delivery.objects.filter(interaction=held).count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_first_message_and_the_sweeps_copy_at_once_fan_out_once(agents, channel, settings):
    """The copy waits on the marker's unique index while the first runs, then sends nothing."""
    if connection.vendor != "postgresql":
        pytest.skip("the race needs PostgreSQL's row locks across connections (DATABASE_URL)")
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator"])
    channel(agents.a.tenant, "ops hook", "webhook", url="http://127.0.0.1:9/hook")
    held = Interaction.objects.get(task=start(agents.a, "deployer", HOLD), state="open")
    inside, go = threading.Event(), threading.Event()
    original = services._fan_out

    def slow_fan_out(interaction, **kwargs):
        # The first holds its transaction (and the new marker) open here.
        inside.set()
        go.wait(30)
        return original(interaction, **kwargs)

    results: dict[str, int] = {}

    def run(name: str, swept: bool) -> None:
        try:
            results[name] = notifications_fan_out(interaction_pk=held.pk, swept=swept)
        finally:
            connection.close()

    with patch.object(services, "_fan_out", slow_fan_out):
        first = threading.Thread(target=run, args=("first", False))
        first.start()
        assert inside.wait(30)
        copy = threading.Thread(target=run, args=("copy", True))
        copy.start()

        def copy_waits_on_a_lock() -> bool:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                )
                return cursor.fetchone()[0] > 0

        wait_until(copy_waits_on_a_lock, 30, what="the copy to wait on the marker")
        go.set()
        first.join(30)
        copy.join(30)
    assert results == {"first": 2, "copy": 0}
    marker = FanOut.objects.get()
    assert (marker.swept, marker.deliveries) == (False, 2)
    assert Delivery.objects.filter(interaction=held).count() == 2
