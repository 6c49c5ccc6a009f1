"""Push notification delivery (A2A §4.3; profile v2; reference §8).

Delivery, in short:
- Each TaskEvent becomes one PushDelivery per active config of its task, in the statement
  that writes the event (runtime.kernel.task_state.events_write: the core calls it where it
  writes events), and a Celery task is asked to deliver that config after the commit. A
  config sent with the message that made the task gets the task's events so far when it is
  made (push_deliveries_backfill); a config has each event from its ``from_seq`` on, and an
  event it should have and has no delivery for (none should) is queued before the config's
  next round (push_deliveries_fill) or by the sweep (configs_missing_deliveries): each event
  reaches each config once, in order.
- One worker at a time delivers a config (a lease on the config row), oldest event first,
  and does not move past an event until it was delivered or given up: events arrive in
  order per task, at least once.
- A receiver (host:port) has PUSH_MAX_CONCURRENCY_PER_RECEIVER slots (PushReceiverSlot). A
  worker that finds them all taken does not wait: it schedules the config again, so a slow
  receiver ties up at most that many worker processes and delays only its own deliveries.
- Network errors, timeouts, 429 and 5xx are retried with exponential backoff and full
  jitter, honouring Retry-After, for PUSH_RETRY_HOURS; 410 disables the config; other
  answers give the delivery up. Every attempt is a PushAttempt row, whatever went wrong:
  an unexpected error is an attempt retried with backoff too, never a Celery task that
  fails on every sweep.
- A config whose URL can never work (refused by connections.outbound's parser or by the
  tenant's allowed hosts: rows older than the parser, hosts no longer allowed) is given up:
  disabled with the reason, its pending deliveries given up. Callers still Get and List it
  (A2A's config has no status); operators see the reason on the task page and in admin.
- Requests are signed with Standard Webhooks (webhook-id, webhook-timestamp,
  webhook-signature) using the tenant's push secret, and during a rotation's grace period
  with the previous secret too (Standard Webhooks allows several signatures).
- Requests go out only through connections.outbound (allowed hosts, no private addresses).
"""

import functools
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from config.celery import task_enqueue
from config.logging import log_context
from connections.crypto import InvalidToken, secret_decrypt
from connections.outbound import OutboundRefused, check_url, guarded_client, webhook_headers
from runtime.kernel.push.push_models import (
    PushAttempt,
    PushConfig,
    PushDelivery,
    PushReceiverSlot,
    PushSettings,
    SecretUnreadable,
)
from runtime.kernel.push.push_selectors import push_settings_for
from runtime.kernel.task_models import TaskEvent

# A retry further away than this is left to the sweep, so that no message sits in the broker
# for hours (brokers redeliver unacknowledged messages after their visibility timeout).
MAX_COUNTDOWN = 300

logger = logging.getLogger(__name__)

LEASE_SECONDS = 120
# A config that finds every slot of its receiver taken looks again after this (to twice it).
BUSY_RETRY_SECONDS = 2.0
# How long a slot holder goes on with the receiver's other configs (_drain_receiver).
DRAIN_SECONDS = 30.0


# --- the bodies -----------------------------------------------------------------------------

# A body is what the A2A wire says of the event, for the dialect the config was registered in
# (a 1.0 StreamResponse, a 0.3 Task) and the extensions its request activated, with download
# links to the task's files: the A2A edge's to write (a2a_endpoint.push_bodies), and the core
# never imports an edge. So the a2a_endpoint app hands its writer over as it starts
# (A2aEndpointConfig.ready calls push_body_writer_set), and deliveries call it by name.
PushBodyWriter = Callable[[PushConfig, TaskEvent], dict]
_body_writer: PushBodyWriter | None = None


# The Celery task that delivers a config's events (runtime.tasks), queued by name.
DELIVER_PUSH = "runtime.tasks.deliver_push"


def push_body_writer_set(writer: PushBodyWriter) -> None:
    """Write push bodies with ``writer(config, event)`` (the a2a_endpoint app's, at ready())."""
    global _body_writer
    _body_writer = writer


def push_body(config: PushConfig, event: TaskEvent) -> dict:
    """The JSON body of ``event`` for ``config``'s receiver."""
    if _body_writer is None:
        raise RuntimeError("no push body writer is set (the a2a_endpoint app sets it)")
    return _body_writer(config, event)


# --- queueing -----------------------------------------------------------------------------


def _delivery(config: PushConfig, event: TaskEvent) -> PushDelivery:
    return PushDelivery(
        tenant_id=config.tenant_id,
        config=config,
        event=event,
        seq=event.seq,
        webhook_id=f"msg_{uuid.uuid4().hex}",
    )


def push_deliveries_schedule(*, config_pks: Iterable[int]) -> None:
    """Deliver these configs once this transaction commits (their deliveries were queued in
    it: runtime.kernel.task_state.events_write, push_deliveries_backfill)."""
    for config_pk in config_pks:
        transaction.on_commit(functools.partial(task_enqueue, DELIVER_PUSH, (config_pk,)))


def push_deliveries_backfill(*, config: PushConfig) -> None:
    """Queue a delivery of every event the config's task already has (a config sent with
    the message that made the task); call it holding the task's row lock."""
    events = TaskEvent.objects.filter(task_id=config.task_id).order_by("seq")
    PushDelivery.objects.bulk_create([_delivery(config, e) for e in events], ignore_conflicts=True)
    push_deliveries_schedule(config_pks=[config.pk])


def _missing(config: PushConfig):
    """The events of the config's task that it should have (from its ``from_seq`` on) and
    has no delivery for."""
    return TaskEvent.objects.filter(task_id=config.task_id, seq__gte=config.from_seq).exclude(
        pk__in=PushDelivery.objects.filter(config_id=config.pk).values("event_id")
    )


def push_deliveries_fill(*, config: PushConfig) -> int:
    """Queue a delivery of each event the config should have and has none for; return how
    many. The events' writes queue them (events_write): this is the net under that, run
    before each round of the config's deliveries (so that none goes out ahead of an earlier
    event's) and by the sweep. Events are committed in seq order (the task's row lock), so
    what it finds missing is older than anything not yet written."""
    missing = list(_missing(config).order_by("seq"))
    PushDelivery.objects.bulk_create([_delivery(config, e) for e in missing], ignore_conflicts=True)
    if missing:
        logger.warning(
            "push %s: %s event(s) had no delivery (from #%s); queued now",
            config.public_id,
            len(missing),
            missing[0].seq,
        )
    return len(missing)


def configs_missing_deliveries(now=None) -> list[int]:
    """Active configs with an event they should have and have no delivery for (the sweep's:
    none should be). Only tasks whose status changed within PUSH_RETRY_HOURS are looked at:
    every event is written with a status change or just before one, and a delivery older
    than that would be given up anyway."""
    now = now or timezone.now()
    missing = TaskEvent.objects.filter(
        task_id=OuterRef("task_id"), seq__gte=OuterRef("from_seq")
    ).exclude(
        pk__in=PushDelivery.objects.filter(config_id=OuterRef(OuterRef("pk"))).values("event_id")
    )
    return list(
        PushConfig.objects.filter(
            disabled_at__isnull=True,
            task__status_timestamp__gte=now - timedelta(hours=settings.PUSH_RETRY_HOURS),
        )
        .filter(Exists(missing))
        .values_list("pk", flat=True)[:1000]
    )


# --- delivery -----------------------------------------------------------------------------


def _claim_config(config_pk: int, worker_id: str) -> bool:
    now = timezone.now()
    return (
        PushConfig.objects.filter(pk=config_pk)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=worker_id))
        .update(lease_owner=worker_id, lease_until=now + timedelta(seconds=LEASE_SECONDS))
        == 1
    )


def _release_config(config_pk: int, worker_id: str) -> None:
    PushConfig.objects.filter(pk=config_pk, lease_owner=worker_id).update(
        lease_owner="", lease_until=None
    )


def _claim_slot(receiver: str, worker_id: str) -> PushReceiverSlot | None:
    now = timezone.now()
    for number in range(max(1, settings.PUSH_MAX_CONCURRENCY_PER_RECEIVER)):
        PushReceiverSlot.objects.get_or_create(receiver=receiver, slot=number)
        claimed = (
            PushReceiverSlot.objects.filter(receiver=receiver, slot=number)
            .filter(Q(until__isnull=True) | Q(until__lt=now))
            .update(holder=worker_id, until=now + timedelta(seconds=LEASE_SECONDS))
        )
        if claimed == 1:
            return PushReceiverSlot.objects.get(receiver=receiver, slot=number)
    return None


def _release_slot(slot: PushReceiverSlot, worker_id: str) -> None:
    PushReceiverSlot.objects.filter(pk=slot.pk, holder=worker_id).update(holder="", until=None)


def _next_pending(config_pk: int) -> PushDelivery | None:
    return (
        PushDelivery.objects.select_related("event")
        .filter(config_id=config_pk, state=PushDelivery.State.PENDING)
        .order_by("seq")
        .first()
    )


def _heads_due(now):
    """Pending deliveries that are due and first in their config's line.

    Events go out in order (_deliver_due never passes a pending delivery), so a config is
    due only when its oldest pending delivery is: while that one backs off, the events queued
    behind it are not due, however old they are. Counting them made the sweep enqueue the
    config at every beat, and each of those messages rescheduled itself for the backoff's
    end (deliver_push), so that copies piled up."""
    earlier = PushDelivery.objects.filter(
        config_id=OuterRef("config_id"), state=PushDelivery.State.PENDING, seq__lt=OuterRef("seq")
    )
    return PushDelivery.objects.filter(
        state=PushDelivery.State.PENDING, next_attempt_at__lte=now
    ).filter(~Exists(earlier))


def _has_due(config_pk: int) -> bool:
    return _heads_due(timezone.now()).filter(config_id=config_pk).exists()


def push_deliver(*, config_pk: int, worker_id: str) -> float | None:
    """Deliver a config's due deliveries in order. Return the seconds after which it should
    run again (a retry is due, or the receiver was busy), or None when nothing is due."""
    while True:
        if not _claim_config(config_pk, worker_id):
            return None  # another worker is delivering it; it looks again when it is done
        try:
            config = PushConfig.objects.select_related("tenant", "task").get(pk=config_pk)
            if config.disabled_at is not None:
                return None
            slot = _claim_slot(config.receiver, worker_id)
            if slot is None:
                # Every slot of this receiver is taken, and each holder drains the receiver's
                # other configs before it lets go (_drain_receiver): look again in a few
                # seconds rather than spinning on the slots.
                return BUSY_RETRY_SECONDS * (1 + random.random())
            try:
                retry = _deliver_config(config, worker_id)
                if retry is None:
                    _drain_receiver(config.receiver, worker_id)
            finally:
                _release_slot(slot, worker_id)
        finally:
            _release_config(config_pk, worker_id)
        if retry is not None:
            return retry
        # A delivery queued while we held the lease found the config taken and left it to
        # us: look once more after letting go.
        if not _has_due(config_pk):
            return None


def _deliver_config(config: PushConfig, worker_id: str) -> float | None:
    with log_context(
        task_id=config.task.public_id, tenant=config.tenant.slug, trace_id=config.task.trace_id
    ):
        push_deliveries_fill(config=config)
        return _deliver_due(config, worker_id)


def _drain_receiver(receiver: str, worker_id: str) -> None:
    """Holding one of a receiver's slots, deliver its other configs' due events too.

    Configs that found every slot taken come back only after a few seconds; the holders
    keep the receiver busy meanwhile, so its backlog goes out at the slots' pace. Bounded in
    time, so that one Celery task does not hold a worker for long.
    """
    until = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < until:
        now = timezone.now()
        due = _heads_due(now).filter(config_id=OuterRef("pk"))
        candidate = (
            PushConfig.objects.filter(receiver=receiver, disabled_at__isnull=True)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
            .filter(Exists(due))
            .values_list("pk", flat=True)
            .first()
        )
        if candidate is None or not _claim_config(candidate, worker_id):
            return
        try:
            config = PushConfig.objects.select_related("tenant", "task").get(pk=candidate)
            retry = _deliver_config(config, worker_id)
        finally:
            _release_config(candidate, worker_id)
        if retry is not None and retry <= MAX_COUNTDOWN:
            task_enqueue(DELIVER_PUSH, (candidate,), countdown=retry)


def _deliver_due(config: PushConfig, worker_id: str) -> float | None:
    # PUSH_TIMEOUT_SECONDS is each attempt's total, PUSH_REPLY_MAX_BYTES the most of a reply
    # read (connections.outbound): a receiver that trickles or floods is an attempt that failed.
    client = guarded_client(
        timeout=settings.PUSH_TIMEOUT_SECONDS,
        max_connections=1,
        max_response_bytes=settings.PUSH_REPLY_MAX_BYTES,
    )
    # One read of the tenant's push settings (allowed hosts, signing secrets) per batch.
    push = push_settings_for(tenant=config.tenant)
    renewed = time.monotonic()
    try:
        while True:
            delivery = _next_pending(config.pk)
            if delivery is None:
                return None
            wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
            if wait > 0:
                return wait
            if time.monotonic() - renewed > LEASE_SECONDS / 4:
                _claim_config(config.pk, worker_id)  # renew the lease between deliveries
                renewed = time.monotonic()
            retry = _attempt(client, config, delivery, push)
            if retry is not None:
                return retry
            if config.disabled_at is not None:  # this attempt got 410 Gone
                return None
    finally:
        client.close()


def _headers(config: PushConfig, delivery: PushDelivery, body: str, push: PushSettings) -> dict:
    now = timezone.now()
    headers = {
        # application/a2a+json is 1.0's; 0.3 named no media type for push, and sent JSON.
        "Content-Type": "application/json" if config.dialect == "0.3" else "application/a2a+json",
        **webhook_headers(push.signing_secrets(now), delivery.webhook_id, body, now),
        "User-Agent": "Countersign-Push/1",
    }
    if config.auth_scheme:
        try:
            credentials = secret_decrypt(config.auth_credentials) if config.auth_credentials else ""
        except InvalidToken:
            credentials = ""
            logger.error("push config %s: credentials cannot be decrypted", config.public_id)
        headers["Authorization"] = f"{config.auth_scheme} {credentials}".strip()
    if token := config.token_plaintext():
        headers["X-A2A-Notification-Token"] = token
    return headers


def _retry_after(response: httpx.Response) -> float | None:
    """The receiver's Retry-After, in seconds from now (a number, or an HTTP date), at most
    just past the retry window: a later one is a delivery given up (``_attempt``), and a
    receiver's ``999...9`` made a date no datetime holds, an OverflowError on every attempt."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    if value.strip().isdigit():
        seconds = float(value.strip())
    else:
        try:
            seconds = (parsedate_to_datetime(value) - timezone.now()).total_seconds()
        except (TypeError, ValueError, OverflowError):
            return None
    return min(max(0.0, seconds), settings.PUSH_RETRY_HOURS * 3600.0 + 1)


def backoff_seconds(attempts: int) -> float:
    """Exponential backoff with full jitter, capped at an hour."""
    ceiling = min(3600.0, settings.PUSH_RETRY_BASE_SECONDS * (2 ** min(attempts, 20)))
    return random.uniform(ceiling / 2, ceiling)


@dataclass
class _Outcome:
    status_code: int | None = None
    error: str = ""
    retry_in: float | None = None  # seconds until this delivery is tried again
    give_up: bool = False  # this delivery
    unusable: str = ""  # why the config's URL can never work: the config is given up


def _post(
    client: httpx.Client, config: PushConfig, delivery: PushDelivery, push: PushSettings
) -> _Outcome:
    """POST one delivery. Never raises: whatever goes wrong is the attempt's outcome, so a
    bad row costs attempts on a backoff, not a Celery task that fails on every sweep."""
    try:
        # Every send is checked again: the tenant's allowed hosts may have changed, and rows
        # written before url_parse existed were never parsed by it.
        check_url(config.url, push.host_patterns)
    except OutboundRefused as exc:
        return _Outcome(error=f"refused: {exc}", unusable=str(exc))
    try:
        body = json.dumps(push_body(config, delivery.event))
        response = client.post(
            config.url, content=body, headers=_headers(config, delivery, body, push)
        )
    except httpx.InvalidURL as exc:
        # url_parse refuses whatever httpx refuses; should they ever disagree, the URL still
        # cannot work, and retrying it would change nothing.
        return _Outcome(error=f"refused: {exc}", unusable=f"httpx refuses the URL: {exc}")
    except OutboundRefused as exc:
        # At connect time: the name resolved only to refused addresses. That answer comes
        # from DNS and may change, so only this delivery is given up, not the config.
        return _Outcome(error=f"refused: {exc}", give_up=True)
    except (httpx.LocalProtocolError, UnicodeEncodeError):
        # A header we were given (the token, the credentials) cannot be sent: it never will
        # be. The library's message quotes the header's value, a secret, so it is not kept.
        reason = "the config's token or credentials cannot be sent in an HTTP header"
        return _Outcome(error=f"refused: {reason}", unusable=reason)
    except SecretUnreadable as exc:
        # The tenant's signing secret needs a key no longer configured: rotating the secret
        # in admin (or the key back) lets the next attempt through.
        return _Outcome(error=str(exc), retry_in=backoff_seconds(delivery.attempts))
    except httpx.TimeoutException:
        return _Outcome(error="timed out", retry_in=backoff_seconds(delivery.attempts))
    except httpx.HTTPError as exc:
        return _Outcome(error=f"network error: {exc}", retry_in=backoff_seconds(delivery.attempts))
    except Exception as exc:
        logger.exception("push %s #%s: unexpected error", config.public_id, delivery.seq)
        return _Outcome(
            error=f"unexpected error: {type(exc).__name__}: {exc}",
            retry_in=backoff_seconds(delivery.attempts),
        )
    status_code = response.status_code
    if 200 <= status_code < 300:
        return _Outcome(status_code=status_code)
    if status_code == 410:
        return _Outcome(
            status_code=status_code, error="410 Gone: the receiver asked to stop; config disabled"
        )
    if status_code == 429 or status_code >= 500:
        retry_in = max(_retry_after(response) or 0.0, backoff_seconds(delivery.attempts))
        return _Outcome(status_code=status_code, error=f"HTTP {status_code}", retry_in=retry_in)
    return _Outcome(status_code=status_code, error=f"HTTP {status_code}: not retried", give_up=True)


def _attempt(
    client: httpx.Client, config: PushConfig, delivery: PushDelivery, push: PushSettings
) -> float | None:
    """POST one delivery; record the attempt; return seconds to wait before retrying it."""
    now = timezone.now()
    started = time.monotonic()
    outcome = _post(client, config, delivery, push)
    duration_ms = int((time.monotonic() - started) * 1000)
    status_code, error, retry_in = outcome.status_code, outcome.error, outcome.retry_in
    give_up = outcome.give_up
    first = delivery.first_attempt_at or now
    if retry_in is not None and now + timedelta(seconds=retry_in) > first + timedelta(
        hours=settings.PUSH_RETRY_HOURS
    ):
        retry_in, give_up = None, True
        error = f"{error}; gave up after {settings.PUSH_RETRY_HOURS} hours"
    with transaction.atomic():
        PushAttempt.objects.create(
            delivery=delivery,
            status_code=status_code,
            error=error[:500],
            duration_ms=duration_ms,
            at=now,
        )
        fields = {
            "attempts": delivery.attempts + 1,
            "first_attempt_at": first,
            "last_error": error[:500],
        }
        if status_code == 410:
            PushConfig.objects.filter(pk=config.pk).update(
                disabled_at=now, disabled_reason="the receiver answered 410 Gone"
            )
            config.disabled_at = now
            PushDelivery.objects.filter(config=config, state=PushDelivery.State.PENDING).update(
                state=PushDelivery.State.CANCELED, finished_at=now
            )
            fields.update(state=PushDelivery.State.CANCELED, finished_at=now)
        elif outcome.unusable and _config_give_up(config, outcome.unusable, now):
            config.disabled_at = now
            fields.update(state=PushDelivery.State.GAVE_UP, finished_at=now)
        elif outcome.unusable:
            # The config was replaced with another URL meanwhile: try that one, later.
            retry_in = backoff_seconds(delivery.attempts)
            fields["next_attempt_at"] = now + timedelta(seconds=retry_in)
        elif retry_in is not None:
            fields["next_attempt_at"] = now + timedelta(seconds=retry_in)
        elif give_up:
            fields.update(state=PushDelivery.State.GAVE_UP, finished_at=now)
        else:
            fields.update(state=PushDelivery.State.DELIVERED, finished_at=now, last_error="")
        PushDelivery.objects.filter(pk=delivery.pk).update(**fields)
    if error:
        logger.info("push %s #%s to %s: %s", config.public_id, delivery.seq, config.receiver, error)
    return retry_in


def _config_give_up(config: PushConfig, why: str, now) -> bool:
    """Stop a config whose URL can never work, and give up its pending deliveries. Only
    while its URL is still the one that failed: a config replaced meanwhile (same id, a new
    URL, push_config_create) is left alone. Returns whether it was given up."""
    reason = f"the URL can never work: {why}"
    stopped = PushConfig.objects.filter(
        pk=config.pk, url=config.url, disabled_at__isnull=True
    ).update(disabled_at=now, disabled_reason=reason[:300])
    if stopped:
        PushDelivery.objects.filter(config=config, state=PushDelivery.State.PENDING).update(
            state=PushDelivery.State.GAVE_UP, finished_at=now, last_error=reason[:500]
        )
    return stopped == 1


def configs_due(now=None) -> list[int]:
    """Configs whose next delivery is due (for the sweep: a lost enqueue, a long retry); a
    config whose first pending delivery still backs off is left alone until it is due."""
    now = now or timezone.now()
    return list(
        _heads_due(now)
        # A disabled or given-up config is never delivered (push_deliver), so its leftovers
        # (say, disabled in the admin) would be picked on every sweep for nothing.
        .filter(config__disabled_at__isnull=True)
        # No ordering: PushDelivery's default (config, seq) would make DISTINCT per delivery,
        # and one config would be scheduled once for each of its pending deliveries.
        .order_by()
        .values_list("config_id", flat=True)
        .distinct()[:1000]
    )
