"""Replay a draft tool policy over N recorded calls of one agent (runtime.decisions.replay) and
say how long it took. The calls are journalled with bulk_create (contexts, tasks, effects) as
the policy in force would have decided them, over the last 30 days; the draft holds staging
deploys for an operator and lets rollbacks through, so that a share of the calls change.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
      .venv/bin/python bench/policy_replay.py --calls 100000

Run it again with the same ``--tenant`` to start over: the tenant is deleted first.
"""

import argparse
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCH = 5000
STEPS_PER_TASK = 50
IN_FORCE = {
    "deploy/deploy_build": [
        {
            "when": [{"field": "environment", "op": "equals", "value": "production"}],
            "action": "approve",
            "approvers": ["admin"],
            "required": 2,
        },
        {"action": "allow"},
    ],
    "deploy/delete_all": "deny",
}
DRAFT = {
    "deploy/deploy_build": [
        {
            "when": [{"field": "environment", "op": "in", "value": ["production", "staging"]}],
            "action": "approve",
            "approvers": ["operator"],
        },
        {"action": "allow"},
    ],
    "deploy/delete_all": "deny",
    "deploy/rollback": "allow",
}


def seed(*, slug: str, calls: int, rng: random.Random):
    from django.utils import timezone

    from runtime.agents.agent_models import Agent
    from runtime.decisions.decision_models import Effect
    from runtime.kernel.task_models import Context, Task, TaskState
    from tenants.models import Tenant

    Tenant.objects.filter(slug=slug).delete()
    tenant = Tenant.objects.create(slug=slug, name=f"Replay bench {slug}")
    agent = Agent.objects.create(
        tenant=tenant,
        slug="deployer",
        name="Deployer",
        description="bench",
        model={"provider": "scripted", "script": []},
        tool_policy=IN_FORCE,
    )
    now = timezone.now()
    tasks_needed = (calls + STEPS_PER_TASK - 1) // STEPS_PER_TASK
    contexts = [
        Context(tenant=tenant, agent=agent, subject="partner:bench", context_id=f"ctx-{i}")
        for i in range((tasks_needed + 99) // 100)
    ]
    Context.objects.bulk_create(contexts, batch_size=BATCH)
    tasks = [
        Task(
            public_id=f"t{i % 100 + 1}.{contexts[i // 100].key}",
            tenant=tenant,
            agent=agent,
            context=contexts[i // 100],
            wire_context_id=contexts[i // 100].context_id,
            turn=i % 100 + 1,
            subject="partner:bench",
            state=TaskState.COMPLETED,
        )
        for i in range(tasks_needed)
    ]
    Task.objects.bulk_create(tasks, batch_size=BATCH)
    effects = []
    for i in range(calls):
        roll = rng.random()
        if roll < 0.6:
            environment = rng.choice(("production", "staging", "dev"))
            tool, arguments = "deploy_build", {"build": f"b-{i}", "environment": environment}
            held = environment == "production"
            approved_by, outcome = ("user:admin@bench.test" if held else "policy"), {"ok": True}
        elif roll < 0.9:
            tool, arguments = "rollback", {"build": f"b-{i - 1}"}
            approved_by, outcome = "user:operator@bench.test", {"ok": True}
        else:
            tool, arguments = "delete_all", {"confirm": True}
            approved_by = ""
            outcome = {"error": "tool.denied", "reason": "denied by the tool policy"}
        effects.append(
            Effect(
                public_id=f"eff_bench{i}",
                tenant=tenant,
                task=tasks[i // STEPS_PER_TASK],
                step=i % STEPS_PER_TASK + 1,
                server="deploy",
                tool=tool,
                arguments=arguments,
                arguments_hash="0" * 64,
                state="denied" if tool == "delete_all" else "succeeded",
                outcome=outcome,
                approved_by=approved_by,
                created_at=now - timedelta(seconds=rng.uniform(0, 29 * 86400)),
            )
        )
        if len(effects) == BATCH:
            Effect.objects.bulk_create(effects)
            effects = []
    Effect.objects.bulk_create(effects)
    return agent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenant", default="replay-bench")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from runtime.decisions.replay import policy_replay

    call_command("migrate", verbosity=0)
    started = time.monotonic()
    with transaction.atomic():
        agent = seed(slug=args.tenant, calls=args.calls, rng=random.Random(args.seed))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE) runtime_effect, runtime_task")
    print(f"seeded {args.calls} recorded calls in {time.monotonic() - started:.1f}s")
    now = timezone.now()
    started = time.monotonic()
    report = policy_replay(
        agent=agent, policy=DRAFT, since=now - timedelta(days=30), until=now + timedelta(1)
    )
    took = time.monotonic() - started
    print(
        f"replayed {report.calls} calls in {took:.2f}s: happened {report.recorded}, "
        f"draft {report.draft}, {len(report.changed)} would change"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
