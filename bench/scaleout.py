"""Scale-out: N web processes and M workers on one PostgreSQL and one Redis.

Run through bench/scaleout.sh. Seeds a tenant, a partner token and an agent whose scripted
model asks a question at once (every turn settles in INPUT_REQUIRED), then runs two phases of
blocking SendMessage calls, each caller sending one call after another (closed loop):

1. one web process and one worker, every caller on its port;
2. two web processes and two workers, the callers split between the two ports, no proxy.

For each phase it prints calls per second, and for phase 2 it counts, from the database
afterwards, which worker finished each call's turn (the pid in the task's last run) and which
web process held the caller: a caller on web A whose turn a worker other than A's neighbour
finished was woken across processes (PostgreSQL NOTIFY reaches every web process's listener).
A lost wake-up would leave its caller waiting until A2A_WAIT_MS (set to --wait-limit) and
answered with a task that is not settled: those are counted, with errors, as lost.
"""

import argparse
import asyncio
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from waiters import BIN, ROOT, free_port, percentile, seed, wait_until  # noqa: E402

SETTLED = "TASK_STATE_INPUT_REQUIRED"


def start_web(env: dict, port: int, logdir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(BIN / "uvicorn"),
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--lifespan",
            "off",
            "--limit-concurrency",
            "4096",
            "--backlog",
            "2048",
        ],
        cwd=ROOT,
        env=env,
        stdout=open(logdir / f"web-{port}.log", "ab"),
        stderr=subprocess.STDOUT,
    )


def start_worker(env: dict, name: str, logdir: Path) -> subprocess.Popen:
    # The pool and its size from the settings (threads; CELERY_WORKER_CONCURRENCY), as in
    # production; its own process group, so that stopping it stops its children too.
    return subprocess.Popen(
        [
            str(BIN / "celery"),
            "-A",
            "config",
            "--quiet",
            "worker",
            "--loglevel",
            "WARNING",
            "--hostname",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=open(logdir / f"{name}.log", "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def web_up(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                process.terminate()
    for process in processes:
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(urls: list[str], token: str, calls: int, callers: int, timeout: float):
    """``callers`` coroutines send ``calls`` blocking SendMessage calls in all, one after
    another each; caller i always calls urls[i % len(urls)]."""
    from rawclient import CallError, post_json, send_message_body

    results = []
    counter = iter(range(calls))

    async def caller(c: int):
        web = c % len(urls)
        url = urls[web]
        for i in counter:
            body = send_message_body(i, str(uuid.uuid4()), f"scale-out {i}")
            try:
                status, payload, sent, received = await post_json(url, token, body, timeout=timeout)
            except CallError as exc:
                results.append({"web": web, "error": str(exc)})
                continue
            if status != 200 or payload is None or "result" not in payload:
                results.append({"web": web, "error": f"HTTP {status}"})
                continue
            task = payload["result"]["task"]
            results.append(
                {
                    "web": web,
                    "task": task["id"],
                    "state": task["status"]["state"],
                    "sent": sent,
                    "at": received,
                }
            )

    started = time.monotonic()
    await asyncio.gather(*(caller(c) for c in range(callers)))
    return results, time.monotonic() - started


def phase(name, *, webs, workers, env, logdir, tenant, agent, token, calls, callers, wait_limit):
    ports = [free_port() for _ in range(webs)]
    processes = [start_web(env, port, logdir) for port in ports]
    processes += [start_worker(env, f"{name}-w{k + 1}", logdir) for k in range(workers)]
    try:
        for port in ports:
            wait_until(lambda port=port: web_up(port), 60, f"web process on {port}")
        worker_pids = [p.pid for p in processes[webs:]]
        time.sleep(2)  # the workers connect to the broker
        urls = [f"http://127.0.0.1:{port}/a2a/{tenant.slug}/{agent.slug}" for port in ports]
        cpu_before = {p.pid: cpu_seconds(p.pid) for p in processes}
        results, elapsed = asyncio.run(drive(urls, token, calls, callers, wait_limit + 30))
        cpu = {p.pid: cpu_seconds(p.pid) - cpu_before[p.pid] for p in processes}
    finally:
        stop(processes)
    return results, elapsed, worker_pids, cpu, processes


def report(name, results, elapsed, worker_pids, cpu, processes, webs):
    from runtime.kernel.task_models import Task

    ok = [r for r in results if "task" in r]
    tasks = {
        t.public_id: t
        for t in Task.objects.filter(public_id__in=[r["task"] for r in ok]).only(
            "public_id", "runs", "status_timestamp", "state"
        )
    }
    errors = Counter(r["error"] for r in results if "error" in r)
    unsettled = [r for r in ok if r["state"] != SETTLED]
    print(
        f"\n== {name}: {len(results)} calls in {elapsed:.1f}s = {len(results) / elapsed:.0f} calls/s"
    )
    print(f"answers: {dict(Counter(r['state'] for r in ok))}   errors: {dict(errors) or 0}")
    delays = [(r["at"] - tasks[r["task"]].status_timestamp.timestamp()) * 1000 for r in ok]
    if delays:
        print(
            "settled -> caller answered (ms): "
            f"p50 {statistics.median(delays):.0f}  p99 {percentile(delays, 99):.0f}  "
            f"max {max(delays):.0f}"
        )
    web_cpu = sum(cpu[p.pid] for p in processes[:webs])
    worker_cpu = sum(cpu[p.pid] for p in processes[webs:])
    print(
        f"CPU per call: web {web_cpu / len(results) * 1000:.2f} ms, "
        f"worker {worker_cpu / len(results) * 1000:.2f} ms (all processes of the phase)"
    )
    # Worker k is "next to" web k: the pair a one-box-per-pair deployment would have.
    by_pair = Counter()
    for r in ok:
        runs = tasks[r["task"]].runs or [{}]
        worker = runs[-1].get("worker", "")
        pid = int(worker.split(":")[1]) if worker.count(":") >= 2 else None
        k = worker_pids.index(pid) if pid in worker_pids else None
        by_pair[(r["web"], k)] += 1
    letters = "ABCDEFGH"
    for (web, k), n in sorted(by_pair.items(), key=lambda x: (x[0][0], x[0][1] or -1)):
        who = "an unknown worker" if k is None else f"worker {k + 1} (next to web {letters[k]})"
        cross = k is not None and k != web
        print(
            f"  caller on web {letters[web]}, turn finished by {who}: {n}"
            + ("  <- woken across processes" if cross else "")
        )
    cross_total = sum(n for (web, k), n in by_pair.items() if k is not None and k != web)
    lost = len(unsettled) + sum(errors.values())
    return {"calls_per_s": len(results) / elapsed, "cross": cross_total, "lost": lost}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000, help="calls of the 2+2 phase")
    parser.add_argument("--single-calls", type=int, default=3000, help="calls of the 1+1 phase")
    parser.add_argument("--callers", type=int, default=128, help="concurrent callers in all")
    parser.add_argument("--wait-limit", type=float, default=60, help="A2A_WAIT_MS, seconds")
    parser.add_argument(
        "--model-wait",
        type=float,
        default=0.0,
        help="seconds each turn's scripted model waits before it asks (a model call's wait)",
    )
    parser.add_argument("--pool-max", type=int, default=10, help="DATABASE_POOL_MAX_SIZE")
    parser.add_argument(
        "--worker-concurrency", type=int, default=32, help="CELERY_WORKER_CONCURRENCY"
    )
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

    from rawclient import loop_policy_install

    loop_policy_install()
    tenant, agent, token = seed(args.model_wait)
    logdir = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    env = {
        **os.environ,
        "A2A_WAIT_MS": str(int(args.wait_limit * 1000)),
        "DATABASE_POOL_MAX_SIZE": str(args.pool_max),
        "CELERY_WORKER_CONCURRENCY": str(args.worker_concurrency),
        # A queue of its own, so that no other worker on the broker takes these turns.
        "CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
    }
    common = {"env": env, "logdir": logdir, "tenant": tenant, "agent": agent, "token": token}
    print(
        f"logs: {logdir}   callers: {args.callers}   A2A_WAIT_MS: {env['A2A_WAIT_MS']}   "
        f"model wait: {args.model_wait}s   worker threads: {args.worker_concurrency}"
    )
    figures = {}
    for name, webs, workers, calls in (
        ("1 web + 1 worker", 1, 1, args.single_calls),
        ("2 web + 2 workers", 2, 2, args.calls),
    ):
        results, elapsed, worker_pids, cpu, processes = phase(
            name,
            webs=webs,
            workers=workers,
            calls=calls,
            callers=args.callers,
            wait_limit=args.wait_limit,
            **common,
        )
        from django.db import connection

        connection.close()
        figures[name] = report(name, results, elapsed, worker_pids, cpu, processes, webs)
    one, two = figures["1 web + 1 worker"], figures["2 web + 2 workers"]
    print(
        f"\nthroughput: 2+2 / 1+1 = {two['calls_per_s'] / one['calls_per_s']:.2f}x; "
        f"woken across processes (2+2): {two['cross']}; lost wake-ups (2+2): {two['lost']}"
    )
    return 1 if one["lost"] or two["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
