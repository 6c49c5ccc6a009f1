"""What each of the store's hand-written statements saves over the ORM.

runtime/kernel/store.py (and its siblings runtime/kernel/event_store.py and
runtime/agents/agent_store.py) keeps a statement written by hand only where a benchmark proves
it; bench/turn_cost.py's CPU per turn moves by a third from one run to the next on a loaded
machine, too much to see one statement's share. This measures each statement on its own:
the store's function and the queryset it would otherwise be, on the same rows of a real
PostgreSQL database, in alternating blocks (so that the machine's load falls on both alike),
and prints the CPU time (``time.thread_time``) of one call of each, the median over the
blocks, and what the store saves.

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench VAR_DIR=$PWD/var/bench \\
      .venv/bin/python bench/store_cost.py
"""

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30, help="alternating blocks of each")
    parser.add_argument("--calls", type=int, default=50, help="calls per block")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("DATABASE_URL must name a PostgreSQL database.")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")

    import django

    django.setup()
    import logging
    from decimal import Decimal

    from django.conf import settings
    from django.core.management import call_command
    from django.db import transaction
    from django.db.models import Exists, OuterRef, Subquery

    from runtime.agents import agent_store
    from runtime.agents.agent_models import Credential, ModelPrice
    from runtime.agents.agentfile import agent_upsert, parse_agent_file
    from runtime.agents.demo import AGENTS_DIR
    from runtime.decisions.decision_models import Effect, Interaction, Receipt
    from runtime.kernel import store
    from runtime.kernel.task_models import TERMINAL_STATES, Task, TaskState
    from runtime.llm.credentials import credential_set
    from runtime.turn.claim import turn_claim
    from runtime.turn.intake import message_send
    from tenants.models import Tenant

    logging.disable(logging.INFO)
    call_command("migrate", verbosity=0)
    settings.CELERY_TASK_DEFAULT_QUEUE = f"bench-store-{uuid.uuid4().hex[:8]}"
    from config.celery import app

    app.conf.task_always_eager = False
    tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="Bench")
    agent, _ = agent_upsert(tenant=tenant, spec=parse_agent_file(AGENTS_DIR / "deployer.md"))
    credential_set(tenant=tenant, name="BENCH_KEY", secret="sk-bench", by=None)
    ModelPrice.objects.update_or_create(
        model="bench-model",
        defaults={"input_usd_per_million": Decimal("1"), "output_usd_per_million": Decimal("2")},
    )

    def sent():
        message = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": "deploy build 2026.10.06-1 to staging"}],
        }
        return message_send(tenant=tenant, agent=agent, subject="partner:bench", message=message)

    task = turn_claim(task_pk=sent().task.pk, worker_id="bench")  # WORKING, this run's lease
    # A held call with its approval and receipt, as a resumed turn reads its journal.
    effect = Effect.objects.create(
        public_id=f"eff_{uuid.uuid4().hex[:12]}",
        tenant=tenant,
        task=task,
        step=1,
        server="deploy",
        tool="deploy_build",
        arguments={"build": "b"},
        arguments_hash="h",
        state=Effect.State.HELD,
    )
    interaction = Interaction.objects.create(
        public_id=effect.public_id,
        tenant=tenant,
        task=task,
        agent=agent,
        kind=Interaction.Kind.APPROVAL,
        prompt="Approve?",
        subject=task.subject,
        expires_at=task.created_at,
    )
    Receipt.objects.create(
        tenant=tenant,
        agent_slug=agent.slug,
        task_public_id=task.public_id,
        interaction_public_id=interaction.public_id,
        effect_public_id=effect.public_id,
        server="deploy",
        tool="deploy_build",
        decision=Receipt.Decision.APPROVED,
        decider="user:bench@example.test",
        channel="page",
        arguments_hash="h",
        policy_version="v",
    )

    # Each pair: the store's call, and the queryset that says the same.
    def claim_orm():
        earlier = Task.objects.filter(
            context_id=OuterRef("context_id"), turn__lt=OuterRef("turn")
        ).exclude(state__in=TERMINAL_STATES)
        found = (
            Task.objects.select_for_update(of=("self",))
            .select_related("tenant", "agent")
            .annotate(waits=Exists(earlier))
            .filter(pk=task.pk)
            .first()
        )
        return found, found.waits

    def run_lock_orm():
        return (
            Task.objects.select_for_update(of=("self",))
            .filter(pk=task.pk, run_id=task.run_id, lease_owner="bench", state=TaskState.WORKING)
            .values_list("agent__tool_policy", flat=True)
            .first()
        )

    def next_turn_orm():
        return (
            Task.objects.filter(
                context_id=task.context_id, turn__gt=task.turn, state=TaskState.SUBMITTED
            )
            .order_by("turn")
            .values_list("pk", flat=True)
            .first()
        )

    def decision_task_orm():
        return (
            Task.objects.select_for_update(of=("self",))
            .select_related("agent")
            .filter(
                tenant=tenant,
                pk=Subquery(
                    Interaction.objects.filter(
                        tenant=tenant, public_id=interaction.public_id
                    ).values("task_id")
                ),
            )
            .first()
        )

    def journal_orm():
        found = Effect.objects.filter(task=task, step=1).first()
        held = Interaction.objects.filter(tenant=tenant, public_id=found.public_id).first()
        latest = (
            Receipt.objects.filter(tenant=tenant, effect_public_id=found.public_id)
            .order_by("-created_at", "-pk")
            .first()
        )
        return found, held, latest

    pairs = [
        (
            "task_claim_read (every turn)",
            lambda: store.task_claim_read(task.pk),
            claim_orm,
            True,
        ),
        (
            "task_lock_for_run (each batch after a wait)",
            lambda: store.task_lock_for_run(task_pk=task.pk, run_id=task.run_id, worker_id="bench"),
            run_lock_orm,
            True,
        ),
        (
            "context_next_turn (every turn's end)",
            lambda: store.context_next_turn(task),
            next_turn_orm,
            False,
        ),
        (
            "call_journal_read (a resumed call; ORM: 3 statements)",
            lambda: store.call_journal_read(task=task, step=1),
            journal_orm,
            True,
        ),
        (
            "decision_task_lock (every decision)",
            lambda: store.decision_task_lock(tenant=tenant, interaction_id=interaction.public_id),
            decision_task_orm,
            True,
        ),
        (
            "credential_secret_read (a hosted model's call)",
            lambda: agent_store.credential_secret_read(tenant=tenant, name="BENCH_KEY"),
            lambda: (
                Credential.objects.filter(tenant=tenant, name="BENCH_KEY")
                .values_list("secret_encrypted", flat=True)
                .first()
            ),
            False,
        ),
        (
            "model_price_read (a hosted model's reply)",
            lambda: agent_store.model_price_read("bench-model"),
            lambda: (
                ModelPrice.objects.filter(model="bench-model")
                .values_list("input_usd_per_million", "output_usd_per_million")
                .first()
            ),
            False,
        ),
    ]

    def block(fn, locked: bool) -> float:
        """CPU microseconds per call over one block."""
        started = time.thread_time()
        for _ in range(args.calls):
            if locked:
                with transaction.atomic():
                    fn()
            else:
                fn()
        return (time.thread_time() - started) * 1e6 / args.calls

    print(f"{'statement':56s} {'store':>8s} {'ORM':>8s} {'saved':>8s}  (CPU us/call, p50)")
    for label, stored, orm, locked in pairs:
        for fn in (stored, orm):  # warm: statements built, connection open
            block(fn, locked)
        mine, theirs = [], []
        for _ in range(args.blocks):
            mine.append(block(stored, locked))
            theirs.append(block(orm, locked))
        a, b = statistics.median(mine), statistics.median(theirs)
        print(f"{label:56s} {a:8.0f} {b:8.0f} {b - a:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
