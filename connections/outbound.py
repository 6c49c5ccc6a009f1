"""The one way this server makes outbound HTTP requests.

Push deliveries and incoming ``url`` file parts both go to URLs a partner gave us, so both
could be used to reach the server's own network (SSRF); OAuth2 requests go to endpoints an
installer configured (connections.oauth). Every request goes through ``guarded_client()``: an
httpx client whose connections are opened by ``GuardedBackend``, which resolves the host
itself, refuses any address that is not public (loopback, private, link-local, cloud
metadata, reserved), and then connects to the address it vetted. Checking
and connecting to the same address is what defeats DNS rebinding: a name that resolves to a
public address for a check and to 127.0.0.1 for the connect never gets the second lookup.
The URL's host name still goes into the Host header and TLS SNI (httpcore takes them from
the request URL, not from the connected address), so virtual hosts and certificates work.

Every URL is first taken apart by ``url_parse``, the one parser of outbound URLs: http or
https, no credentials, a canonical IP address or a valid DNS name, a port from 1 to 65535.
It refuses whatever httpx would refuse, so that a URL accepted here (a push config, a file
part) never fails later in httpx, where it would be nobody's error to report.

Every request of a guarded client also ends within a total deadline (connect, send, headers
and body together) and reads at most a byte cap of body (``ResponseTooLarge``): see
connections.outbound_limits. Memory is then what the cap allows, not what a server sends.
"""

import fnmatch
import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx
from django.conf import settings
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from connections.outbound_limits import (
    AsyncCappedStream,
    AsyncDeadlineStream,
    CappedStream,
    DeadlineStream,
    Limits,
    ResponseTooLarge,
    body_for,
    current_deadline,
    request_begin,
    wait_left,
)

# Cloud metadata endpoints are refused even when private addresses are allowed: they hand
# out credentials, and no local development setup needs them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)


class OutboundRefused(Exception):
    """The URL or the address it resolves to is not one this server may call."""


# IPv6 ranges whose last 32 bits are an IPv4 address that a NAT64 gateway (RFC 6052) or a
# host that still routes IPv4-compatible addresses (RFC 4291 2.5.5.1) reaches on our behalf.
NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# RFC 8215's local-use NAT64 prefix: which IPv4 network it reaches is the site's choice, so
# it counts as private.
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client, the host the relay delivers to
    # ``::`` and ``::1`` are IPv6's own unspecified and loopback addresses, classified as such.
    if ip in NAT64_WELL_KNOWN or (ip in IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_allowed(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, *, allow_private: bool | None = None
) -> bool:
    """``allow_private`` None: loopback and private addresses as PUSH_ALLOW_PRIVATE_HOSTS says
    (read at each check, so that a change applies to clients already made)."""
    if allow_private is None:
        allow_private = bool(settings.PUSH_ALLOW_PRIVATE_HOSTS)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL_USE:
            return allow_private
        # An address that embeds an IPv4 address reaches that IPv4 host, so it is exactly as
        # public as that host: [::127.0.0.1] and [64:ff9b::7f00:1] are loopback.
        ip = embedded_ipv4(ip) or ip
    if ip in METADATA_ADDRESSES or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        return False
    if ip.is_global:
        return True
    # Loopback and private ranges: only when the operator said so (local development, the
    # conformance kit's webhook on localhost).
    return allow_private and (ip.is_loopback or ip.is_private)


def host_matches(host: str, patterns: Iterable[str]) -> bool:
    """``patterns`` are host names, ``*.example.com`` wildcards, or ``*`` for any host."""
    host = host.lower().rstrip(".")
    return any(fnmatch.fnmatchcase(host, p.strip().lower()) for p in patterns if p.strip())


# --- the one URL parser -------------------------------------------------------------------

URL_MAX_LENGTH = 2000  # PushConfig.url's max_length
PORT = re.compile(r"[0-9]{1,5}")
DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# A host whose last label is a number (decimal, or 0x hex) is an IPv4 address to WHATWG and
# to inet_aton: "0177.0.0.1", "0x7f.1" and "2130706433" all reach 127.0.0.1 through
# getaddrinfo, and httpx refuses some of them (InvalidURL) but not others. Only the
# canonical dotted quad is accepted, so that what we check is what is connected to.
NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
DOTTED_QUAD = re.compile(r"(?:0|[1-9][0-9]{0,2})(?:\.(?:0|[1-9][0-9]{0,2})){3}")


@dataclass(frozen=True)
class OutboundURL:
    """A URL this server may try to call, taken apart once (``url_parse``)."""

    url: str  # as given (it is what is sent: httpx takes it as it is)
    scheme: str  # http or https
    host: str  # lower-case ASCII: an IDNA name without a trailing dot, or an address's text
    port: int  # as given, or the scheme's default
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None  # when the host is one

    @property
    def receiver(self) -> str:
        """host:port, the key that push concurrency is counted by."""
        return f"{self.host}:{self.port}"


def _host_parse(host: str) -> tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address | None]:
    if host.startswith("["):
        inner = host[1:-1]
        # ipaddress takes "fe80::1%eth0" (a zone), which means nothing off this machine.
        if not host.endswith("]") or "%" in inner:
            raise OutboundRefused(f"the host {host} is not a valid IPv6 address")
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise OutboundRefused(f"the host {host} is not a valid IPv6 address") from None
        return str(address), address
    name = host.lower()
    labels = name.removesuffix(".").split(".")
    if NUMERIC_LABEL.fullmatch(labels[-1]):
        if (
            name.endswith(".")
            or not DOTTED_QUAD.fullmatch(name)
            or any(int(label) > 255 for label in labels)
        ):
            raise OutboundRefused(
                f"the host {host} is not a canonical IPv4 address "
                "(four decimal numbers from 0 to 255, without leading zeros)"
            )
        ipv4 = ipaddress.IPv4Address(name)
        return str(ipv4), ipv4
    name = name.removesuffix(".")
    if not name.isascii():
        # httpx's own IDNA encoding, so that the name checked is the name it looks up.
        try:
            name = httpx.URL(scheme="http", host=name, path="/").raw_host.decode("ascii")
        except httpx.InvalidURL as exc:
            raise OutboundRefused(f"the host {host} is not a valid host name: {exc}") from None
    if len(name) > 253 or not all(DNS_LABEL.fullmatch(label) for label in name.split(".")):
        raise OutboundRefused(
            f"the host {host} is not a valid host name (labels of 1 to 63 letters, digits "
            "or inner hyphens; at most 253 characters)"
        )
    return name, None


def _address_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def url_parse(url: object) -> OutboundURL:
    """Take a URL apart the one way every outbound check does, or raise OutboundRefused
    saying why; what httpx would refuse is refused here first. No network I/O."""
    if not isinstance(url, str) or not url:
        raise OutboundRefused("there is no URL")
    if len(url) > URL_MAX_LENGTH:
        raise OutboundRefused(f"the URL is longer than {URL_MAX_LENGTH} characters")
    for position, char in enumerate(url):
        # isprintable() is False for control, format, surrogate, unassigned and separator
        # characters except the ASCII space, which is refused too.
        if char == " " or not char.isprintable():
            raise OutboundRefused(
                f"the URL contains whitespace or a control character ({char!r} at {position})"
            )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise OutboundRefused(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OutboundRefused("the URL must be http or https with a host")
    if "@" in parts.netloc:
        raise OutboundRefused("the URL must not carry credentials")
    netloc = parts.netloc
    if netloc.startswith("["):
        host, bracket, after = netloc.partition("]")
        host += bracket
        if after and not after.startswith(":"):
            raise OutboundRefused(f"the host {netloc} is not a valid IPv6 address")
        port_text = after[1:] if after else None
    else:
        host, colon, port_text = netloc.partition(":")
        if not colon:
            port_text = None
    if not host or host == "[]":
        raise OutboundRefused("the URL must be http or https with a host")
    if port_text is not None and not (PORT.fullmatch(port_text) and 1 <= int(port_text) <= 65535):
        raise OutboundRefused(f"the port {port_text!r} is not a number from 1 to 65535")
    name, address = _host_parse(host)
    port = int(port_text) if port_text is not None else (443 if parts.scheme == "https" else 80)
    # The same URL through httpx's own parser: a difference between the two parsers (the
    # host we checked is not the host httpx connects to) is refused, not guessed at.
    try:
        theirs = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise OutboundRefused(f"not a valid URL: {exc}") from None
    their_host = theirs.raw_host.decode("ascii").lower().removesuffix(".")
    if (
        (their_host != name if address is None else _address_of(their_host) != address)
        or (theirs.port or port) != port
        or theirs.scheme != parts.scheme
        or theirs.userinfo
    ):
        raise OutboundRefused("the URL is ambiguous (it is read two different ways)")
    return OutboundURL(url=url, scheme=parts.scheme, host=name, port=port, address=address)


def check_url(url: str, allowed_hosts: Iterable[str]) -> str:
    """Return the URL's host (``url_parse``'s), or raise OutboundRefused; no network I/O
    (addresses are checked again when the connection is made)."""
    parsed = url_parse(url)
    host = parsed.host
    # A pattern may spell an international name in Unicode or in its ASCII (IDNA) form.
    spelled = {host, urlsplit(url).hostname or host}
    if not any(host_matches(h, allowed_hosts) for h in spelled):
        raise OutboundRefused(f"the host {host} is not one this tenant allows")
    if parsed.address is not None and not address_allowed(parsed.address):
        raise OutboundRefused(f"the address {host} is not a public address")
    return host


class GuardedBackend(httpcore.SyncBackend):
    def __init__(self, *, allow_private: bool | None = None):
        self.allow_private = allow_private

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        refused = []
        last_error: Exception | None = None
        for _family, _type, _proto, _canon, sockaddr in infos:
            ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            if not address_allowed(ip, allow_private=self.allow_private):
                refused.append(str(ip))
                continue
            try:
                # Connect to the vetted address itself, never to the name again.
                wait = wait_left(timeout, httpcore.ConnectTimeout)
                stream = super().connect_tcp(str(ip), port, wait, local_address, socket_options)
                return DeadlineStream(stream)
            except httpcore.ConnectError as exc:
                last_error = exc
        if last_error is not None:
            raise last_error
        raise OutboundRefused(f"{host} resolves only to refused addresses ({', '.join(refused)})")


class SharedConnectionPool(httpcore.ConnectionPool):
    """httpcore's pool, minus a race of its sync pool under many threads (encode/httpcore#1110,
    1.0.9): a pass of one thread could close an idle connection that another pass had just
    handed to a request whose thread had not started it yet (keep-alive expired, or the
    server closed it). The request then ran on a closed socket and hung until its read
    timeout (120 s for a model call). Here a connection handed to a request is kept: that
    request uses it (a connection the server closed then fails at once, and is retried)."""

    def _assign_requests_to_connections(self):
        closing = super()._assign_requests_to_connections()
        assigned = {id(request.connection) for request in self._requests if request.connection}
        kept = [connection for connection in closing if id(connection) in assigned]
        for connection in kept:
            closing.remove(connection)
            self._connections.append(connection)
        return closing


class GuardedTransport(httpx.HTTPTransport):
    def __init__(self, *, limits_each: Limits, allow_private: bool | None = None, **kwargs):
        super().__init__(**kwargs)
        if type(self._pool) is httpcore.ConnectionPool:  # (not a proxy: trust_env is off)
            self._pool.__class__ = SharedConnectionPool
        self._pool._network_backend = GuardedBackend(allow_private=allow_private)
        self.limits_each = limits_each

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = request_begin(request, self.limits_each)
        token = current_deadline.set(deadline)
        try:
            response = super().handle_request(request)
        finally:
            current_deadline.reset(token)
        try:
            body = body_for(response, self.limits_each, deadline)
        except httpx.DecodingError:
            response.close()
            raise
        if not isinstance(response.stream, httpx.SyncByteStream):  # as httpx checks it
            raise RuntimeError("Attempted to call a sync iterator on an async stream.")
        response.stream = CappedStream(response.stream, body)
        return response


def _limits(
    timeout: float | httpx.Timeout,
    deadline: float | None,
    max_response_bytes: int | None,
    on_too_large: Callable[[ResponseTooLarge], None] | None = None,
) -> Limits:
    """A client's bounds: the deadline is ``timeout`` (its longest part) unless given, the
    cap OUTBOUND_MAX_RESPONSE_BYTES unless given."""
    if deadline is None:
        if isinstance(timeout, httpx.Timeout):
            parts = [t for t in (timeout.connect, timeout.read, timeout.write, timeout.pool) if t]
            deadline = max(parts) if parts else None
        else:
            deadline = float(timeout)
    if max_response_bytes is None:
        max_response_bytes = int(settings.OUTBOUND_MAX_RESPONSE_BYTES)
    return Limits(deadline, max_response_bytes, on_too_large)


def guarded_client(
    *,
    timeout: float | httpx.Timeout,
    max_connections: int = 10,
    allow_private: bool | None = None,
    keepalive_expiry: float = 5.0,
    deadline: float | None = None,
    max_response_bytes: int | None = None,
) -> httpx.Client:
    """An httpx client that connects only to addresses ``address_allowed`` accepts.
    ``keepalive_expiry``: seconds an idle connection is kept for reuse (httpx's default).
    Each request ends within ``deadline`` seconds in all (default: ``timeout``) and reads at
    most ``max_response_bytes`` of body (default: OUTBOUND_MAX_RESPONSE_BYTES), or raises
    httpx's timeouts and ResponseTooLarge."""
    # trust_env=False: an HTTP(S)_PROXY in the environment would make the proxy, not us,
    # resolve the name, and the address check would be meaningless.
    return httpx.Client(
        transport=GuardedTransport(
            limits=httpx.Limits(max_connections=max_connections, keepalive_expiry=keepalive_expiry),
            allow_private=allow_private,
            limits_each=_limits(timeout, deadline, max_response_bytes),
        ),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


def connection_dropped(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a connection lost after it was opened: the server
    closed it or reset it (e.g. an idle keep-alive connection it had just timed out), as
    opposed to one that could not be opened or a timeout."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class GuardedAsyncBackend(httpcore.AnyIOBackend):
    """``GuardedBackend`` for async clients (the MCP client, runtime.tools.servers): the same
    resolve-check-connect, so that the address checked is the address connected to."""

    def __init__(self, *, allow_private: bool | None = None):
        self.allow_private = allow_private

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        refused = []
        last_error: Exception | None = None
        for _family, _type, _proto, _canon, sockaddr in infos:
            ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            if not address_allowed(ip, allow_private=self.allow_private):
                refused.append(str(ip))
                continue
            try:
                wait = wait_left(timeout, httpcore.ConnectTimeout)
                stream = await super().connect_tcp(
                    str(ip), port, wait, local_address, socket_options
                )
                return AsyncDeadlineStream(stream)
            except httpcore.ConnectError as exc:
                last_error = exc
        if last_error is not None:
            raise last_error
        raise OutboundRefused(f"{host} resolves only to refused addresses ({', '.join(refused)})")


class GuardedAsyncTransport(httpx.AsyncHTTPTransport):
    def __init__(self, *, limits_each: Limits, allow_private: bool | None = None, **kwargs):
        super().__init__(**kwargs)
        self._pool._network_backend = GuardedAsyncBackend(allow_private=allow_private)
        self.limits_each = limits_each

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        deadline = request_begin(request, self.limits_each)
        token = current_deadline.set(deadline)
        try:
            response = await super().handle_async_request(request)
        finally:
            current_deadline.reset(token)
        try:
            body = body_for(response, self.limits_each, deadline)
        except httpx.DecodingError:
            await response.aclose()
            raise
        if not isinstance(response.stream, httpx.AsyncByteStream):  # as httpx checks it
            raise RuntimeError("Attempted to call an async iterator on a sync stream.")
        response.stream = AsyncCappedStream(response.stream, body)
        return response


def guarded_async_client(
    *,
    timeout: float | httpx.Timeout,
    headers: dict[str, str] | None = None,
    max_connections: int = 10,
    allow_private: bool | None = None,
    deadline: float | None = None,
    max_response_bytes: int | None = None,
    on_too_large: Callable[[ResponseTooLarge], None] | None = None,
) -> httpx.AsyncClient:
    """``guarded_client``, async: for SDKs that take an ``httpx.AsyncClient`` (mcp)."""
    return httpx.AsyncClient(
        transport=GuardedAsyncTransport(
            limits=httpx.Limits(max_connections=max_connections),
            allow_private=allow_private,
            limits_each=_limits(timeout, deadline, max_response_bytes, on_too_large),
        ),
        timeout=timeout,
        headers=headers,
        follow_redirects=False,
        trust_env=False,
    )


def fetch_url(
    url: str,
    *,
    allowed_hosts: Iterable[str],
    max_bytes: int,
    timeout: float,
    check_media_type: Callable[[str], None] | None = None,
) -> tuple[bytes, str]:
    """GET a URL through the guard; return (body, media type) or raise OutboundRefused with
    a message a caller can act on. ``check_media_type`` sees the response's media type
    before the body is read and raises OutboundRefused to refuse it."""
    check_url(url, allowed_hosts)
    try:
        with (
            guarded_client(timeout=timeout, max_response_bytes=max_bytes) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise OutboundRefused(f"fetching {url} returned HTTP {response.status_code}")
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if check_media_type is not None:
                check_media_type(media_type)
            declared_length = response.headers.get("content-length", "")
            if declared_length.isdigit() and int(declared_length) > max_bytes:
                raise OutboundRefused(f"{url} is larger than {max_bytes} bytes")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise OutboundRefused(f"{url} is larger than {max_bytes} bytes")
            return bytes(body), media_type
    except httpx.TimeoutException:
        raise OutboundRefused(f"fetching {url} timed out after {timeout}s") from None
    except ResponseTooLarge:
        raise OutboundRefused(f"{url} is larger than {max_bytes} bytes") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        # InvalidURL is no HTTPError; url_parse refuses such URLs first, this is the backstop.
        raise OutboundRefused(f"fetching {url} failed: {exc}") from None


def webhook_headers(secrets, msg_id: str, body: str, now=None) -> dict:
    """The Standard Webhooks headers of one request: ``webhook-id``, ``webhook-timestamp`` and
    ``webhook-signature``, signed with each of ``secrets`` (one secret, or several during a
    rotation's grace period). Push deliveries, HTTP tool servers, HTTP agents and notification
    webhooks all sign this way."""
    now = now or timezone.now()
    if isinstance(secrets, str):
        secrets = [secrets]
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": " ".join(
            Webhook(secret).sign(msg_id=msg_id, timestamp=now, data=body) for secret in secrets
        ),
    }
