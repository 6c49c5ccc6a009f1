#!/usr/bin/env bash
# A tiny A2A 1.0 client for the shell (the README's walk-through uses it).
#
#   scripts/a2a.sh AGENT send TEXT          start a task; prints its id on stdout (a TEXT that
#                                           is a JSON object goes as a data part: a gate's call)
#   scripts/a2a.sh AGENT reply TASK TEXT    answer a task that asked a question
#   scripts/a2a.sh AGENT get TASK [--wait]  GetTask (--wait: until it is no longer working)
#
# The state, the agent's words and the artifacts go to stderr, the task id alone to stdout,
# so that TASK=$(scripts/a2a.sh code-reviewer send "Review this diff") shows the answer and
# keeps the id. Environment: TOKEN (a partner token; `make run` prints `export TOKEN=...`),
# A2A_BASE (default http://127.0.0.1:8000), TENANT (default demo), A2A_JSON=1 to also print
# the whole JSON-RPC response. Needs only python3.
set -euo pipefail
exec python3 - "$@" <<'PY'
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

USAGE = """usage: scripts/a2a.sh AGENT send TEXT | AGENT reply TASK TEXT | AGENT get TASK [--wait]"""
BUSY = {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}


def fail(message: str) -> None:
    print(f"a2a.sh: {message}", file=sys.stderr)
    sys.exit(2)


def call(agent: str, method: str, params: dict) -> dict:
    token = os.environ.get("TOKEN")
    if not token:
        fail("set TOKEN first: `make run` prints an `export TOKEN=...` line to paste.")
    base = os.environ.get("A2A_BASE", "http://127.0.0.1:8000").rstrip("/")
    tenant = os.environ.get("TENANT", "demo")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    request = urllib.request.Request(
        f"{base}/a2a/{tenant}/{agent}",
        data=body,
        headers={
            "Authorization": f"Bearer {token}",
            "A2A-Version": "1.0",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=330) as response:
            payload = json.load(response)
    except urllib.error.HTTPError as exc:
        payload = json.loads(exc.read() or b"{}")
    except urllib.error.URLError as exc:
        fail(f"cannot reach {base}: {exc.reason} (is `make run` running?)")
    if os.environ.get("A2A_JSON"):
        print(json.dumps(payload, indent=2), file=sys.stderr)
    if "error" in payload:
        error = payload["error"]
        fail(f"error {error.get('code')}: {error.get('message')}")
    return payload["result"]


def texts(parts: list) -> str:
    out = []
    for part in parts or []:
        if "text" in part:
            out.append(part["text"])
        elif "data" in part:
            out.append(json.dumps(part["data"]))
        elif "url" in part:
            out.append(f"<file {part.get('filename', '')} {part['url']}>")
    return "\n".join(out)


def show(result: dict) -> None:
    task = result.get("task", result)
    if "message" in result and "task" not in result:
        print(f"reply: {texts(result['message'].get('parts'))}", file=sys.stderr)
        return
    status = task.get("status", {})
    print(f"task {task['id']}: {status.get('state')}", file=sys.stderr)
    said = texts((status.get("message") or {}).get("parts"))
    if said:
        print(f"  agent: {said}", file=sys.stderr)
    for artifact in task.get("artifacts") or []:
        print(f"  artifact {artifact.get('name', '')}: {texts(artifact.get('parts'))}", file=sys.stderr)
    print(task["id"])


def part_of(text: str) -> dict:
    """A JSON object is a data part (an approval gate's call); anything else, text."""
    try:
        data = json.loads(text)
    except ValueError:
        return {"text": text}
    return {"data": data} if isinstance(data, dict) else {"text": text}


def message(text: str, task_id: str | None = None) -> dict:
    msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [part_of(text)]}
    if task_id:
        msg["taskId"] = task_id
    return {"message": msg}


args = sys.argv[1:]
if len(args) < 3:
    fail(USAGE)
agent, action, rest = args[0], args[1], args[2:]
if action == "send" and len(rest) == 1:
    show(call(agent, "SendMessage", message(rest[0])))
elif action == "reply" and len(rest) == 2:
    show(call(agent, "SendMessage", message(rest[1], task_id=rest[0])))
elif action == "get" and rest and len(rest) <= 2 and rest[1:] in ([], ["--wait"]):
    deadline = time.monotonic() + 120
    while True:
        task = call(agent, "GetTask", {"id": rest[0]})
        if not rest[1:] or task["status"]["state"] not in BUSY or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    show({"task": task})
else:
    fail(USAGE)
PY
