"""Tests, benchmarks and the demo never leave loopback, not even for a DNS lookup.

``LoopbackOnly`` stands in for ``socket.getaddrinfo`` (and ``gethostbyname``): loopback names
(``localhost``, ``*.localhost``), numeric addresses and the hosts of the services the run was
pointed at (``DATABASE_URL``, ``CELERY_BROKER_URL``) are looked up as before; a name a test
maps to fixed addresses (``answer``) gets those addresses, through the outbound guard like
any other answer; any other name raises ``LookupRefused``, which names it, and is recorded,
so that a stray ``example.com`` fails its test even where the product swallows the error.

``tests/conftest.py`` installs it in the test process; ``tests/loopback_site`` installs it
in the suite's Python subprocesses (the live stack's uvicorn and Celery worker), which
append what they refuse to the file named by ``LOOPBACK_ONLY_REPORT``. Standard library
only: a subprocess loads it before anything else.
"""

import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

REPORT_ENV = "LOOPBACK_ONLY_REPORT"
# The environment variables that name the services a run is pointed at (its database and
# its broker): reaching them is the run's configuration, not a test's stray lookup.
SERVICE_ENVS = ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "REDIS_URL")

Answer = Iterable[str] | Callable[[], Iterable[str] | str] | str


class LookupRefused(RuntimeError):
    """A name that is not loopback was looked up (a test about to leave the machine)."""


def is_loopback_name(host: str) -> bool:
    """``localhost`` and the names under it (RFC 6761 section 6.3), any case, any final dot."""
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def service_hosts(environ=os.environ) -> set[str]:
    hosts = set()
    for key in SERVICE_ENVS:
        try:
            host = urlsplit(environ.get(key) or "").hostname
        except ValueError:
            continue
        if host:
            hosts.add(host.lower())
    return hosts


class LoopbackOnly:
    def __init__(
        self, *, allowed: Iterable[str] = (), report: str | None = None, collect: str | None = None
    ):
        self.real = socket.getaddrinfo
        self.real_gethostbyname = socket.gethostbyname
        self.allowed = {h.lower().rstrip(".") for h in allowed}
        self.answers: dict[str, Answer] = {}
        self.refused: list[str] = []
        self.report = report  # a file to append refused names to (in a subprocess)
        self.collect = collect  # the file that subprocesses report to (in the test process)
        self._collected = 0
        self._lock = threading.Lock()

    def take_refused(self) -> list[str]:
        """What was refused since the last call: here, and in the subprocesses that report
        to ``collect``."""
        with self._lock:
            refused, self.refused = self.refused, []
        if self.collect:
            with open(self.collect, encoding="utf-8") as lines:
                lines.seek(self._collected)
                refused += [line.strip() for line in lines]
                self._collected = lines.tell()
        return refused

    def answer(self, name: str, addresses: Answer) -> None:
        """Have ``name`` resolve to ``addresses`` (a list, one address, or a callable that
        returns them at each lookup, e.g. to rebind a name between two lookups)."""
        self.answers[name.lower().rstrip(".")] = addresses

    def _numeric(self, host: str) -> bool:
        try:
            ipaddress.ip_address(host.split("%")[0])
            return True
        except ValueError:
            pass
        # What inet_aton also reads as an address ("127.1", "2130706433"): no lookup either.
        try:
            self.real(host, None, flags=socket.AI_NUMERICHOST)
            return True
        except (socket.gaierror, UnicodeError):
            return False

    def route(self, host) -> tuple[str | None, list[str] | None]:
        """(the name to look up, None), or (None, the fixed addresses a test gave the name);
        or LookupRefused."""
        if host is None:
            return None, None
        if isinstance(host, bytes | bytearray):
            host = bytes(host).decode("ascii", "replace")
        name = host.lower().rstrip(".")
        if name in self.answers:
            found = self.answers[name]
            found = found() if callable(found) else found
            return None, [found] if isinstance(found, str) else list(found)
        if is_loopback_name(name):
            # A name under .localhost is loopback by definition (RFC 6761): it is looked up
            # as localhost, not asked of a resolver that may not know it and ask DNS.
            return "localhost", None
        if not name or name in self.allowed or self._numeric(host):
            return host, None
        with self._lock:
            self.refused.append(host)
            if self.report:
                try:
                    with open(self.report, "a", encoding="utf-8") as out:
                        out.write(f"{os.getpid()} {host!r}\n")
                except OSError:
                    pass
        raise LookupRefused(
            f"tests never leave loopback: a lookup of {host!r} was refused "
            "(use 127.0.0.1 or a *.localhost name, or give the name fixed addresses with "
            "the loopback_only fixture's answer())"
        )

    def fixed(self, host, addresses, port, family=0, type=0, proto=0, flags=0):
        """getaddrinfo's answer for ``addresses``, read as numbers (no lookup)."""
        infos = []
        for address in addresses:
            try:
                infos += self.real(
                    address, port, family, type, proto, flags | socket.AI_NUMERICHOST
                )
            except socket.gaierror:
                continue  # an address of another family than the one asked for
        if not infos:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} has no address of that family")
        return infos

    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        name, addresses = self.route(host)
        if addresses is not None:
            return self.fixed(host, addresses, port, family, type, proto, flags)
        return self.real(name, port, family, type, proto, flags)

    def gethostbyname(self, host):
        name, addresses = self.route(host)
        if addresses is not None:
            return next(a for a in addresses if ":" not in a)
        return self.real_gethostbyname(name)


def install(guard: LoopbackOnly) -> Callable[[], None]:
    """Put ``guard`` in place of the socket module's lookups (and uvloop's, when it is
    installed: its loop resolves in C, not through the socket module); returns the undo."""
    saved = (socket.getaddrinfo, socket.gethostbyname)
    socket.getaddrinfo = guard.getaddrinfo
    socket.gethostbyname = guard.gethostbyname
    undo_uvloop = _install_in_uvloop(guard)

    def undo():
        socket.getaddrinfo, socket.gethostbyname = saved
        undo_uvloop()

    return undo


def _install_in_uvloop(guard: LoopbackOnly) -> Callable[[], None]:
    try:
        import uvloop
    except ImportError:
        return lambda: None
    original = uvloop.Loop.getaddrinfo

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        name, addresses = guard.route(host)
        if addresses is not None:
            return guard.fixed(host, addresses, port, family, type, proto, flags)
        return await original(self, name, port, family=family, type=type, proto=proto, flags=flags)

    uvloop.Loop.getaddrinfo = getaddrinfo

    def undo():
        uvloop.Loop.getaddrinfo = original

    return undo
