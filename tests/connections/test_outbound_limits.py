"""The guarded clients' total deadline and byte cap (connections.outbound_limits), against
loopback servers that trickle and that send huge bodies: the read stops at the deadline or
the cap with a clear error, and memory is what the cap allows, not what the server sends."""

import asyncio
import tracemalloc

import httpx
import pytest

from connections.outbound import OutboundRefused, fetch_url, guarded_async_client, guarded_client
from connections.outbound_limits import ResponseTooLarge
from tests.hostile import gzip_bomb, huge, trickling, trickling_headers

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _loopback_allowed(settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True


def test_a_body_trickled_within_the_read_timeout_stops_at_the_total_deadline():
    # Each byte comes within the 5 s read timeout, so httpx alone would read for 100 s.
    with trickling(total=2000, every=0.05) as server:
        with guarded_client(timeout=5, deadline=0.5) as client:
            with pytest.raises(httpx.ReadTimeout):
                client.get(server.url)
        assert server.left_early.wait(10)
    assert 0 < server.sent < 2000


def test_headers_trickled_forever_stop_at_the_deadline():
    with trickling_headers(every=0.05) as server:
        with guarded_client(timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
            client.get(server.url)
        assert server.left_early.wait(10)


def test_the_deadline_is_the_timeout_unless_given():
    with trickling(total=2000, every=0.05) as server:
        with guarded_client(timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
            client.get(server.url)
        assert server.left_early.wait(10)


def test_each_request_has_a_deadline_of_its_own():
    with trickling(total=3, every=0.05) as server:
        with guarded_client(timeout=2) as client:
            for _ in range(3):  # three requests of ~0.15 s each on one client
                assert client.get(server.url).content == b"   "
    assert server.requests == 3


def test_a_streamed_read_stops_at_the_deadline_too():
    with trickling(total=2000, every=0.05) as server:
        with guarded_client(timeout=0.5) as client, client.stream("GET", server.url) as response:
            with pytest.raises(httpx.ReadTimeout):
                for _chunk in response.iter_bytes():
                    pass


@pytest.mark.parametrize("declared", [True, False])
def test_a_huge_body_stops_at_the_cap_and_memory_stays_within_it(declared):
    with huge(200 * MIB, declared=declared) as server:
        tracemalloc.start()
        try:
            with guarded_client(timeout=30, max_response_bytes=MIB) as client:
                with pytest.raises(ResponseTooLarge, match=f"larger than {MIB} bytes"):
                    client.get(server.url)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert server.left_early.wait(10)
    assert peak < 16 * MIB
    assert server.sent < 20 * MIB  # what the socket buffers took before the client left


def test_a_declared_length_over_the_cap_is_refused_before_the_body_is_read():
    with huge(200 * MIB, declared=True) as server:
        with guarded_client(timeout=30, max_response_bytes=MIB) as client:
            with client.stream("GET", server.url) as response:
                assert response.status_code == 200
                with pytest.raises(ResponseTooLarge):
                    response.read()
        assert server.left_early.wait(10)


def test_a_body_within_the_cap_is_read_whole():
    with huge(MIB - 1, declared=False) as server:
        with guarded_client(timeout=30, max_response_bytes=MIB) as client:
            assert len(client.get(server.url).content) == MIB - 1
        assert server.finished.wait(10)


def test_a_gzip_bomb_stops_at_the_cap_of_its_inflated_size():
    bomb, compressed = gzip_bomb(100 * MIB)
    assert compressed < MIB  # it fits the cap compressed: only its inflated size is caught
    with bomb as server:
        tracemalloc.start()
        try:
            with guarded_client(timeout=30, max_response_bytes=MIB) as client:
                with pytest.raises(ResponseTooLarge):
                    client.get(server.url)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 16 * MIB


def test_a_gzip_body_within_the_cap_is_inflated_as_httpx_would():
    bomb, _ = gzip_bomb(1000)
    with bomb as server, guarded_client(timeout=30, max_response_bytes=MIB) as client:
        response = client.get(server.url)
    assert response.content == b'{"x": "' + b"a" * 993
    assert "content-encoding" not in response.headers


def test_the_default_cap_is_the_setting(settings):
    settings.OUTBOUND_MAX_RESPONSE_BYTES = 100_000
    with huge(MIB) as server, guarded_client(timeout=30) as client:
        with pytest.raises(ResponseTooLarge, match="larger than 100000 bytes"):
            client.get(server.url)


def test_fetch_url_says_which_limit_a_file_passed():
    with huge(200 * MIB, declared=False, content_type="text/plain") as server:
        with pytest.raises(OutboundRefused, match=f"larger than {MIB} bytes"):
            fetch_url(server.url, allowed_hosts=["*"], max_bytes=MIB, timeout=30)
    with trickling(total=2000, content_type="text/plain") as server:
        with pytest.raises(OutboundRefused, match="timed out after 0.5s"):
            fetch_url(server.url, allowed_hosts=["*"], max_bytes=MIB, timeout=0.5)


def test_the_async_client_has_the_same_deadline_and_cap():
    told = []

    async def main():
        with trickling(total=2000, every=0.05) as server:
            async with guarded_async_client(timeout=0.5) as client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.get(server.url)
        with huge(200 * MIB, declared=False) as server:
            async with guarded_async_client(
                timeout=30, max_response_bytes=MIB, on_too_large=told.append
            ) as client:
                with pytest.raises(ResponseTooLarge):
                    await client.get(server.url)
            assert server.left_early.wait(10)

    asyncio.run(main())
    assert [error.limit for error in told] == [MIB]
