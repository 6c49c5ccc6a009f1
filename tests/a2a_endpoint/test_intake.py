"""A burst of new messages is taken in a few at a time (A2A_INTAKE_CONCURRENCY), so that the
answers of callers whose tasks have settled are not held up behind it (bench/waiters.py): one
semaphore per web process, made as its ASGI server starts (config.asgi's lifespan)."""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from a2a_endpoint import methods

ROOT = Path(__file__).resolve().parents[2]


def burst_through_the_intake(monkeypatch, n: int, refuse_odd: bool = False):
    """``n`` messages at once through message_accept, with the intake made on their loop as
    the server's start makes it; returns (results, the most taken in at once)."""
    inside, most = 0, 0

    async def accept(caller, params, **options):
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.01)
        inside -= 1
        if refuse_odd and params["n"] % 2:
            raise ValueError("refused")
        return params["n"]

    monkeypatch.setattr(methods, "_message_accept", accept)

    async def burst():
        methods.intake_open()
        return await asyncio.gather(
            *(methods.message_accept(None, {"n": i}) for i in range(n)), return_exceptions=True
        )

    try:
        return asyncio.run(burst()), most
    finally:
        monkeypatch.setattr(methods, "_intake", None)


def test_at_most_the_intake_concurrency_of_messages_are_taken_in_at_once(settings, monkeypatch):
    settings.A2A_INTAKE_CONCURRENCY = 3
    results, most = burst_through_the_intake(monkeypatch, 20)
    assert results == list(range(20))
    assert most == 3


def test_a_message_that_fails_gives_its_place_back(settings, monkeypatch):
    settings.A2A_INTAKE_CONCURRENCY = 1
    results, most = burst_through_the_intake(monkeypatch, 6, refuse_odd=True)
    assert [r for r in results if not isinstance(r, Exception)] == [0, 2, 4]
    assert most == 1


START_THEN_BURST = """
import asyncio, json
import config.asgi
from a2a_endpoint import methods

async def main():
    inbox = asyncio.Queue()
    inbox.put_nowait({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def send(message):
        started.set()

    server = asyncio.ensure_future(config.asgi.application({"type": "lifespan"}, inbox.get, send))
    await started.wait()
    inside = most = 0

    async def accept(caller, params, **options):
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.01)
        inside -= 1

    methods._message_accept = accept
    await asyncio.gather(*(methods.message_accept(None, {}) for _ in range(12)))
    inbox.put_nowait({"type": "lifespan.shutdown"})
    await server
    return most

print(json.dumps(asyncio.run(main())))
"""


def test_the_server_start_makes_one_intake_for_the_process():
    # The embedded default (SQLite): this process's own start, not the test database's.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["A2A_INTAKE_CONCURRENCY"] = "4"
    out = subprocess.run(
        [sys.executable, "-c", START_THEN_BURST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == 4


def test_without_the_server_start_every_message_is_taken_in(monkeypatch):
    # Django's test client runs each request on an event loop of its own, with no ASGI start.
    monkeypatch.setattr(methods, "_intake", None)

    async def accept(caller, params, **options):
        return "taken"

    monkeypatch.setattr(methods, "_message_accept", accept)
    assert asyncio.run(methods.message_accept(None, {})) == "taken"
