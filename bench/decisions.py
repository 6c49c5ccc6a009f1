"""Decision latency: from an operator's REST decision to a terminal task.

Starts one uvicorn process and one Celery worker on PostgreSQL and Redis, seeds a tenant with
the demo `deployer` agent, a partner token and an operator token, and pauses N deployer tasks
on their held `deploy / deploy_build` call (blocking SendMessage, TASK_STATE_AUTH_REQUIRED).
Then, one decision at a time: POST /api/v1/interactions/<id>/answer {"approved": true} with
the operator token, and GetTask (JSON-RPC, back to back) until the task is terminal. Prints
p50 / p99 / max of the time from sending the POST to the first GetTask that shows the
terminal state, and where that time went, from the rows the run left behind:

- POST: the answer's round trip (the decision committed, the turn enqueued);
- pickup: from the decision (interaction.answered_at) to the worker starting the resumed run
  (its ``runs[].startedAt``), split at the decision's receipt (the last row its transaction
  writes): the rest of the decision's writes, then its commit, the broker, the worker's
  pickup and the claim's locked read;
- turn: from that start to the terminal status (``status_timestamp``);
- seen: from the terminal status to the GetTask that showed it (the poll's own delay).

Then the CPU time the web server spent per decision on the POST and on the GetTasks, and the
worker's (from /proc, which the machine's load skews far less than the milliseconds above).
The worker uses psycopg's pool, as deployed (docs/explanation/workers.md). ``--profile DIR`` records
both processes with py-spy (``--profile-idle``: their waits too).

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/decisions.py 200
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from bench.waiters import free_port, percentile, wait_until  # noqa: E402

TERMINAL = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}


def seed():
    import django

    django.setup()
    from django.core.management import call_command

    from runtime.agents.agentfile import agent_upsert, parse_agent_file
    from runtime.agents.demo import AGENTS_DIR
    from tenants.models import ApiToken, Tenant
    from tenants.tokens import api_token_create

    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="Bench")
    agent, _ = agent_upsert(tenant=tenant, spec=parse_agent_file(AGENTS_DIR / "deployer.md"))
    _, partner = api_token_create(tenant=tenant, subject="partner:bench", name="bench")
    _, operator = api_token_create(
        tenant=tenant, subject="program:bench-ops", name="ops", kind=ApiToken.Kind.OPERATOR
    )
    return tenant, agent, partner, operator


def start_stack(env: dict, port: int, logdir: Path, worker_concurrency: int):
    web = subprocess.Popen(
        [
            str(BIN / "uvicorn"),
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
        stdout=open(logdir / "web.log", "ab"),
        stderr=subprocess.STDOUT,
    )
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
        env=env,
        stdout=open(logdir / "worker.log", "ab"),
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


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far, user and system (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile_start(
    outdir: str | None, web_pid: int, worker_pid: int, idle: bool, gil: bool = False
) -> list:
    """py-spy on the web server and the worker while the decisions run (--profile DIR): their
    collapsed stacks in DIR/web.txt and DIR/worker.txt; with ``idle`` the waits too (a wait
    is latency as much as work is); with ``gil`` only the thread holding the GIL (the CPU)."""
    if not outdir:
        return []
    Path(outdir).mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [
                os.environ.get("PYSPY") or str(BIN / "py-spy"),
                "record",
                "-p",
                str(pid),
                "-r",
                "200",
                *(["--idle"] if idle else []),
                *(["--gil"] if gil else []),
                "--nonblocking",
                "-f",
                "raw",
                "-o",
                str(Path(outdir) / f"{name}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in (("web", web_pid), ("worker", worker_pid))
    ]


def profile_stop(profilers: list) -> None:
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    for profiler in profilers:
        profiler.wait(60)


def rpc(client, url: str, method: str, params: dict) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    payload = client.post(url, json=body).json()
    if "error" in payload:
        raise RuntimeError(f"{method}: {payload['error']}")
    return payload["result"]


def pause_tasks(base: str, a2a: str, partner: str, n: int, parallel: int) -> list[str]:
    """N deployer tasks, each paused on its held deploy call (blocking SendMessage)."""
    import httpx

    headers = {"Authorization": f"Bearer {partner}", "A2A-Version": "1.0"}

    def one(i: int) -> str:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            message = {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": f"deploy build bench-{i} to staging"}],
            }
            task = rpc(client, a2a, "SendMessage", {"message": message})["task"]
            state = task["status"]["state"]
            if state != "TASK_STATE_AUTH_REQUIRED":
                raise RuntimeError(f"task {task['id']} is {state}, not paused on its approval")
            return task["id"]

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, range(n)))


def main() -> int:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=200, help="decisions")
    parser.add_argument("--worker-concurrency", type=int, default=1)
    parser.add_argument("--poll-ms", type=float, default=1.0, help="pause between GetTasks")
    parser.add_argument("--profile", metavar="DIR", help="py-spy the web and the worker into DIR")
    parser.add_argument("--profile-idle", action="store_true", help="--profile with the waits")
    parser.add_argument(
        "--profile-gil", action="store_true", help="--profile of the thread holding the GIL only"
    )
    parser.add_argument(
        "--port", type=int, default=0, help="the web server's (default: a free one)"
    )
    args = parser.parse_args()

    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("DATABASE_URL must name a PostgreSQL database.")
        return 2
    if not os.environ.get("CELERY_BROKER_URL", "").startswith("redis://"):
        print("CELERY_BROKER_URL must name a Redis database.")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The seeding here and the server must agree on the key (tokens are hashed with it).
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    os.environ["SECURE_SSL_REDIRECT"] = "false"

    tenant, agent, partner, operator = seed()
    logdir = Path(tempfile.mkdtemp(prefix="bench-decisions-"))
    port = args.port or free_port()
    env = {
        **os.environ,
        "A2A_WAIT_MS": "120000",
        # A queue of its own, so that no other worker on the broker takes these turns.
        "CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
    }
    web, worker = start_stack(env, port, logdir, args.worker_concurrency)
    base = f"http://127.0.0.1:{port}"
    a2a = f"/a2a/{tenant.slug}/{agent.slug}"
    import httpx

    samples = []  # (task id, interaction id, POST ms, total ms, seen at (epoch))
    post_cpu, polls = 0.0, 0
    try:
        started = time.monotonic()
        task_ids = pause_tasks(base, a2a, partner, args.n, parallel=8)
        print(f"paused {len(task_ids)} tasks in {time.monotonic() - started:.1f}s")
        operator_client = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {operator}"}, timeout=30
        )
        partner_client = httpx.Client(
            base_url=base,
            headers={"Authorization": f"Bearer {partner}", "A2A-Version": "1.0"},
            timeout=30,
        )
        interaction_of = {}
        url = "/api/v1/interactions?state=open&limit=200"
        while url:
            page = operator_client.get(url).json()
            interaction_of.update({row["taskId"]: row["id"] for row in page["results"]})
            url = page["next"]
        profilers = profile_start(
            args.profile, web.pid, worker.pid, args.profile_idle, args.profile_gil
        )
        web_cpu, worker_cpu = cpu_seconds(web.pid), cpu_seconds(worker.pid)
        for task_id in task_ids:
            interaction_id = interaction_of[task_id]
            before_post = cpu_seconds(web.pid)
            sent = time.perf_counter()
            response = operator_client.post(
                f"/api/v1/interactions/{interaction_id}/answer", json={"approved": True}
            )
            answered = time.perf_counter()
            post_cpu += cpu_seconds(web.pid) - before_post
            if response.status_code != 200:
                raise RuntimeError(f"answer: HTTP {response.status_code} {response.text[:200]}")
            deadline = sent + 30
            while True:
                task = rpc(partner_client, a2a, "GetTask", {"id": task_id})
                polls += 1
                if task["status"]["state"] in TERMINAL:
                    done = time.perf_counter()
                    seen_at = time.time()
                    break
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"task {task_id} did not end within 30 s")
                time.sleep(args.poll_ms / 1000)
            samples.append(
                (task_id, interaction_id, (answered - sent) * 1000, (done - sent) * 1000, seen_at)
            )
        web_cpu = cpu_seconds(web.pid) - web_cpu
        worker_cpu = cpu_seconds(worker.pid) - worker_cpu
        profile_stop(profilers)
    finally:
        web.terminate()
        os.killpg(worker.pid, signal.SIGTERM)
        web.wait(30)
        worker.wait(60)

    from django.db import connection
    from django.utils.dateparse import parse_datetime

    from runtime.decisions.decision_models import Interaction, Receipt
    from runtime.kernel.task_models import Task

    connection.close()
    tasks = {t.public_id: t for t in Task.objects.filter(tenant=tenant)}
    answered_at = dict(
        Interaction.objects.filter(tenant=tenant).values_list("public_id", "answered_at")
    )
    # The decision's receipt is the last row its transaction writes: its time splits the
    # pickup into the rest of the decision's transaction and what follows the commit.
    receipt_at = dict(
        Receipt.objects.filter(tenant=tenant, channel="rest").values_list(
            "interaction_public_id", "created_at"
        )
    )
    totals = [s[3] for s in samples]
    posts = [s[2] for s in samples]
    pickups, writes, after_writes, turns, seen = [], [], [], [], []
    for task_id, interaction_id, _, _, seen_at in samples:
        task = tasks[task_id]
        resumed = [r for r in task.runs if r.get("interactionId") == interaction_id]
        start = parse_datetime(resumed[-1]["startedAt"]) if resumed else None
        if start is not None and answered_at.get(interaction_id):
            pickups.append((start - answered_at[interaction_id]).total_seconds() * 1000)
            turns.append((task.status_timestamp - start).total_seconds() * 1000)
            if interaction_id in receipt_at:
                receipt = receipt_at[interaction_id]
                writes.append((receipt - answered_at[interaction_id]).total_seconds() * 1000)
                after_writes.append((start - receipt).total_seconds() * 1000)
        seen.append((seen_at - task.status_timestamp.timestamp()) * 1000)

    def line(name: str, values: list[float]) -> str:
        if not values:
            return f"{name:28} (no samples)"
        return (
            f"{name:28} p50 {statistics.median(values):7.1f}  p99 {percentile(values, 99):7.1f}"
            f"  max {max(values):7.1f}  (n={len(values)})"
        )

    states = {t.state for t in tasks.values()}
    print(f"decisions: {len(samples)}   task states: {sorted(states)}   logs: {logdir}")
    print(line("POST -> terminal seen (ms)", totals))
    print(line("  POST answer (ms)", posts))
    print(line("  decided -> run started", pickups))
    print(line("    decided -> receipt", writes))
    print(line("    receipt -> run started", after_writes))
    print(line("  run started -> terminal", turns))
    print(line("  terminal -> GetTask saw it", seen))
    if samples:
        n = len(samples)
        print(
            f"CPU per decision (ms): web POST {post_cpu / n * 1000:.1f}, "
            f"web GetTasks {(web_cpu - post_cpu) / n * 1000:.1f} ({polls / n:.1f} GetTasks), "
            f"worker {worker_cpu / n * 1000:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
