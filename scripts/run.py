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


def curl_command(base: str, path: str, token: str, text: str, message_id: str) -> str:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": message_id,
                    "role": "ROLE_USER",
                    "parts": [{"text": text}],
                }
            },
        }
    )
    return f"""  curl -s {base}{path} \\
    -H 'Authorization: Bearer {token}' -H 'A2A-Version: 1.0' \\
    -H 'Content-Type: application/json' \\
    -d {shlex.quote(body)}"""


def assistant_note(demo: dict, base: str, environ=None) -> str:
    """The banner's lines on the `assistant` agent: how to call it when seed_demo added it
    (a model is configured), else how to turn it on."""
    environ = os.environ if environ is None else environ
    path = demo["agents"].get("assistant")
    if path is None:
        return """The demo runs offline (scripted agents). To add an `assistant` agent on a real model:
  export OPENAI_API_KEY=...                       # your key (any value for a local server)
  export OPENAI_MODEL=gpt-4o-mini                 # optional, the model name
  export OPENAI_BASE_URL=http://127.0.0.1:11434/v1  # optional: Ollama, vLLM, ... (loopback is fine)
then run `make run` again; its deployments and pull requests wait for your approval."""
    model = environ.get("OPENAI_MODEL") or "gpt-4o-mini"
    where = environ.get("OPENAI_BASE_URL") or "api.openai.com"
    call = curl_command(
        base, path, demo["token"], "deploy build 2026.10.06-1 to staging", "assistant-1"
    )
    return f"""Ask the assistant (model {model} at {where}); its deployment waits in the inbox:
{call}"""


def banner(demo: dict, base: str, environ=None) -> str:
    operator = demo["logins"]["operator"]
    agent_path = demo["agents"].get("support", "/a2a/demo/support")
    call = curl_command(base, agent_path, demo["token"], "Hello", "hello-1")
    return f"""
Countersign is starting at {base}/
  operator login: {operator["email"]} / {operator["password"]}
  admin login:    {demo["logins"]["admin"]["email"]} / {demo["logins"]["admin"]["password"]}  ({base}/admin/)
  partner token:  {demo["token"]}

Call the demo agent:
{call}

{assistant_note(demo, base, environ)}

Press Ctrl-C to stop.
"""


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
    print(banner(demo, base), flush=True)
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
            "--concurrency",
            "2",
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
