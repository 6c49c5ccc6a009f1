"""`make run`: seed the demo tenant, then run the web server and a Celery worker (with beat)
in the foreground, and print the banner (config/banner.py) once both answer, so that it is
the last thing on the screen. Ctrl-C (or SIGTERM) stops all of them."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from config.banner import assistant_note, banner, base_url, curl_command  # noqa: E402
from config.env import dotenv_load  # noqa: E402

__all__ = ["assistant_note", "banner", "curl_command", "main", "static_commands"]
# What the worker logs (celery.apps.worker, INFO) once it consumes: the banner waits for it.
WORKER_READY = " ready."


def static_commands() -> list[list[str]]:
    """What prepares the static files before the servers start: nothing with DEBUG on.

    With DEBUG off the pages name the hashed files of the manifest storage, which exist only
    once collectstatic has run; without it every page is a 500 ("Missing staticfiles
    manifest entry").
    """
    from config.env import env_bool  # the settings' own reading of DEBUG

    if env_bool("DEBUG", True):
        return []
    return [[sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"]]


def web_ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def forward(stream, ready: threading.Event) -> None:
    """Copy a child's output to ours line by line, and note when it says it is ready."""
    for line in iter(stream.readline, ""):
        sys.stdout.write(line)
        sys.stdout.flush()
        if WORKER_READY in line:
            ready.set()


def main() -> int:
    dotenv_load()
    port = os.environ.get("PORT", "8000")
    host = os.environ.get("HOST", "127.0.0.1")
    # The web server and the worker read them too (config.settings.LISTEN_URL): the links
    # they write into e-mails and Slack messages name the address the banner prints.
    os.environ["PORT"], os.environ["HOST"] = port, host
    for command in static_commands():
        subprocess.run(command, cwd=ROOT, check=True)
    seeded = subprocess.run(
        [sys.executable, "manage.py", "seed_demo", "--json"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    demo = json.loads(seeded.stdout.strip().splitlines()[-1])
    base = base_url({"HOST": host, "PORT": port})
    commands = [
        [
            str(BIN / "uvicorn"),
            "config.asgi:application",
            "--host",
            host,
            "--port",
            port,
            "--no-access-log",
            # The start hooks production's workers run too (config/asgi.py lifespan:
            # listening for task changes from the start, start-up objects frozen out of GC),
            # so that what bench/ measures on `make run` is what production runs.
            "--lifespan",
            "on",
        ],
        [
            str(BIN / "celery"),
            "-A",
            "config",
            "--quiet",  # no 40-line banner: ours comes last
            "worker",
            "--beat",
            "--loglevel",
            "INFO",
            # The pool and its size come from the settings: threads, 8 turns at once on
            # SQLite (one writer at a time), 500 on PostgreSQL (docs/explanation/workers.md).
        ],
    ]
    web = subprocess.Popen(commands[0], cwd=ROOT)
    worker = subprocess.Popen(
        commands[1],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    children: list[subprocess.Popen] = [web, worker]
    worker_ready = threading.Event()
    threading.Thread(target=forward, args=(worker.stdout, worker_ready), daemon=True).start()
    stopping = False
    announced = False
    started = time.monotonic()

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    while not stopping:
        for child, command in zip(children, commands, strict=True):
            if child.poll() is not None:
                print(
                    f"{command[0]} exited with {child.returncode}; stopping.",
                    file=sys.stderr,
                    flush=True,
                )
                code = child.returncode or 1
                stopping = True
        # The worker's "ready." line is INFO; should it never come, the banner still does.
        worker_up = worker_ready.is_set() or time.monotonic() - started > 60
        if not stopping and not announced and worker_up and web_ready(base):
            print(banner(demo, base), flush=True)
            announced = True
        time.sleep(0.5)
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + 15
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
