"""connections.outbound's one URL parser: what it accepts, how it reads it, what it refuses."""

import ipaddress
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpcore
import httpx
import pytest
from httpcore._sync.connection_pool import PoolRequest

from connections.outbound import OutboundRefused, check_url, fetch_url, guarded_client, url_parse

CANONICAL = [
    # url, host, port
    ("http://127.0.0.1:8799/x", "127.0.0.1", 8799),
    ("https://example.com/hook?x=1#f", "example.com", 443),
    ("http://example.com", "example.com", 80),
    ("HTTP://Example.COM:8080/", "example.com", 8080),
    ("http://example.com.:8080/", "example.com", 8080),  # a fully qualified name
    ("http://example.com:080/", "example.com", 80),
    ("http://0.0.0.0/", "0.0.0.0", 80),
    ("http://255.255.255.255/", "255.255.255.255", 80),
    ("http://[::1]:9/", "::1", 9),
    ("http://[2001:DB8::1]/", "2001:db8::1", 80),
    ("http://[::ffff:127.0.0.1]/", str(ipaddress.ip_address("::ffff:127.0.0.1")), 80),
    ("http://bücher.example/x", "xn--bcher-kva.example", 80),
    ("https://xn--bcher-kva.example/", "xn--bcher-kva.example", 443),
    ("http://localhost:8000/", "localhost", 8000),
    ("http://a-b.c0.example/", "a-b.c0.example", 80),
    ("http://0x7f.0.0.a/", "0x7f.0.0.a", 80),  # its last label is no number: a name
    ("http://h:65535/", "h", 65535),
    ("http://" + "a" * 63 + ".example/", "a" * 63 + ".example", 80),
    ("http://h/" + "p" * (2000 - len("http://h/")), "h", 80),
]

NON_CANONICAL = [
    # url, a piece of the reason
    ("http://0177.0.0.1:8799/x", "not a canonical IPv4 address"),  # octal to inet_aton
    ("http://00.0.0.1/", "not a canonical IPv4 address"),
    ("http://0x7f.0.0.1/", "not a canonical IPv4 address"),
    ("http://1.2.3.0x4/", "not a canonical IPv4 address"),
    ("http://2130706433/", "not a canonical IPv4 address"),  # 127.0.0.1 as one integer
    ("http://127.1/", "not a canonical IPv4 address"),
    ("http://1.2.3.4.5/", "not a canonical IPv4 address"),
    ("http://256.1.1.1/", "not a canonical IPv4 address"),
    ("http://1.2.3.4./", "not a canonical IPv4 address"),
    ("http://example.123/", "not a canonical IPv4 address"),  # an all-numeric TLD
    ("http://[fe80::1%25eth0]/", "not a valid IPv6 address"),
    ("http://[::g]/", "not a valid"),
    ("http://[::1]x/", "not a valid IPv6 address"),
    ("http://[1.2.3.4]/", "not a valid URL"),
    ("http://[::1/", "not a valid URL"),
    ("http://a_b.example/", "not a valid host name"),
    ("http://-a.example/", "not a valid host name"),
    ("http://a-.example/", "not a valid host name"),
    ("http://a..example/", "not a valid host name"),
    ("http://%31.example/", "not a valid host name"),
    ("http://" + "a" * 64 + ".example/", "not a valid host name"),
    ("http://" + ".".join(["a" * 60] * 5) + "/", "not a valid host name"),  # 304 characters
    ("http://h:0/", "not a number from 1 to 65535"),
    ("http://h:65536/", "not a number from 1 to 65535"),
    ("http://h:/", "not a number from 1 to 65535"),
    ("http://h:8o/", "not a number from 1 to 65535"),
    ("http://h:８０/", "not a number from 1 to 65535"),  # full-width digits
    ("http://h:80:81/", "not a number from 1 to 65535"),
    ("http://user:pass@h/", "must not carry credentials"),
    ("http://user@h/", "must not carry credentials"),
    ("http://h\\@evil.example/", "must not carry credentials"),
    ("ftp://h/", "must be http or https"),
    ("file:///etc/passwd", "must be http or https"),
    ("javascript:alert(1)", "must be http or https"),
    ("http:///x", "must be http or https"),
    ("//h/x", "must be http or https"),
    ("h/x", "must be http or https"),
    ("", "there is no URL"),
    ("http://h/a b", "whitespace or a control character"),
    (" http://h/", "whitespace or a control character"),
    ("http://h/\t", "whitespace or a control character"),
    ("http://h/\r\nX-Injected: 1", "whitespace or a control character"),
    ("http://h/\x00", "whitespace or a control character"),
    ("http://h/\x7f", "whitespace or a control character"),
    ("http://h/\u200bx", "whitespace or a control character"),  # zero-width space
    ("http://h/\u00a0", "whitespace or a control character"),  # no-break space
    ("http://h/" + "p" * (2001 - len("http://h/")), "longer than 2000 characters"),
]


@pytest.mark.parametrize(("url", "host", "port"), CANONICAL)
def test_canonical_urls_are_read_one_way(url, host, port):
    parsed = url_parse(url)
    assert (parsed.url, parsed.host, parsed.port) == (url, host, port)
    assert parsed.receiver == f"{host}:{port}"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    assert parsed.address == address
    # What is accepted here, httpx takes too, and it reads the same host and port.
    theirs = httpx.URL(url)
    their_host = theirs.raw_host.decode().lower().removesuffix(".")
    assert (ipaddress.ip_address(their_host) if address else their_host) == (address or host)
    assert (theirs.port or port) == port


@pytest.mark.parametrize(("url", "reason"), NON_CANONICAL)
def test_non_canonical_urls_are_refused_with_the_reason(url, reason):
    with pytest.raises(OutboundRefused, match=reason.replace("(", r"\(")):
        url_parse(url)


def test_check_url_parses_then_applies_the_allowed_hosts_and_the_address_rules(settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    assert check_url("https://Hooks.Example.com/x", ["*.example.com"]) == "hooks.example.com"
    # An international name matches a pattern written either way.
    assert check_url("http://bücher.example/", ["bücher.example"]) == "xn--bcher-kva.example"
    assert check_url("http://bücher.example/", ["xn--bcher-kva.example"])
    with pytest.raises(OutboundRefused, match="not one this tenant allows"):
        check_url("https://evil.example/x", ["*.example.com"])
    with pytest.raises(OutboundRefused, match="not a public address"):
        check_url("http://127.0.0.1/x", ["*"])
    with pytest.raises(OutboundRefused, match="not a canonical IPv4 address"):
        check_url("http://0177.0.0.1/x", ["*"])  # refused before any pattern could match it


def test_fetch_url_refuses_a_url_httpx_would_refuse_before_any_request(settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    with pytest.raises(OutboundRefused, match="not a canonical IPv4 address"):
        fetch_url("http://0177.0.0.1:8799/x", allowed_hosts=["*"], max_bytes=10, timeout=1)


def test_the_pool_keeps_a_connection_it_handed_to_a_request_not_yet_started():
    """encode/httpcore#1110: a pass of another thread saw the handed-over connection still
    idle and expired, closed it, and the request then hung on it until its read timeout."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with guarded_client(timeout=5, allow_private=True, keepalive_expiry=0.1) as client:
            assert client.get(url).text == "ok"
            pool = client._transport._pool
            (connection,) = pool.connections
            time.sleep(0.2)  # its keep-alive has expired
            # Another thread's pass just handed it to its request (under the pool's lock)...
            waiting = PoolRequest(httpcore.Request("GET", url))
            waiting.assign_to_connection(connection)
            pool._requests.append(waiting)
            # ...and this thread's pass runs before that thread starts the request.
            assert pool._assign_requests_to_connections() == []
            assert connection in pool.connections and not connection.is_closed()
            pool._requests.remove(waiting)
            # Once nobody holds it, the expired connection is closed as before.
            assert pool._assign_requests_to_connections() == [connection]
            assert client.get(url).text == "ok"  # on a new connection
    finally:
        server.shutdown()
        server.server_close()
