"""Push notification configs (A2A §4.3, §3.1.7-10) and a tenant's push settings.

A config names a task's receiver URL, its token and authentication; creating one checks the
URL against the tenant's allowed hosts (connections.outbound), no network I/O. Delivering to
it is runtime.kernel.push.push_delivery's business.
"""

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from connections.crypto import secret_encrypt
from connections.outbound import OutboundRefused, check_url, url_parse
from runtime.kernel.errors import InvalidParams, TaskNotFound
from runtime.kernel.push.push_delivery import push_deliveries_backfill
from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.push.push_selectors import push_settings_for
from runtime.kernel.task_models import Task
from runtime.kernel.task_selectors import task_for_caller

PAGE_SIZE_MAX = 100
TOKEN_MAX_LENGTH = 1000


# --- settings and secrets -----------------------------------------------------------------


def push_secret_rotate(*, tenant) -> PushSettings:
    """Start signing with a new secret; the old one stays valid for PUSH_SECRET_GRACE_HOURS."""
    with transaction.atomic():
        found = PushSettings.objects.select_for_update().get(pk=push_settings_for(tenant=tenant).pk)
        found.rotate(timedelta(hours=settings.PUSH_SECRET_GRACE_HOURS))
        found.save(
            update_fields=[
                "secret_encrypted",
                "previous_secret_encrypted",
                "previous_valid_until",
                "rotated_at",
            ]
        )
    return found


# --- configs ------------------------------------------------------------------------------


@dataclass
class ConfigInput:
    id: str
    url: str
    token: str = ""
    scheme: str = ""
    credentials: str = ""


def _caller_task(*, tenant, agent, subject: str, task_id: str, lock: bool = False) -> Task:
    # The same rule as every task method (an anonymous caller's capability is the task id);
    # configs are then the task owner's (task.subject), not the shared "anonymous".
    return task_for_caller(tenant=tenant, agent=agent, subject=subject, task_id=task_id, lock=lock)


def push_url_check(*, tenant, url: str) -> None:
    """Refuse a receiver URL that is not one well-formed http(s) URL (connections.outbound's
    url_parse) or that the tenant does not allow (InvalidParams, saying why); no network I/O."""
    if not url:
        raise InvalidParams("url", "is required")
    try:
        check_url(url, push_settings_for(tenant=tenant).host_patterns)
    except OutboundRefused as exc:
        raise InvalidParams("url", str(exc)) from None


def push_config_create(
    *,
    tenant,
    agent,
    subject: str,
    task_id: str,
    config: ConfigInput,
    activated: frozenset = frozenset(),
    from_start: bool = False,
    dialect: str = "1.0",
) -> PushConfig:
    """Create (or replace, same id) a task's push config; ``from_start`` also queues every
    event the task already has (a config sent inline with the message that made the task)."""
    if len(config.id) > 200:
        raise InvalidParams("id", "must be at most 200 characters")
    if len(config.token) > TOKEN_MAX_LENGTH:
        raise InvalidParams("token", f"must be at most {TOKEN_MAX_LENGTH} characters")
    with transaction.atomic():
        # The task row lock orders this against the worker's event writes (which hold the
        # same lock): every event is either already here (from_start queues it) or is
        # written after the config commits, by a statement that then finds the config
        # (runtime.kernel.event_store.task_events_insert).
        task = _caller_task(tenant=tenant, agent=agent, subject=subject, task_id=task_id, lock=True)
        push_url_check(tenant=tenant, url=config.url)
        values = {
            "tenant": tenant,
            "subject": task.subject,
            "url": config.url,
            "receiver": url_parse(config.url).receiver,
            # Encrypted at rest like the credentials; Get and List give it back (A2A does).
            "token": secret_encrypt(config.token) if config.token else "",
            "auth_scheme": config.scheme,
            "auth_credentials": secret_encrypt(config.credentials) if config.credentials else "",
            "activated": sorted(activated),
            "dialect": dialect,
            "disabled_at": None,
            "disabled_reason": "",
        }
        found, _ = PushConfig.objects.update_or_create(
            task=task,
            public_id=config.id or str(uuid.uuid4()),
            defaults=values,
            # The first event it has: the task's next one (read under the lock, which every
            # event's write holds too), or all of them for a config sent with the message.
            # A config replaced (same id) keeps its own.
            create_defaults={**values, "from_seq": 1 if from_start else task.event_seq + 1},
        )
        if from_start:
            push_deliveries_backfill(config=found)
    return found


def push_config_enable(config: PushConfig) -> bool:
    """Deliver to a disabled config again (an admin's decision, e.g. after a 410 that the
    receiver has since fixed), from the task's next event on; False when it was not
    disabled. Under the task's row lock, as configs are made, so that the next event is
    the first the config is given again (the events written while it was disabled stay
    undelivered, as the receiver asked)."""
    with transaction.atomic():
        task = Task.objects.select_for_update().filter(pk=config.task_id).first()
        if task is None:
            return False
        enabled = PushConfig.objects.filter(pk=config.pk, disabled_at__isnull=False).update(
            disabled_at=None, disabled_reason="", from_seq=task.event_seq + 1
        )
    return enabled == 1


def push_config_get(*, tenant, agent, subject: str, task_id: str, config_id: str) -> PushConfig:
    task = _caller_task(tenant=tenant, agent=agent, subject=subject, task_id=task_id)
    found = PushConfig.objects.filter(
        tenant=tenant, task=task, subject=task.subject, public_id=config_id
    ).first()
    if found is None:
        # TaskNotFound as the a2a SDK answers: a config is part of its task.
        raise TaskNotFound(
            f"Push notification config {config_id} of task {task_id} was not found.",
            taskId=task_id,
        )
    return found


def push_configs_page(
    *, tenant, agent, subject: str, task_id: str, page_size: int, after: int | None
) -> tuple[list[PushConfig], bool]:
    task = _caller_task(tenant=tenant, agent=agent, subject=subject, task_id=task_id)
    configs = PushConfig.objects.filter(tenant=tenant, task=task, subject=task.subject).order_by(
        "pk"
    )
    if after is not None:
        configs = configs.filter(pk__gt=after)
    rows = list(configs[: page_size + 1])
    return rows[:page_size], len(rows) > page_size


def push_config_delete(*, tenant, agent, subject: str, task_id: str, config_id: str) -> None:
    """Delete a config; deleting one that is gone is not an error (A2A: idempotent)."""
    with transaction.atomic():
        task = _caller_task(tenant=tenant, agent=agent, subject=subject, task_id=task_id)
        PushConfig.objects.filter(
            tenant=tenant, task=task, subject=task.subject, public_id=config_id
        ).delete()
