"""`make run`: seed the demo tenant, then run the web server and a Celery worker (with beat)
in the foreground. Ctrl-C (or SIGTERM) stops all of them."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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


def main() -> int:
    port = os.environ.get("PORT", "8000")
    host = os.environ.get("HOST", "127.0.0.1")
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
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    operator = demo["logins"]["operator"]
    agent_path = demo["agents"].get("support", "/a2a/demo/support")
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "hello-1",
                    "role": "ROLE_USER",
                    "parts": [{"text": "Hello"}],
                }
            },
        }
    )
    print(
        f"""
Countersign is starting at {base}/
  operator login: {operator["email"]} / {operator["password"]}
  admin login:    {demo["logins"]["admin"]["email"]} / {demo["logins"]["admin"]["password"]}  ({base}/admin/)
  partner token:  {demo["token"]}

Call the demo agent:
  curl -s {base}{agent_path} \\
    -H 'Authorization: Bearer {demo["token"]}' -H 'A2A-Version: 1.0' \\
    -H 'Content-Type: application/json' \\
    -d {shlex.quote(body)}

Press Ctrl-C to stop.
""",
        flush=True,
    )
    commands = [
        [
            str(BIN / "uvicorn"),
            "config.asgi:application",
            "--host",
            host,
            "--port",
            port,
            "--no-access-log",
        ],
        [
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "--beat",
            "--loglevel",
            "INFO",
            # The pool and its size come from the settings: threads, 8 turns at once on
            # SQLite (one writer at a time), 200 on PostgreSQL (README "Workers").
        ],
    ]
    children = [subprocess.Popen(cmd, cwd=ROOT) for cmd in commands]
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    while not stopping:
        for child in children:
            if child.poll() is not None:
                print(
                    f"{child.args[0]} exited with {child.returncode}; stopping.",
                    file=sys.stderr,
                    flush=True,
                )
                code = child.returncode or 1
                stopping = True
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
