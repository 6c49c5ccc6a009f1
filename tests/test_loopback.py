"""The suite never leaves loopback, not even for a DNS lookup (tests/loopback.py)."""

import socket
import subprocess
import sys

import httpx
import pytest

from connections.outbound import OutboundRefused, fetch_url
from tests.loopback import LookupRefused


def test_a_lookup_of_a_public_name_is_refused_and_says_which_name(loopback_only):
    with pytest.raises(LookupRefused, match="'example.com'"):
        socket.getaddrinfo("example.com", 443)
    with pytest.raises(LookupRefused, match="'www.example.com'"):
        socket.gethostbyname("www.example.com")
    with pytest.raises(LookupRefused, match="'example.com'"):
        httpx.get("https://example.com/", timeout=1)
    assert loopback_only.take_refused() == ["example.com", "www.example.com", "example.com"]


def test_loopback_names_and_numeric_addresses_are_looked_up(loopback_only):
    for host in ("localhost", "LOCALHOST.", "127.0.0.1", "::1", "hooks.localhost", "10.1.2.3"):
        addresses = {info[4][0] for info in socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)}
        assert addresses, host
    assert {info[4][0] for info in socket.getaddrinfo("hooks.localhost", 80, socket.AF_INET)} == {
        "127.0.0.1"
    }
    assert loopback_only.take_refused() == []


def test_a_name_given_fixed_addresses_resolves_to_them_through_the_outbound_guard(
    loopback_only, settings
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    loopback_only.answer("hooks.test", ["127.0.0.1"])
    assert socket.getaddrinfo("hooks.test", 80, socket.AF_INET)[0][4] == ("127.0.0.1", 80)
    with pytest.raises(OutboundRefused, match="hooks.test resolves only to refused addresses"):
        fetch_url("http://hooks.test/hook", allowed_hosts=["*"], max_bytes=10, timeout=1)


def test_a_python_subprocess_of_the_suite_refuses_the_lookup_too(loopback_only):
    done = subprocess.run(
        [sys.executable, "-c", "import socket; socket.getaddrinfo('example.com', 80)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "LookupRefused" in done.stderr and "'example.com'" in done.stderr
    assert [line.split(" ", 1)[1] for line in loopback_only.take_refused()] == ["'example.com'"]
