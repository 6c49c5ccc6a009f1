"""IPv6 addresses that embed an IPv4 address are classified by it."""

import ipaddress

import pytest

from connections.outbound import OutboundRefused, address_allowed, check_url

# (address, what it reaches, allowed with private hosts allowed)
REFUSED = [
    ("::127.0.0.1", "IPv4-compatible loopback", True),
    ("::7f00:1", "IPv4-compatible loopback, hex spelling", True),
    ("::ffff:127.0.0.1", "IPv4-mapped loopback", True),
    ("::ffff:10.0.0.5", "IPv4-mapped private", True),
    ("64:ff9b::7f00:1", "NAT64 well-known prefix to loopback", True),
    ("64:ff9b::a00:1", "NAT64 well-known prefix to 10.0.0.1", True),
    ("64:ff9b::c0a8:101", "NAT64 well-known prefix to 192.168.1.1", True),
    ("64:ff9b:1::808:808", "NAT64 local-use prefix (RFC 8215)", True),
    ("2002:7f00:1::", "6to4 of loopback", True),
    ("2002:c0a8:101::1", "6to4 of 192.168.1.1", True),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo, client 127.0.0.1", True),
    ("::1", "IPv6 loopback", True),
    ("::", "IPv6 unspecified", False),
    ("::ffff:0.0.0.0", "IPv4-mapped unspecified", False),
    ("64:ff9b::a9fe:a9fe", "NAT64 to the cloud metadata address", False),
    ("2002:a9fe:a9fe::", "6to4 of the cloud metadata address", False),
    ("::169.254.169.254", "IPv4-compatible metadata address", False),
]
PUBLIC = [
    ("2606:4700:4700::1111", "a public IPv6 address"),
    ("64:ff9b::808:808", "NAT64 to 8.8.8.8"),
    ("2002:808:808::1", "6to4 of 8.8.8.8"),
    ("::ffff:8.8.8.8", "IPv4-mapped 8.8.8.8"),
]


@pytest.mark.parametrize(("address", "why", "_"), REFUSED, ids=[r[0] for r in REFUSED])
def test_ipv6_embedding_a_non_public_ipv4_is_refused(settings, address, why, _):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    assert address_allowed(ipaddress.ip_address(address)) is False, why
    with pytest.raises(OutboundRefused, match="not a public address"):
        check_url(f"http://[{address}]:8799/x", ["*"])


@pytest.mark.parametrize(("address", "why", "allowed"), REFUSED, ids=[r[0] for r in REFUSED])
def test_ipv6_embedding_ipv4_follows_the_private_hosts_switch(settings, address, why, allowed):
    # Loopback and private targets open up for local development; the unspecified address
    # and the metadata endpoint never do.
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    assert address_allowed(ipaddress.ip_address(address)) is allowed, why


@pytest.mark.parametrize(("address", "why"), PUBLIC, ids=[p[0] for p in PUBLIC])
def test_ipv6_embedding_a_public_ipv4_is_allowed(settings, address, why):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    assert address_allowed(ipaddress.ip_address(address)) is True, why
    # check_url answers the host in its canonical spelling (::ffff:8.8.8.8 is ::ffff:808:808).
    host = check_url(f"https://[{address}]/hook", ["*"])
    assert ipaddress.ip_address(host) == ipaddress.ip_address(address)
