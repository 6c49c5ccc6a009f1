"""Push delivery benchmark: 10,000 events to a local receiver that verifies every signature.

Runs against a live stack (Celery worker(s) on the same DATABASE_URL / CELERY_BROKER_URL,
started with PUSH_ALLOW_PRIVATE_HOSTS=true). It writes the events itself, through the same
runtime.kernel.task_state.event_emit the turn loop uses, spread over TASKS tasks (order is per task), then
waits until the receiver has them all or the deadline passes, and prints deliveries per
second and lost events (sent minus distinct, verified, in-order arrivals).

    DATABASE_URL=... CELERY_BROKER_URL=... PUSH_ALLOW_PRIVATE_HOSTS=true \
        .venv/bin/python bench/push.py [--events 10000] [--tasks 100]
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402

from runtime.agents.agent_models import Agent  # noqa: E402
from runtime.kernel.push.push_configs import ConfigInput, push_config_create  # noqa: E402
from runtime.kernel.push.push_models import PushDelivery, PushSettings  # noqa: E402
from runtime.kernel.shapes import status_payload  # noqa: E402
from runtime.kernel.task_models import Context, Task, TaskEvent  # noqa: E402
from runtime.kernel.task_state import event_emit  # noqa: E402
from tenants.models import Tenant  # noqa: E402
from tests.a2a_endpoint.receiver import Receiver  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--deadline", type=float, default=600)
    parser.add_argument(
        "--trickle",
        action="store_true",
        help="write each event in its own transaction while deliveries run (default: write "
        "them all in one transaction, then time the deliveries alone from the commit)",
    )
    args = parser.parse_args()

    tenant, _ = Tenant.objects.get_or_create(slug="bench-push", defaults={"name": "Bench"})
    settings_row, _ = PushSettings.objects.get_or_create(tenant=tenant)
    settings_row.allowed_hosts = "127.0.0.1"
    settings_row.save()
    agent, _ = Agent.objects.get_or_create(
        tenant=tenant, slug="bench", defaults={"name": "bench", "description": "bench"}
    )
    receiver = Receiver(secret=settings_row.secret).start()
    run = str(time.time_ns())
    per_task = args.events // args.tasks
    tasks = []
    for n in range(args.tasks):
        context = Context.objects.create(
            tenant=tenant, agent=agent, subject="bench", context_id=f"{run}-{n}"
        )
        task = Task.objects.create(
            public_id=f"bench-{run}-{n}",
            tenant=tenant,
            agent=agent,
            context=context,
            wire_context_id=context.context_id,
            turn=1,
            subject="bench",
        )
        push_config_create(
            tenant=tenant,
            agent=agent,
            subject="bench",
            task_id=task.public_id,
            config=ConfigInput(id="bench", url=receiver.url),
        )
        tasks.append(task)

    def write(task, i):
        task.status_message = {
            "messageId": f"{task.public_id}-{i}",
            "role": "ROLE_AGENT",
            "parts": [{"text": str(i)}],
        }
        event_emit(task, TaskEvent.Kind.STATUS, status_payload(task))
        task.save(update_fields=["event_seq", "status_message"])

    started = time.monotonic()
    if args.trickle:
        for i in range(per_task):
            for task in tasks:
                with transaction.atomic():
                    write(task, i)
    else:
        with transaction.atomic():
            for i in range(per_task):
                for task in tasks:
                    write(task, i)
    written = time.monotonic() - started
    total = per_task * len(tasks)
    print(
        f"wrote {total} events in {written:.1f}s ({'trickle' if args.trickle else 'one transaction'})"
    )
    if not args.trickle:
        started = time.monotonic()  # deliveries start at the commit: time them alone

    deadline = time.monotonic() + args.deadline
    while len(receiver.events) < total and time.monotonic() < deadline:
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    received: dict[str, list[int]] = {}
    for event in receiver.events:
        update = event["statusUpdate"]
        received.setdefault(update["taskId"], []).append(
            int(update["status"]["message"]["parts"][0]["text"])
        )
    distinct = sum(len(set(v)) for v in received.values())
    in_order = all(v == sorted(v) for v in received.values())
    receiver.stop()
    pending = PushDelivery.objects.filter(config__task__in=tasks, state="pending").count()
    print(
        f"delivered {len(receiver.events)} ({distinct} distinct) of {total} in {elapsed:.1f}s: "
        f"{len(receiver.events) / elapsed:.0f} deliveries/s; lost {total - distinct}; "
        f"bad signatures {receiver.bad_signatures}; in order per task: {in_order}; "
        f"still pending {pending}"
    )


if __name__ == "__main__":
    main()
