"""A web process's start (ASGI lifespan, config/asgi.py): it answers the protocol, and leaves
what it has loaded by then out of later garbage collections, which run on the event loop
and stalled every waiting caller for a quarter of a second each (bench/waiters.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

START_AND_STOP = """
import asyncio, gc, json
import config.asgi

async def main():
    inbox = asyncio.Queue()
    for kind in ("lifespan.startup", "lifespan.shutdown"):
        inbox.put_nowait({"type": kind})
    sent = []

    async def send(message):
        sent.append(message["type"])
        if message["type"] == "lifespan.startup.complete":
            sent.append(gc.get_freeze_count())

    await config.asgi.application({"type": "lifespan"}, inbox.get, send)
    return sent

print(json.dumps(asyncio.run(main())))
"""


def test_the_web_process_start_is_answered_and_freezes_what_it_has_loaded():
    # The embedded default (SQLite): this process's own start, not the test database's.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    out = subprocess.run(
        [sys.executable, "-c", START_AND_STOP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    started, frozen, stopped = json.loads(out.stdout.strip().splitlines()[-1])
    assert (started, stopped) == ("lifespan.startup.complete", "lifespan.shutdown.complete")
    # Django, the apps and the URLconf: far more than the interpreter's own few thousand.
    assert frozen > 100_000
