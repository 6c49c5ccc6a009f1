"""a2a_endpoint.lean.until_disconnect: a client that goes away cancels its request's response
(a blocking SendMessage stops waiting, a stream ends); a quick request never starts the
listener at all."""

import asyncio

import pytest

from a2a_endpoint import lean


def _receive_disconnect_after(seconds: float, calls: list):
    async def receive():
        calls.append(asyncio.get_running_loop().time())
        await asyncio.sleep(seconds)
        return {"type": "http.disconnect"}

    return receive


def test_a_quick_response_never_listens_for_the_disconnect():
    calls: list = []
    done: list = []

    async def answer():
        await asyncio.sleep(0)
        done.append(True)

    async def main():
        await lean.until_disconnect(answer(), _receive_disconnect_after(0, calls))
        # Later than the watch would have started: nothing is left behind to start it.
        await asyncio.sleep(lean.DISCONNECT_WATCH_AFTER_SECONDS * 3)

    asyncio.run(main())
    assert done == [True]
    assert calls == []


def test_a_client_that_goes_away_cancels_a_long_response():
    calls: list = []
    seen: list = []

    async def answer():
        try:
            await asyncio.sleep(30)  # a blocking SendMessage's wait
            seen.append("finished")
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main():
        loop = asyncio.get_running_loop()
        started = loop.time()
        await lean.until_disconnect(answer(), _receive_disconnect_after(0.05, calls))
        # The request's task goes on, not cancelled itself.
        await asyncio.sleep(0)
        return loop.time() - started, asyncio.current_task().cancelling()

    took, cancelling = asyncio.run(main())
    assert seen == ["cancelled"]
    assert len(calls) == 1
    assert took < 5
    assert cancelling == 0


def test_the_servers_own_cancellation_is_not_swallowed():
    calls: list = []

    async def answer():
        await asyncio.sleep(30)

    async def main():
        request = asyncio.create_task(
            lean.until_disconnect(answer(), _receive_disconnect_after(30, calls))
        )
        await asyncio.sleep(lean.DISCONNECT_WATCH_AFTER_SECONDS * 2)
        request.cancel()  # the server shuts down
        with pytest.raises(asyncio.CancelledError):
            await request
        return request.cancelled()

    assert asyncio.run(main()) is True
    assert len(calls) == 1  # it had been listening, and the listener was stopped with it
