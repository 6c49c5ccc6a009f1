"""A live Countersign for end-to-end tests: uvicorn and a real Celery worker (and beat when
asked) in subprocesses, on the test database and the same broker as the test process.

Tests that use it need ``transactional_db`` (their rows must be committed to be seen).
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    auth = db.get("USER") or ""
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


def wait_until(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class LiveStack:
    def __init__(self, logdir: Path, *, beat: bool = False, extra_env: dict | None = None):
        self.logdir = logdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.beat = beat
        self.web: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "VAR_DIR": str(settings.VAR_DIR),
            "DEBUG": "true",
            "DATABASE_POOL": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "A2A_WAIT_MS": "20000",
            # The database is flushed between tests and the stack outlives them: the receipt
            # signing key is read for each receipt, never one a flush took away.
            "RECEIPT_KEY_CACHE_SECONDS": "0",
            # Slack's Web API on loopback (a closed port) unless a test gives its stand-in: a
            # worker that finds a Slack app of another test in the shared database (its
            # Socket Mode connections look every few seconds) never looks up slack.com.
            "SLACK_API_URL": "http://127.0.0.1:9/api/",
            **(extra_env or {}),
        }
        self._worker_logs = 0

    def start(self) -> "LiveStack":
        self.start_web()
        self.start_worker()
        return self

    def start_web(self) -> None:
        log = open(self.logdir / "web.log", "ab")
        self.web = subprocess.Popen(
            [
                str(BIN / "uvicorn"),
                # The project's, forgetting content type ids per request (tests/live_asgi.py).
                "tests.live_asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def up():
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        # Readiness, not a speed check: a loaded 2-core machine (two suites side by side) has
        # taken over 30 s to start the web server.
        wait_until(up, 120, what="the web server")

    def start_worker(self) -> None:
        self._worker_logs += 1
        path = self.logdir / f"worker-{self._worker_logs}.log"
        args = [
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "2",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if self.beat:
            args += ["--beat", "--schedule", str(self.logdir / f"beat-{self._worker_logs}")]
        # Its own process group, so that killing it kills its pool children too.
        self.worker = subprocess.Popen(
            args,
            cwd=ROOT,
            env=self.env,
            stdout=open(path, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(
            lambda: b"ready." in path.read_bytes(), 120, interval=0.2, what="the Celery worker"
        )

    def kill_worker(self) -> None:
        """SIGKILL the worker and its children: no clean shutdown, as when a machine dies."""
        if self.worker and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(10)

    def stop(self) -> None:
        for proc in (self.web, self.worker):
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM) if proc is self.worker else proc.terminate()
                    proc.wait(15)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    proc.kill()

    def quiesce(self, timeout: float = 15.0, settle: float = 0.5) -> None:
        """Wait until no other session on the test database is running a query or holding a
        transaction open, and none has for ``settle`` seconds.

        A test can end while the stack still works for it (a turn finishing its events, the
        notification fan-out of a pause it saw). The flush that follows a transactional test
        truncates every table; racing that work it deadlocks. On SQLite there is nothing to
        wait for: the stack's writers and the flush queue behind one file lock."""
        if connection.vendor != "postgresql":
            return
        quiet_since = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                    " AND state IN ('active', 'idle in transaction',"
                    " 'idle in transaction (aborted)')"
                )
                busy = cursor.fetchone()[0]
            now = time.monotonic()
            if busy:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= settle:
                return
            time.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-4000:] for p in sorted(self.logdir.glob("*.log"))
        )
