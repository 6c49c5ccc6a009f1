"""How many blocking SendMessage callers can one web process hold, and how late are they woken?

Starts one uvicorn process and one Celery worker on PostgreSQL, seeds a tenant, a token and
an agent whose scripted model waits a moment and then asks a question (so every turn settles
in INPUT_REQUIRED), fires N concurrent blocking SendMessage calls, and reports:

- the web process's peak RSS (VmHWM from /proc; sampled VmRSS too),
- for each call, the delay between the task settling (its status timestamp, read from the
  database afterwards) and the caller receiving the answer: p50 / p95 / max,
- errors, by kind.

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/waiters.py 1000
"""

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (kB) and Threads of a process, from /proc (psutil is not a dependency)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(value.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def seed(wait_seconds: float):
    import django

    django.setup()
    from django.core.management import call_command

    from runtime.agents.agentfile import AgentSpec, agent_upsert
    from tenants.models import Tenant
    from tenants.tokens import api_token_create

    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="Bench")
    spec = AgentSpec(
        slug="waiter",
        name="waiter",
        description="Waits a moment, then asks a question.",
        skills=[{"id": "ask", "name": "Ask", "description": "Asks.", "tags": [], "examples": []}],
        model={
            "provider": "scripted",
            "script": [
                {
                    "steps": [
                        {"wait": wait_seconds},
                        {"ask": {"id": "base", "prompt": "Which base branch?"}},
                    ]
                }
            ],
        },
    )
    agent, _ = agent_upsert(tenant=tenant, spec=spec)
    _, token = api_token_create(tenant=tenant, subject="partner:bench", name="bench")
    return tenant, agent, token


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def start_stack(env: dict, port: int, logdir: Path, worker_concurrency: int, web_nofile: int):
    def open_files_lowered():
        # As systemd starts a service (soft limit 1,024): the web process must raise its own.
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(web_nofile, hard), hard))

    web = subprocess.Popen(
        [
            str(BIN / "uvicorn"),
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            # Room for every waiter: uvicorn answers 503 past --limit-concurrency, and the
            # listen backlog must hold a burst of connects.
            "--limit-concurrency",
            "4096",
            "--backlog",
            "2048",
            "--timeout-keep-alive",
            "600",
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
        stdout=open(logdir / "web.log", "ab"),
        stderr=subprocess.STDOUT,
        preexec_fn=open_files_lowered,
    )
    worker_log = logdir / "worker.log"
    worker = subprocess.Popen(
        [
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "--loglevel",
            "WARNING",
            "--concurrency",
            str(worker_concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env={**env, "DATABASE_POOL": "false"},
        stdout=open(worker_log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    import httpx

    def web_up():
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(web_up, 60, "the web server")
    return web, worker


async def fire(url: str, token: str, n: int, timeout: float):
    from rawclient import CallError, post_json, send_message_body

    async def one(i: int):
        body = send_message_body(i, str(uuid.uuid4()), f"review diff {i}")
        try:
            status, payload, sent, received = await post_json(
                url, token, body, timeout=timeout, headers={"X-Bench-Id": str(i)}
            )
        except CallError as exc:
            return {"error": str(exc)}
        if status != 200 or payload is None:
            return {"error": f"HTTP {status}"}
        if "error" in payload:
            return {"error": payload["error"].get("message", "error")[:80]}
        task = payload["result"]["task"]
        return {
            "task": task["id"],
            "state": task["status"]["state"],
            "at": received,
            "sent": sent,
            "i": i,
        }

    started = time.monotonic()
    results = await asyncio.gather(*(one(i) for i in range(n)))
    return results, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=1000, help="concurrent callers")
    parser.add_argument("--wait", type=float, default=0.1, help="the model's wait, seconds")
    parser.add_argument("--worker-concurrency", type=int, default=4)
    parser.add_argument("--pool-max", type=int, default=10, help="web DATABASE_POOL_MAX_SIZE")
    parser.add_argument(
        "--web-nofile",
        type=int,
        default=1024,
        help="the web process's soft open-files limit at start (systemd's default: 1024)",
    )
    parser.add_argument("--dump", help="write each answered call's times (JSON) to this file")
    args = parser.parse_args()

    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("DATABASE_URL must name a PostgreSQL database (LISTEN/NOTIFY wake-ups).")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The seeding here and the server must agree on the key (tokens are hashed with it).
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DEBUG"] = "false"  # DEBUG keeps every query in memory: not what we measure
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))

    tenant, agent, token = seed(args.wait)
    logdir = Path(tempfile.mkdtemp(prefix="bench-waiters-"))
    port = free_port()
    env = {
        **os.environ,
        "A2A_WAIT_MS": "600000",
        "DATABASE_POOL": "true",
        "DATABASE_POOL_MAX_SIZE": str(args.pool_max),
        # A queue of its own, so that no other worker on the broker takes these turns.
        "CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
    }
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
        url = f"http://127.0.0.1:{port}/a2a/{tenant.slug}/{agent.slug}"
        from rawclient import loop_policy_install

        loop_policy_install()
        results, elapsed = asyncio.run(fire(url, token, args.n, timeout=900))
        stop.set()
        sampler.join()
        after = proc_status(web.pid)
    finally:
        stop.set()
        web.terminate()
        os.killpg(worker.pid, signal.SIGTERM)
        web.wait(30)
        worker.wait(60)

    from django.db import connection

    from runtime.kernel.task_models import Task

    connection.close()
    rows = Task.objects.filter(tenant=tenant).values_list(
        "public_id", "status_timestamp", "created_at", "pk"
    )
    settled = {public_id: at for public_id, at, _, _ in rows}
    pks = {public_id: pk for public_id, _, _, pk in rows}
    created = {public_id: at for public_id, _, at, _ in rows}
    # The intake: until the web process has taken the last call's message (its task made).
    intake_end = max((created for _, _, created, _ in rows), default=None)
    errors = Counter(r["error"] for r in results if "error" in r)
    states = Counter(r["state"] for r in results if "state" in r)
    answered = [r for r in results if "task" in r and r["state"] == "TASK_STATE_INPUT_REQUIRED"]
    delays = [(r["at"] - settled[r["task"]].timestamp()) * 1000 for r in answered]
    after_intake = [
        (r["at"] - settled[r["task"]].timestamp()) * 1000
        for r in answered
        if intake_end is not None and settled[r["task"]] > intake_end
    ]
    during_intake = [
        (r["at"] - settled[r["task"]].timestamp()) * 1000
        for r in answered
        if intake_end is not None and settled[r["task"]] <= intake_end
    ]
    print(f"callers: {args.n}   wall time: {elapsed:.1f}s   logs: {logdir}")
    print(f"answers: {dict(states)}   errors: {dict(errors) or 0}")
    print(
        f"web RSS: before {before['VmRSS'] / 1024:.0f} MiB, peak (VmHWM) "
        f"{after['VmHWM'] / 1024:.0f} MiB, max sampled "
        f"{max(s['VmRSS'] for s in samples) / 1024:.0f} MiB; threads max "
        f"{max(s['Threads'] for s in samples)}; open files max {max(s['fds'] for s in samples)}"
    )
    if delays:
        print(
            "settled -> caller answered (ms): "
            f"p50 {statistics.median(delays):.0f}  p95 {percentile(delays, 95):.0f}  "
            f"p99 {percentile(delays, 99):.0f}  max {max(delays):.0f}  (n={len(delays)})"
        )
    if after_intake:
        print(
            "  of those settled after the last call was taken in: "
            f"p50 {statistics.median(after_intake):.0f}  p99 {percentile(after_intake, 99):.0f}  "
            f"max {max(after_intake):.0f}  (n={len(after_intake)})"
        )
    if during_intake:
        print(
            "  of those settled while calls were still being taken in: "
            f"p50 {statistics.median(during_intake):.0f}  "
            f"p90 {percentile(during_intake, 90):.0f}  max {max(during_intake):.0f}  "
            f"(n={len(during_intake)})"
        )
    if intake_end is not None and answered:
        first_sent = min(r["sent"] for r in answered)
        print(
            f"intake: the last task was made {intake_end.timestamp() - first_sent:.1f}s after the first call"
        )
    if args.dump:
        Path(args.dump).write_text(
            json.dumps(
                [
                    {
                        **r,
                        "settled": settled[r["task"]].timestamp(),
                        "created": created[r["task"]].timestamp(),
                        "pk": pks[r["task"]],
                    }
                    for r in answered
                ]
            )
        )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
