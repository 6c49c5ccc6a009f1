"""SQL queries and CPU of notifications' beat work over a seeded inbox: the lost fan-out sweep
and a quiet ladder beat (nothing due), as counts that do not depend on the machine's load.

Seed first (bench/inbox_seed.py), then, against the same database:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
      .venv/bin/python bench/notify_sweeps.py --tenant inbox-bench

It marks and unmarks fan-outs and sets (then clears) an AGENT.md ladder on the tenant's
deployer, so run it on a bench database only. Wall times are printed too; on a loaded
machine read the queries and the CPU seconds (this process's rusage).
"""

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(label: str, fn) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        result = fn()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    found = len(result) if isinstance(result, list) else result
    print(f"{label:48} result={found:<5} queries={len(queries):<3} cpu={cpu:.3f}s wall={wall:.3f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenant", default="inbox-bench")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from notifications.models import FanOut
    from notifications.services import fan_outs_missing, ladders_advance
    from runtime.agents.agent_models import Agent
    from runtime.decisions.decision_models import Interaction
    from runtime.policy.ladders import ladder_parse

    open_items = Interaction.objects.filter(tenant__slug=args.tenant, state="open")
    print(f"{open_items.count()} open interactions in {args.tenant}")
    FanOut.objects.filter(tenant__slug=args.tenant).delete()
    measure("fan_outs_missing: none fanned out (limit 500)", fan_outs_missing)
    FanOut.objects.bulk_create(
        [
            FanOut(interaction_id=pk, tenant_id=t)
            for pk, t in open_items.values_list("pk", "tenant_id")
        ],
        batch_size=5000,
    )
    measure("fan_outs_missing: every one fanned out", fan_outs_missing)
    FanOut.objects.filter(tenant__slug=args.tenant).delete()

    deployer = Agent.objects.get(tenant__slug=args.tenant, slug="deployer")
    deployer.ladder = ladder_parse(
        {"steps": ["remind after 900d"], "tools": {"deploy/deploy_build": ["remind after 800d"]}}
    )
    deployer.save(update_fields=["ladder"])
    try:
        measure("ladders_advance: a quiet beat", ladders_advance)
    finally:
        deployer.ladder = {}
        deployer.save(update_fields=["ladder"])


if __name__ == "__main__":
    main()
