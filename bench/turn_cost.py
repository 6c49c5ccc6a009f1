"""What one turn costs the worker, counted in process: SQL statements, transactions (commits)
and CPU time per turn, for each turn shape below. Counts that do not
depend on the machine's load, unlike the wall-clock benchmarks.

Seeds a tenant (a new ``bench-…`` one each run) and, for each shape, takes N messages and runs
their turns one after another in this process with ``turn_run``, as a worker thread would
(real commits, real PostgreSQL), then prints per turn: statements (and how many of them
each kind), commits, and the CPU time of this thread (``time.thread_time``; mean and p50).

- ``answer``: a scripted agent that answers at once (the smallest turn);
- ``hosted``: an agent on ``provider: openai`` against bench/stub_model.py (answers at once),
  started here: the model's HTTP round trip is in the CPU figure, as in slow_turns.py;
- ``resumed``: the demo ``deployer`` turn resumed after its held call was approved (P3's
  turn: approve, journal, send the demo deploy call, two plan updates, reply).

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench VAR_DIR=$PWD/var/bench \\
      .venv/bin/python bench/turn_cost.py 200
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from bench.waiters import free_port  # noqa: E402


class Counting:
    """A connection.execute_wrapper counting statements by their first word, and commits."""

    def __init__(self) -> None:
        self.kinds: Counter = Counter()

    def __call__(self, execute, sql, params, many, context):
        self.kinds[sql.split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)


def message(text: str) -> dict:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}


def measure(label: str, pks: list[int], run) -> None:
    from django.db import connection

    counting = Counting()
    commits = 0
    real_commit = connection.commit

    def counted_commit():
        nonlocal commits
        commits += 1
        return real_commit()

    cpu: list[float] = []
    connection.commit = counted_commit
    try:
        with connection.execute_wrapper(counting):
            for pk in pks:
                started = time.thread_time()
                run(pk)
                cpu.append((time.thread_time() - started) * 1000)
    finally:
        del connection.commit
    n = len(pks)
    kinds = ", ".join(f"{k} {v / n:g}" for k, v in counting.kinds.most_common())
    print(
        f"{label:8s} turns {n:4d}  statements/turn {sum(counting.kinds.values()) / n:5.1f}  "
        f"commits/turn {commits / n:4.1f}  CPU ms/turn mean {statistics.fmean(cpu):5.2f} "
        f"p50 {statistics.median(cpu):5.2f}\n         ({kinds})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=200, help="turns of each shape")
    parser.add_argument("--shapes", default="answer,hosted,resumed")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("DATABASE_URL must name a PostgreSQL database.")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")
    shapes = args.shapes.split(",")
    stub = None
    if "hosted" in shapes:
        port = free_port()
        stub = subprocess.Popen(
            [str(BIN / "uvicorn"), "bench.stub_model:app", "--port", str(port)]
            + ["--no-access-log", "--log-level", "warning"],
            cwd=ROOT,
            env={**os.environ, "STUB_DELAY_SECONDS": "0"},
        )
        os.environ["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
        os.environ["OPENAI_API_KEY"] = "sk-bench-stub"

    import django

    django.setup()
    import logging

    from django.conf import settings
    from django.core.management import call_command

    from runtime.agents.agentfile import AgentSpec, agent_upsert, parse_agent_file
    from runtime.agents.demo import AGENTS_DIR
    from runtime.decisions.approvers import Decider
    from runtime.decisions.decision_models import Interaction
    from runtime.decisions.flow import PAGE, Decision, decision_take
    from runtime.kernel.task_models import Task
    from runtime.turn.intake import message_send
    from runtime.turn.runner import turn_run
    from tenants.models import Tenant

    logging.disable(logging.INFO)
    call_command("migrate", verbosity=0)
    # The turns enqueued on commit go to a queue nobody reads: this process runs them.
    settings.CELERY_TASK_DEFAULT_QUEUE = f"bench-cost-{uuid.uuid4().hex[:8]}"
    from config.celery import app

    app.conf.task_always_eager = False
    tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="Bench")
    skills = [{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}]

    def agent(slug: str, model: dict):
        spec = AgentSpec(slug=slug, name=slug, description="d", skills=skills, model=model)
        return agent_upsert(tenant=tenant, spec=spec)[0]

    def take(the_agent, text: str) -> list[int]:
        return [
            message_send(
                tenant=tenant, agent=the_agent, subject="partner:bench", message=message(text)
            ).task.pk
            for _ in range(args.n)
        ]

    def run(pk: int) -> None:
        turn_run(task_pk=pk, worker_id=f"bench:{pk}")

    try:
        if stub is not None:
            import httpx

            for _ in range(100):
                try:
                    httpx.get(os.environ["OPENAI_BASE_URL"].rsplit("/v1", 1)[0] + "/stats")
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
        for shape in shapes:
            if shape == "answer":
                greeter = agent("greeter", {"provider": "scripted", "script": [
                    {"steps": [{"reply": "Hello, {{ text }}."}]}]})  # fmt: skip
                pks = take(greeter, "world")
                run(pks.pop())  # warm: imports, the connection, prepared caches
                measure("answer", pks, run)
            elif shape == "hosted":
                hosted = agent("hosted", {"provider": "openai", "model": "stub"})
                pks = take(hosted, "hi")
                run(pks.pop())
                measure("hosted", pks, run)
            elif shape == "resumed":
                deployer, _ = agent_upsert(
                    tenant=tenant, spec=parse_agent_file(AGENTS_DIR / "deployer.md")
                )
                pks = take(deployer, "deploy build 2026.10.06-1 to staging")
                for pk in pks:
                    run(pk)
                for interaction in Interaction.objects.filter(task_id__in=pks):
                    decision_take(
                        tenant=tenant,
                        interaction_id=interaction.public_id,
                        decider=Decider(subject="user:bench@example.test"),
                        decision=Decision(approved=True),
                        channel=PAGE,
                    )
                run(pks.pop())
                measure("resumed", pks, run)
        states = Counter(
            Task.objects.filter(tenant=tenant).values_list("state", flat=True)
        )  # every turn ended as it should
        print(f"end states: {dict(states)}")
    finally:
        if stub is not None:
            stub.terminate()
            stub.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
