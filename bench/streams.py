"""How many open SSE streams can one web process hold, and how late do their events arrive?

Starts one uvicorn process and one Celery worker on PostgreSQL, seeds the demo tenant, and
opens N concurrent SendStreamingMessage streams to the demo deployer ("deploy build N to
staging"). Each turn stops at the operator's approval (AUTH_REQUIRED) and its stream stays
open. When every stream is open and held, the script approves all N deploys with the
service layer (as the task page does), and each stream receives its task's WORKING and
COMPLETED updates. It reports:

- the web process's RSS before, with N streams open, and its peak (VmHWM), and its threads;
- for each status update received after the approvals, the delay from the task's change (the
  status timestamp the change wrote) to the event arriving on the stream: p50 / p99 / max;
- errors, by kind.

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/streams.py 500
"""

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.waiters import free_port, percentile, proc_status, start_stack  # noqa: E402


def seed() -> dict:
    import django

    django.setup()
    from io import StringIO

    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    out = StringIO()
    call_command("seed_demo", "--json", stdout=out)
    return json.loads(out.getvalue())


def approve_all(tenant_slug: str, task_ids: list[str]) -> float:
    """The operator approves every held deploy (runtime.decisions.flow)."""
    from django.db import connection

    from runtime.decisions.approvers import Decider
    from runtime.decisions.decision_models import Interaction
    from runtime.decisions.flow import PAGE, Decision, decision_take
    from tenants.models import Tenant

    tenant = Tenant.objects.get(slug=tenant_slug)
    open_ = dict(
        Interaction.objects.filter(
            task__public_id__in=task_ids, state=Interaction.State.OPEN
        ).values_list("task__public_id", "public_id")
    )
    started = time.monotonic()
    for task_id in task_ids:
        decision_take(
            tenant=tenant,
            interaction_id=open_[task_id],
            decider=Decider(subject="user:operator@demo.test"),
            decision=Decision(approved=True),
            channel=PAGE,
        )
    connection.close()
    return time.monotonic() - started


def timestamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def run(url: str, token: str, n: int, tenant_slug: str, web_pid: int):
    import httpx

    limits = httpx.Limits(max_connections=n + 16, max_keepalive_connections=n + 16)
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    held = asyncio.Event()
    held_ids: list[str] = []
    delays: list[float] = []
    errors: Counter = Counter()
    finals: Counter = Counter()

    async with httpx.AsyncClient(
        limits=limits, headers=headers, timeout=httpx.Timeout(900, connect=60)
    ) as client:

        async def one(i: int):
            body = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "SendStreamingMessage",
                "params": {
                    "message": {
                        "messageId": str(uuid.uuid4()),
                        "role": "ROLE_USER",
                        "parts": [{"text": f"deploy build 2026.11.{i} to staging"}],
                    }
                },
            }
            approved = False
            try:
                async with client.stream("POST", url, json=body) as response:
                    if not response.headers.get("content-type", "").startswith("text/event-stream"):
                        await response.aread()
                        errors[f"not a stream: {response.text[:80]}"] += 1
                        return
                    async for line in response.aiter_lines():
                        if not line.startswith("data: "):
                            continue
                        received = time.time()
                        message = json.loads(line[6:])
                        if "error" in message:
                            errors[message["error"]["message"][:80]] += 1
                            return
                        update = message["result"].get("statusUpdate")
                        if update is None:
                            continue
                        state = update["status"]["state"]
                        if approved:
                            delays.append(
                                (received - timestamp(update["status"]["timestamp"])) * 1000
                            )
                            finals[state] += 1
                        if state == "TASK_STATE_AUTH_REQUIRED" and not approved:
                            approved = True
                            held_ids.append(update["taskId"])
                            if len(held_ids) == n:
                                held.set()
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1

        streams = [asyncio.create_task(one(i)) for i in range(n)]
        started = time.monotonic()
        waiting = asyncio.create_task(held.wait())
        done, _ = await asyncio.wait(
            [waiting, asyncio.gather(*streams)], return_when=asyncio.FIRST_COMPLETED
        )
        if waiting not in done:
            return {"errors": errors, "held": len(held_ids)}
        opened = time.monotonic() - started
        with_streams = proc_status(web_pid)
        approving = await asyncio.to_thread(approve_all, tenant_slug, list(held_ids))
        await asyncio.gather(*streams)
        return {
            "errors": errors,
            "held": len(held_ids),
            "opened": opened,
            "approving": approving,
            "with_streams": with_streams,
            "delays": delays,
            "finals": finals,
            "wall": time.monotonic() - started,
        }


def main() -> int:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=500, help="concurrent streams")
    parser.add_argument("--worker-concurrency", type=int, default=4)
    parser.add_argument("--pool-max", type=int, default=10, help="web DATABASE_POOL_MAX_SIZE")
    parser.add_argument(
        "--web-nofile",
        type=int,
        default=1024,
        help="the web process's soft open-files limit at start (systemd's default: 1024)",
    )
    args = parser.parse_args()

    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("DATABASE_URL must name a PostgreSQL database (LISTEN/NOTIFY wake-ups).")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("DEMO_OPERATOR_PASSWORD", "bench-" + uuid.uuid4().hex)
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))

    demo = seed()
    logdir = Path(tempfile.mkdtemp(prefix="bench-streams-"))
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_POOL": "true",
        "DATABASE_POOL_MAX_SIZE": str(args.pool_max),
        "A2A_STREAMS_PER_TOKEN": str(args.n + 10),
        "A2A_STREAMS_PER_PROCESS": str(args.n + 10),
        "CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
    }
    # The operator's approvals (made here) start the resumed turns on the bench's queue.
    from django.conf import settings

    settings.CELERY_TASK_DEFAULT_QUEUE = env["CELERY_QUEUE"]
    web, worker = start_stack(env, port, logdir, args.worker_concurrency, args.web_nofile)
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                samples.append(proc_status(web.pid))
            except OSError:
                return
            stop.wait(0.25)

    try:
        before = proc_status(web.pid)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        url = f"http://127.0.0.1:{port}{demo['agents']['deployer']}"
        result = asyncio.run(run(url, demo["token"], args.n, demo["tenant"], web.pid))
        stop.set()
        sampler.join()
        after = proc_status(web.pid)
    finally:
        stop.set()
        web.terminate()
        os.killpg(worker.pid, signal.SIGTERM)
        web.wait(30)
        worker.wait(60)

    errors = result["errors"]
    print(f"streams: {args.n}   held at the approval: {result['held']}   logs: {logdir}")
    if "opened" not in result:
        print(f"not every stream reached the approval; errors: {dict(errors) or 0}")
        return 1
    print(
        f"all open and held after {result['opened']:.1f}s; approvals took "
        f"{result['approving']:.1f}s; wall time {result['wall']:.1f}s"
    )
    print(f"updates after the approval: {dict(result['finals'])}   errors: {dict(errors) or 0}")
    print(
        f"web RSS: before {before['VmRSS'] / 1024:.0f} MiB, with {args.n} streams open "
        f"{result['with_streams']['VmRSS'] / 1024:.0f} MiB, peak (VmHWM) "
        f"{after['VmHWM'] / 1024:.0f} MiB; threads max {max(s['Threads'] for s in samples)}"
    )
    delays = result["delays"]
    if delays:
        print(
            "task change -> event on the stream (ms): "
            f"p50 {statistics.median(delays):.0f}  p99 {percentile(delays, 99):.0f}  "
            f"max {max(delays):.0f}  (n={len(delays)})"
        )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
