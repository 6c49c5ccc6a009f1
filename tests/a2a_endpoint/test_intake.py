"""A burst of new messages is taken in a few at a time (A2A_INTAKE_CONCURRENCY), so that the
answers of callers whose tasks have settled are not held up behind it (bench/waiters.py)."""

import asyncio

from a2a_endpoint import methods


def test_at_most_the_intake_concurrency_of_messages_are_taken_in_at_once(settings, monkeypatch):
    settings.A2A_INTAKE_CONCURRENCY = 3
    inside, most, taken = 0, 0, []

    async def accept(caller, params, **options):
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.01)
        inside -= 1
        taken.append(params["n"])
        return params["n"]

    monkeypatch.setattr(methods, "_message_accept", accept)

    async def burst():
        return await asyncio.gather(*(methods.message_accept(None, {"n": n}) for n in range(20)))

    assert asyncio.run(burst()) == list(range(20))
    assert most == 3
    assert sorted(taken) == list(range(20))


def test_each_event_loop_has_its_own_intake(settings):
    settings.A2A_INTAKE_CONCURRENCY = 2

    async def semaphore():
        return methods._intake()

    first, second = asyncio.run(semaphore()), asyncio.run(semaphore())
    assert first is not second


def test_a_message_that_fails_gives_its_place_back(settings, monkeypatch):
    settings.A2A_INTAKE_CONCURRENCY = 1

    async def accept(caller, params, **options):
        if params["n"] % 2:
            raise ValueError("refused")
        return params["n"]

    monkeypatch.setattr(methods, "_message_accept", accept)

    async def burst():
        return await asyncio.gather(
            *(methods.message_accept(None, {"n": n}) for n in range(6)), return_exceptions=True
        )

    results = asyncio.run(burst())
    assert [r for r in results if not isinstance(r, Exception)] == [0, 2, 4]
