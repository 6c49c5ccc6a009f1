"""Seed a tenant with an inbox at scale: N pending interactions and M decided ones.

Rows are written with bulk_create (contexts, tasks, interactions, a few uncertain effects),
not through the turn loop: what is measured is reading them. Approvals hold a deployment's
call as the turn loop records it, with the search text and summary it writes. The tenant
gets the demo agents, an operator (e-mail ``operator@<slug>.test``) and an operator API token,
printed at the end.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
      .venv/bin/python bench/inbox_seed.py --tenant inbox-bench --pending 10000 --decided 100000

Run it again with the same ``--tenant`` to start over: the tenant is deleted first.
"""

import argparse
import os
import random
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = ("approval", "approval", "approval", "question", "question", "connection")
DECIDED_STATES = ("answered", "answered", "answered", "expired", "canceled")
BATCH = 5000


def seed(*, slug: str, pending: int, decided: int, uncertain: int, rng: random.Random):
    from django.utils import timezone

    from runtime.agents.agent_models import Agent
    from runtime.agents.demo import seed_demo_agents
    from runtime.decisions.decision_models import Effect, Interaction
    from runtime.decisions.search import search_text
    from runtime.decisions.summaries import held_call_summary
    from runtime.kernel.task_models import Context, Task, TaskState
    from tenants.models import ApiToken, Membership, Tenant, User
    from tenants.tokens import api_token_create

    Tenant.objects.filter(slug=slug).delete()
    tenant = Tenant.objects.create(slug=slug, name=f"Inbox bench {slug}")
    seed_demo_agents(tenant=tenant)
    agents = list(Agent.objects.filter(tenant=tenant).order_by("slug"))
    agents_by_id = {agent.pk: agent for agent in agents}
    email = f"operator@{slug}.test"
    user = User.objects.filter(email=email).first() or User.objects.create_user(
        email=email, password=uuid.uuid4().hex
    )
    Membership.objects.create(tenant=tenant, user=user, role=Membership.Role.OPERATOR)
    _, token = api_token_create(
        tenant=tenant, subject=f"program:{slug}-ops", name="bench", kind=ApiToken.Kind.OPERATOR
    )

    now = timezone.now()
    total = pending + decided + uncertain
    # One context per 100 turns (a caller who keeps asking), spread over the agents.
    contexts = [
        Context(
            tenant=tenant,
            agent=agents[i % len(agents)],
            subject=f"partner:caller-{i % 50}",
            context_id=f"ctx-{i}",
            turns=100,
        )
        for i in range((total + 99) // 100)
    ]
    Context.objects.bulk_create(contexts, batch_size=BATCH)

    def when(i: int) -> object:
        # Pending rows are the newest (the last 7 days), decided ones the 60 days before.
        if i < pending:
            return now - timedelta(seconds=rng.uniform(0, 7 * 86400))
        return now - timedelta(seconds=rng.uniform(7 * 86400, 67 * 86400))

    tasks, interactions, effects = [], [], []
    for i in range(total):
        context = contexts[i // 100]
        created = when(i)
        is_pending, is_uncertain = i < pending, i >= pending + decided
        kind = KINDS[i % len(KINDS)]
        if is_uncertain or not is_pending:
            state = TaskState.WORKING if is_uncertain else TaskState.COMPLETED
        else:
            state = TaskState.INPUT_REQUIRED if kind == "question" else TaskState.AUTH_REQUIRED
        tasks.append(
            Task(
                public_id=f"t{i % 100 + 1}.{context.key}",
                tenant=tenant,
                agent_id=context.agent_id,
                context=context,
                wire_context_id=context.context_id,
                turn=i % 100 + 1,
                subject=context.subject,
                state=state,
                status_timestamp=created,
                created_at=created,
            )
        )
    Task.objects.bulk_create(tasks, batch_size=BATCH)
    for i, task in enumerate(tasks):
        if i >= pending + decided:
            effects.append(
                Effect(
                    public_id=f"eff-{uuid.uuid4().hex}",
                    tenant=tenant,
                    task=task,
                    step=1,
                    server="deploy",
                    tool="deploy_build",
                    arguments={"build": f"b-{i}", "environment": "staging"},
                    arguments_hash="0" * 64,
                    state=Effect.State.UNCERTAIN,
                    created_at=task.created_at,
                    sent_at=task.created_at,
                )
            )
            continue
        kind = KINDS[i % len(KINDS)]
        is_pending = i < pending
        public_id = f"ix-{uuid.uuid4().hex}"
        if kind == "approval":
            # A held deployment as the turn loop records it: the call, its
            # arguments and the policy's title; one in ten goes to production.
            environment = "production" if i % 10 == 0 else "staging"
            prompt = "Approve deploy / deploy_build?"
            detail = {"server": "deploy", "tool": "deploy_build", "reason": "bench"}
            request = {
                "step": 1,
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "arguments": {"build": f"b-{i}", "environment": environment},
                    "title": "Deploy {build} to {environment}",
                },
            }
        else:
            prompt = f"{kind} #{i}: deploy build b-{i} to staging?"
            detail = {}
            request = {"choices": ["staging", "production"]} if kind == "question" else {}
        agent = agents_by_id[task.agent_id]
        interactions.append(
            Interaction(
                public_id=public_id,
                tenant=tenant,
                task=task,
                agent_id=task.agent_id,
                kind=kind,
                prompt=prompt,
                detail=detail,
                request=request,
                search_text=search_text(
                    public_id=public_id,
                    kind=kind,
                    prompt=prompt,
                    subject=task.subject,
                    task_public_id=task.public_id,
                    agent_slug=agent.slug,
                    agent_name=agent.name,
                    detail=detail,
                    request=request,
                ),
                summary=held_call_summary(Interaction(kind=kind, detail=detail, request=request)),
                subject=task.subject,
                state="open" if is_pending else rng.choice(DECIDED_STATES),
                answer=None if is_pending else {"approved": True},
                answered_by="" if is_pending else "user:someone@bench.test",
                answered_via="" if is_pending else "page",
                answered_at=None if is_pending else task.created_at + timedelta(minutes=5),
                expires_at=now + timedelta(days=1) if is_pending else task.created_at,
                created_at=task.created_at,
            )
        )
    Interaction.objects.bulk_create(interactions, batch_size=BATCH)
    Effect.objects.bulk_create(effects, batch_size=BATCH)
    return tenant, email, token


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenant", default="inbox-bench")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--decided", type=int, default=100_000)
    parser.add_argument("--uncertain", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    call_command("migrate", verbosity=0)
    started = time.monotonic()
    with transaction.atomic():
        tenant, email, token = seed(
            slug=args.tenant,
            pending=args.pending,
            decided=args.decided,
            uncertain=args.uncertain,
            rng=random.Random(args.seed),
        )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # What autovacuum gives a settled table (migration runtime 0013): its visibility
            # map, which the open counts' index-only scan needs, and its statistics.
            cursor.execute("VACUUM (ANALYZE) runtime_interaction, runtime_task, runtime_effect")
    print(
        f"tenant {tenant.slug}: {args.pending} pending, {args.decided} decided, "
        f"{args.uncertain} uncertain effects in {time.monotonic() - started:.1f}s"
    )
    print(f"operator: {email}")
    print(f"operator token: {token}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
