"""An approval gate's allowed call beside an agent's plain reply: requests per second.

Starts one uvicorn process and one Celery worker on PostgreSQL (bench/waiters.py's stack),
seeds a tenant with two agents and a partner token, and for a fixed time keeps C concurrent
callers sending blocking SendMessage requests (A2A 1.0 JSON-RPC) to one of them:

- **gate**: an approval gate whose policy allows ``docs/search`` outright: each request is a
  turn that journals the call, "sends" it in the worker's process, writes and signs a receipt
  (EdDSA) and ends COMPLETED with the receipt artifact;
- **reply**: a scripted agent that replies at once (no call, no receipt): the same intake,
  claim, turn and wake-up, the baseline.

It prints, per phase, the completed requests per second, p50 / p95 latency and errors. The
difference is the cost of the gate's call and its signed receipt.

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/gate_allow.py -c 16 -d 10
"""

import argparse
import asyncio
import os
import resource
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from waiters import free_port, percentile, start_stack  # noqa: E402

GATE_POLICY = {"docs/search": "allow"}


def seed():
    import django

    django.setup()
    from django.core.management import call_command

    from runtime.agents.agentfile import AgentSpec, agent_upsert
    from tenants.models import Tenant
    from tenants.tokens import api_token_create

    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="Bench")
    skill = [{"id": "go", "name": "Go", "description": "Goes.", "tags": [], "examples": []}]
    agent_upsert(
        tenant=tenant,
        spec=AgentSpec(
            slug="gate",
            name="gate",
            description="An approval gate that allows docs/search.",
            skills=skill,
            model={"provider": "gate"},
            tool_policy=GATE_POLICY,
        ),
    )
    agent_upsert(
        tenant=tenant,
        spec=AgentSpec(
            slug="reply",
            name="reply",
            description="Replies at once.",
            skills=skill,
            model={"provider": "scripted", "script": [{"steps": [{"reply": "done"}]}]},
        ),
    )
    _, token = api_token_create(tenant=tenant, subject="partner:bench", name="bench")
    return tenant, token


def body(i: int, gate: bool) -> dict:
    parts = (
        [{"data": {"tool": "docs/search", "arguments": {"query": f"q{i}"}}}]
        if gate
        else [{"text": f"hello {i}"}]
    )
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
    return {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}}


async def phase(url: str, token: str, gate: bool, concurrency: int, seconds: float):
    from rawclient import CallError, post_json

    latencies: list[float] = []
    errors: Counter = Counter()
    states: Counter = Counter()
    deadline = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def caller():
        while time.monotonic() < deadline:
            i = next(counter)
            started = time.monotonic()
            try:
                status, payload, _, _ = await post_json(url, token, body(i, gate), timeout=60)
            except CallError as exc:
                errors[str(exc)[:60]] += 1
                continue
            if status != 200 or payload is None or "error" in payload:
                errors[f"HTTP {status}"] += 1
                continue
            task = payload["result"]["task"]
            states[task["status"]["state"]] += 1
            if gate and not any(a["name"] == "receipt" for a in task.get("artifacts", [])):
                errors["no receipt"] += 1
            latencies.append((time.monotonic() - started) * 1000)

    started = time.monotonic()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return latencies, states, errors, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--concurrency", type=int, default=16)
    parser.add_argument("-d", "--duration", type=float, default=10, help="seconds per phase")
    parser.add_argument("--worker-concurrency", type=int, default=4)
    args = parser.parse_args()

    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("DATABASE_URL must name a PostgreSQL database (LISTEN/NOTIFY wake-ups).")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))

    tenant, token = seed()
    logdir = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    port = free_port()
    env = {
        **os.environ,
        "A2A_WAIT_MS": "60000",
        "DATABASE_POOL": "true",
        "CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
    }
    web, worker = start_stack(env, port, logdir, args.worker_concurrency, 4096)
    try:
        from rawclient import loop_policy_install

        loop_policy_install()
        base = f"http://127.0.0.1:{port}/a2a/{tenant.slug}"
        # Warm both paths (imports, caches, the signing key) before measuring.
        asyncio.run(phase(f"{base}/gate", token, True, 2, 1))
        asyncio.run(phase(f"{base}/reply", token, False, 2, 1))
        print(f"concurrency {args.concurrency}, {args.duration:.0f}s per phase, logs {logdir}")
        for name, slug, gate in (("gate allow", "gate", True), ("reply", "reply", False)):
            latencies, states, errors, elapsed = asyncio.run(
                phase(f"{base}/{slug}", token, gate, args.concurrency, args.duration)
            )
            rate = len(latencies) / elapsed if elapsed else 0
            p50 = percentile(latencies, 50) if latencies else 0
            p95 = percentile(latencies, 95) if latencies else 0
            print(
                f"{name:>10}: {rate:7.1f} req/s  p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  "
                f"states {dict(states)}  errors {dict(errors) or 0}"
            )
    finally:
        web.terminate()
        os.killpg(worker.pid, signal.SIGTERM)
        web.wait(30)
        worker.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
