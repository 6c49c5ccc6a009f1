"""How many turns waiting on a slow model does one worker process hold at once?

Starts the stub model (bench/stub_model.py: every Chat Completions request answered after
``--delay`` seconds) and ONE Celery worker process (``--pool``/``--concurrency``), seeds a
tenant with an agent on ``provider: openai`` (model ``stub``; the worker finds the stub through
``OPENAI_BASE_URL`` and its key in ``OPENAI_API_KEY``, as a single-tenant install does), takes
N messages (turns queued, not yet published to the worker), then publishes all N turns at once
and reports:

- the wall time from publishing to the last turn ending, and the turns' end states;
- the worker's peak RSS: the most its processes (the main one and, for prefork, its
  children) held together, sampled every 0.25 s, and the sum of their VmHWM;
- the stub's most requests held at once.

``--model scripted`` uses a scripted agent that waits ``--delay`` seconds (``wait`` step) and
replies instead: no model, no network, but the same waiting thread; use it to check the stack
when the openai provider is not there.

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/9 VAR_DIR=$PWD/var/bench \\
      .venv/bin/python bench/slow_turns.py 500 --pool threads --concurrency 200
"""

import argparse
import logging
import os
import resource
import signal
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

from bench.waiters import free_port, wait_until  # noqa: E402


def group_memory(pgid: int) -> tuple[int, int, int]:
    """(sum of VmRSS, sum of VmHWM, processes) in kB over the worker's process group."""
    rss = hwm = count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # field 5 of stat, the process group
                continue
            status = (stat.parent / "status").read_text()
        except (OSError, IndexError, ValueError):
            continue
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key == "VmRSS":
                rss += int(value.split()[0])
            elif key == "VmHWM":
                hwm += int(value.split()[0])
        count += 1
    return rss, hwm, count


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of the worker's process group (its live processes)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def seed(model: str, delay: float):
    import django

    django.setup()
    from django.core.management import call_command

    from runtime.agents.agentfile import AgentSpec, agent_upsert
    from tenants.models import Tenant

    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="Bench")
    if model == "openai":
        mapping = {"provider": "openai", "model": "stub", "credential": "OPENAI_API_KEY"}
    else:
        mapping = {
            "provider": "scripted",
            "script": [{"steps": [{"wait": delay}, {"reply": "Done thinking."}]}],
        }
    spec = AgentSpec(
        slug="thinker",
        name="thinker",
        description="Thinks for a while, then answers.",
        skills=[{"id": "think", "name": "Think", "description": "d", "tags": [], "examples": []}],
        model=mapping,
        instructions="Answer in one sentence.",
    )
    agent, _ = agent_upsert(tenant=tenant, spec=spec)
    return tenant, agent


def take_messages(tenant, agent, n: int, hold_queue: str) -> list[int]:
    """N messages, each a new task; their turns go to a queue no worker reads."""
    from django.conf import settings

    from runtime.turn.intake import message_send

    settings.CELERY_TASK_DEFAULT_QUEUE = hold_queue
    pks = []
    for i in range(n):
        message = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": f"think about {i}"}],
        }
        result = message_send(tenant=tenant, agent=agent, subject="partner:bench", message=message)
        pks.append(result.task.pk)
    return pks


def start_stub(port: int, delay: float, logdir: Path) -> subprocess.Popen:
    stub = subprocess.Popen(
        [
            str(BIN / "uvicorn"),
            "bench.stub_model:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--backlog",
            "2048",
            "--timeout-keep-alive",
            "600",
        ],
        cwd=ROOT,
        env={**os.environ, "STUB_DELAY_SECONDS": str(delay)},
        stdout=open(logdir / "stub.log", "ab"),
        stderr=subprocess.STDOUT,
    )
    import httpx

    def up():
        try:
            return httpx.get(f"http://127.0.0.1:{port}/stats", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, 30, "the stub model")
    return stub


def start_worker(env: dict, pool: str, concurrency: int, logdir: Path) -> subprocess.Popen:
    log = logdir / "worker.log"
    worker = subprocess.Popen(
        [
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "--loglevel",
            "INFO",
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        # Celery cannot tell `--pool prefork` from its default and then takes the setting
        # instead: name the pool in the setting too.
        env={**env, "CELERY_WORKER_POOL": pool},
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the prefork children are counted
    )
    wait_until(lambda: b"ready." in log.read_bytes(), 120, "the Celery worker")
    return worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=500, help="turns started at once")
    parser.add_argument("--delay", type=float, default=2.0, help="the model's answer time, s")
    parser.add_argument("--pool", default="threads", help="threads | prefork | gevent")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--pool-max", type=int, default=20, help="worker DATABASE_POOL_MAX_SIZE")
    parser.add_argument("--model", choices=["openai", "scripted"], default="openai")
    parser.add_argument("--timeout", type=float, default=900, help="give up after, s")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="sample the worker with py-spy (pip install py-spy) from publishing to the end, "
        "and write its collapsed stacks (py-spy's raw format) to FILE",
    )
    args = parser.parse_args()

    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("DATABASE_URL must name a PostgreSQL database.")
        return 2
    if not os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "amqp://")):
        print("CELERY_BROKER_URL must name a Redis or RabbitMQ broker.")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DEBUG"] = "false"  # DEBUG keeps every query in memory: not what we measure
    os.environ["DATABASE_POOL"] = "false"  # this process: no pooled connection left open
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))

    logdir = Path(tempfile.mkdtemp(prefix="bench-slow-turns-"))
    stub_port = free_port()
    run_queue = f"bench-{uuid.uuid4().hex[:8]}"
    hold_queue = f"{run_queue}-held"
    env = {
        **os.environ,
        "DATABASE_POOL": "true",
        "DATABASE_POOL_MAX_SIZE": str(args.pool_max),
        # A queue of its own, so that no other worker on the broker takes these turns.
        "CELERY_QUEUE": run_queue,
        "OPENAI_BASE_URL": f"http://127.0.0.1:{stub_port}/v1",
        "OPENAI_API_KEY": "sk-bench-stub",
        "CELERY_TASK_TIME_LIMIT": str(int(args.timeout) + 60),
        "CELERY_TASK_SOFT_TIME_LIMIT": str(int(args.timeout) + 30),
    }
    tenant, agent = seed(args.model, args.delay)
    logging.disable(logging.INFO)  # this process's own lines (one per message taken)
    stub = start_stub(stub_port, args.delay, logdir)
    worker = start_worker(env, args.pool, args.concurrency, logdir)

    from django.db import connection

    from config.celery import app
    from runtime.kernel.task_models import TERMINAL_STATES, Task
    from runtime.tasks import run_turn as run_turn_task

    samples: list[tuple[int, int, int]] = []
    stop = threading.Event()

    connections_seen: list[int] = []

    def sample():
        import psycopg

        # Its own connection, outside Django's: how many others are on this database (the
        # worker's; this script's own is closed between its polls).
        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as db:
            while not stop.is_set():
                samples.append(group_memory(worker.pid))
                connections_seen.append(
                    db.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    ).fetchone()[0]
                )
                stop.wait(0.25)

    try:
        pks = take_messages(tenant, agent, args.n, hold_queue)
        idle_rss = group_memory(worker.pid)[0]
        idle_cpu = group_cpu_seconds(worker.pid)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        profiler = None
        if args.profile:
            profiler = subprocess.Popen(
                [str(BIN / "py-spy"), "record", "--pid", str(worker.pid), "--format", "raw"]
                + ["--rate", "50", "--nonblocking", "--output", args.profile],
                stdout=open(logdir / "py-spy.log", "ab"),
                stderr=subprocess.STDOUT,
            )
            time.sleep(1)  # attached
        started = time.monotonic()
        with app.producer_or_acquire() as producer:
            for pk in pks:
                run_turn_task.apply_async((pk,), queue=run_queue, producer=producer)
        published = time.monotonic() - started

        def ended() -> int:
            count = Task.objects.filter(pk__in=pks, state__in=TERMINAL_STATES).count()
            connection.close()
            return count

        done = 0
        deadline = started + args.timeout
        while time.monotonic() < deadline and (done := ended()) < args.n:
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        memory = group_memory(worker.pid)
        cpu = group_cpu_seconds(worker.pid) - idle_cpu
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            profiler.wait(60)
        stop.set()
        sampler.join()
    finally:
        stop.set()
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        import httpx

        try:
            stub_stats = httpx.get(f"http://127.0.0.1:{stub_port}/stats", timeout=5).json()
        except httpx.HTTPError:
            stub_stats = {}
        stub.terminate()
        stub.wait(30)
        with app.connection_for_write() as conn:
            for queue in (hold_queue, run_queue):
                try:
                    # Purge: the held copies of the turns would otherwise stay in the broker.
                    conn.default_channel.queue_purge(queue)
                    conn.default_channel.queue_delete(queue)
                except Exception:  # noqa: BLE001 - a queue that is already gone is fine
                    pass

    banner = (logdir / "worker.log").read_text(errors="replace")
    pool_line = next(
        (
            line.split("concurrency:", 1)[1].strip()
            for line in banner.splitlines()
            if "concurrency:" in line
        ),
        "?",
    )  # what the worker says it ran, e.g. "200 (thread)"
    tasks = Task.objects.filter(pk__in=pks)
    states = Counter(tasks.values_list("state", flat=True))
    failures = Counter(
        " ".join(p.get("text", "") for p in (t.status_message or {}).get("parts", []))[:120]
        for t in tasks.filter(state="TASK_STATE_FAILED")
    )
    print(
        f"turns: {args.n}   model: {args.model} ({args.delay:g} s)   worker: {pool_line}, "
        f"DB pool max {args.pool_max}   logs: {logdir}"
    )
    print(
        f"wall time: {elapsed:.1f} s until {done} of {args.n} ended "
        f"(published in {published:.2f} s)"
    )
    print(f"end states: {dict(states)}")
    if failures:
        print(f"failures: {dict(failures.most_common(3))}")
    peak = max(s[0] for s in samples) if samples else memory[0]
    print(
        f"worker RSS: idle {idle_rss / 1024:.0f} MiB, peak sampled {peak / 1024:.0f} MiB, "
        f"sum of VmHWM {memory[1] / 1024:.0f} MiB over {memory[2]} process(es)"
    )
    print(
        f"database connections: at most {max(connections_seen)} "
        "(the worker's, and now and then this script's poll)"
    )
    print(f"worker CPU: {cpu:.1f} s, {cpu / max(done, 1) * 1000:.1f} ms per turn")
    print(
        f"stub: served {stub_stats.get('served')}, most at once {stub_stats.get('max_in_flight')}"
    )
    return 0 if done == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
