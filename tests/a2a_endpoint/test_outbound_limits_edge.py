"""The total deadline and byte cap of outbound reads where a partner
gave the URL: a push receiver that trickles or floods its reply is an attempt that failed and
is retried; a url part that trickles or is huge is that part failed, and the turn goes on."""

import pytest

from runtime.kernel.push import push_delivery
from runtime.kernel.push.push_models import PushAttempt, PushConfig, PushDelivery
from runtime.kernel.task_models import TaskFile, TaskState
from tests.a2a_endpoint.test_files import files_world, inputs_entry, status_text
from tests.a2a_endpoint.test_files import send as send_parts
from tests.a2a_endpoint.test_push import push_world, run, send
from tests.hostile import huge, trickling

__all__ = ["files_world", "push_world"]  # the fixtures these tests use

MIB = 1024 * 1024


def first_attempt_of(task_id: str, server) -> PushDelivery:
    run(task_id)
    config = PushConfig.objects.get()
    retry = push_delivery.push_deliver(config_pk=config.pk, worker_id="w")
    assert retry is not None  # tried again later, not given up
    assert server.left_early.wait(10)  # the receiver was not read to its end
    first = PushDelivery.objects.order_by("seq").first()
    assert first.state == PushDelivery.State.PENDING and first.attempts == 1
    return first


@pytest.mark.django_db(transaction=True)
def test_a_push_receiver_that_trickles_its_reply_is_cut_off_at_the_timeout(push_world, settings):
    settings.PUSH_TIMEOUT_SECONDS = 1
    settings.PUSH_RETRY_BASE_SECONDS = 60
    with trickling(total=2000, every=0.05) as server:
        first = first_attempt_of(
            send(push_world.a, "support", "hello", push_url=server.url), server
        )
    assert first.last_error == "timed out"
    (attempt,) = PushAttempt.objects.all()
    assert attempt.error == "timed out"
    assert 0 < server.sent < 2000


@pytest.mark.django_db(transaction=True)
def test_a_push_receiver_that_floods_its_reply_is_read_up_to_the_cap(push_world, settings):
    settings.PUSH_REPLY_MAX_BYTES = 1024
    settings.PUSH_RETRY_BASE_SECONDS = 60
    with huge(200 * MIB, declared=False) as server:
        first = first_attempt_of(
            send(push_world.a, "support", "hello", push_url=server.url), server
        )
    assert first.last_error == "network error: the response is larger than 1024 bytes"
    assert server.sent < 20 * MIB


@pytest.mark.django_db(transaction=True)
def test_a_url_part_that_trickles_fails_at_the_fetch_timeout(files_world, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.FILES_FETCH_TIMEOUT_SECONDS = 1
    a = files_world.a
    with trickling(total=2000, every=0.05, content_type="text/plain") as server:
        task_id = send_parts(a, [{"text": "check"}, {"url": server.url, "mediaType": "text/plain"}])
        assert server.left_early.wait(10)
    state, text = status_text(a, task_id)
    assert state == TaskState.COMPLETED
    [failed] = inputs_entry(task_id)
    assert failed["error"] == f"fetching {server.url} timed out after 1s"
    assert text.startswith(failed["error"])
    assert not TaskFile.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_huge_url_part_without_a_length_fails_at_the_cap(files_world, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.FILES_FETCH_MAX_BYTES = MIB
    a = files_world.a
    with huge(200 * MIB, declared=False, content_type="text/plain") as server:
        task_id = send_parts(a, [{"text": "check"}, {"url": server.url, "mediaType": "text/plain"}])
        assert server.left_early.wait(10)
    [failed] = inputs_entry(task_id)
    assert failed["error"] == f"{server.url} is larger than {MIB} bytes"
    assert status_text(a, task_id)[0] == TaskState.COMPLETED
    assert server.sent < 20 * MIB
