"""What the fuzzers (bench/fuzz_*.py) share: hostile values, mutations of a JSON body, broken
bytes, the loopback-only check of the target, and the tally of the answers.

Hostile values: NUL, lone surrogates, strings just over each column's length, any code point,
NaN, Infinity, 1e400, huge integers, wrong types, and nesting up to 100,000 levels (written
into the text after json.dumps, which cannot write them).
"""

import ipaddress
import json
import random
import re
import socket
import sys
import time
import uuid
from collections import Counter
from urllib.parse import urlsplit

import httpx

HOSTILE_TEXT = [
    "",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\ud83d",
    "\n",
    "c" * 128 + "\n",
    "²",
    "٣",
    "\U0001f600",
    "TASK_STATE_WORKING",
    "ROLE_USER",
    "NaN",
    "%00",
    "\\u0000",
    "'; drop table runtime_task; --",
    "../../etc/passwd",
    "${jndi:ldap://x}",
]
LENGTHS = [80, 81, 100, 101, 128, 129, 200, 201, 253, 254, 300, 301, 1000, 1001, 2000, 2001, 70_000]
HOSTILE_NUMBERS = [0, -1, 1, 2**31, 2**31 - 1, 2**63, -(2**63) - 1, 10**308, 10**400, -(10**400)]
# Written into the body after json.dumps: literals json.dumps cannot write, and deep nesting.
RAW_NUMBERS = ["1e400", "-1e999", "1" + "0" * 4000, "NaN", "Infinity", "-Infinity", "1E-400"]
DEPTHS = [10, 63, 64, 65, 100, 957, 958, 1000, 5000, 100_000]
_RAW = re.compile(r'"@raw(\d+)"')


class Hostile:
    """Hostile values and mutations, repeatable from a seed."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.raw: list[str] = []  # text spliced in for the "@rawN" markers of the next body

    def _raw(self, text: str) -> str:
        self.raw.append(text)
        return f"@raw{len(self.raw) - 1}"

    def text(self) -> str:
        rng = self.rng
        pick = rng.random()
        if pick < 0.35:
            return rng.choice(HOSTILE_TEXT)
        if pick < 0.55:
            return rng.choice("ab\x00\ud800é") * rng.choice(LENGTHS)
        if pick < 0.85:
            # Any code point: controls, surrogates, private use, unassigned.
            return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(1, 12)))
        return uuid.uuid4().hex[: rng.randrange(1, 32)]

    def hostile(self, depth: int = 0, *, raw: bool = True):
        """Any hostile value; ``raw``: also literals and nesting spliced into the JSON text
        (not for a value that is not sent as JSON text)."""
        rng = self.rng
        pick = rng.random()
        if pick < 0.4:
            return self.text()
        if pick < 0.55:
            return rng.choice(HOSTILE_NUMBERS)
        if pick < 0.65:
            return rng.choice([float("nan"), float("inf"), -float("inf"), 1.5, -0.0])
        if raw and pick < 0.72:
            return self._raw(rng.choice(RAW_NUMBERS))
        if raw and pick < 0.8:
            levels = rng.choice(DEPTHS)
            opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
            return self._raw(opener * levels + "1" + closer * levels)
        if pick < 0.88 or depth > 2:
            return rng.choice([None, True, False, [], {}, [None], {"": None}])
        if pick < 0.94:
            return [self.hostile(depth + 1, raw=raw) for _ in range(rng.randrange(1, 4))]
        return {self.text(): self.hostile(depth + 1, raw=raw) for _ in range(rng.randrange(1, 4))}

    def _places(self, value):
        """Every (container, key) of ``value``, at any depth."""
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield value, key
            if isinstance(item, dict | list):
                yield from self._places(item)

    def mutate(self, params, *, raw: bool = True, rounds=(0, 1, 1, 1, 2, 3)):
        """Replace values by hostile ones, delete keys, add keys, in ``params`` (in place)."""
        rng = self.rng
        for _ in range(rng.choice(rounds)):
            places = list(self._places(params))
            kind = rng.random()
            if places and kind < 0.6:
                container, key = rng.choice(places)
                container[key] = self.hostile(raw=raw)
            elif places and kind < 0.7:
                container, key = rng.choice(places)
                del container[key]
            else:
                dicts = [params] if isinstance(params, dict) else []
                dicts += [c[k] for c, k in places if isinstance(c[k], dict)]
                if dicts:
                    rng.choice(dicts)[self.text()] = self.hostile(raw=raw)
        return params

    def dumps(self, value, *, mangle: float = 0.06) -> bytes:
        """``value`` as JSON bytes, the "@rawN" markers spliced in, lone surrogates written
        as they are (not UTF-8), and now and then the bytes broken."""
        text = json.dumps(value, ensure_ascii=self.rng.random() < 0.8)
        text = _RAW.sub(lambda m: self.raw[int(m.group(1))], text)
        self.raw = []
        data = text.encode("utf-8", "surrogatepass")
        if self.rng.random() < mangle:
            data = self.mangle(data)
        return data

    def mangle(self, data: bytes) -> bytes:
        rng = self.rng
        at = rng.randrange(len(data) + 1)
        pick = rng.random()
        if pick < 0.25:
            return data[:at]
        if pick < 0.5:
            return data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
        if pick < 0.7:
            return (
                data[:at]
                + rng.choice([b"\x00", b"\xff\xfe", b"\xc3", b"\\", b'"', b"]"])
                + data[at:]
            )
        if pick < 0.85:
            return rng.choice([b"\xef\xbb\xbf", b"\xff\xfe", b" \n\t"]) + data
        return rng.choice([b"[" + data + b"]", data + data, b"", b"null", b"[]"])

    def path_segment(self) -> str:
        """A hostile path segment, percent-encoded as a client would send it (a NUL, a lone
        surrogate's bytes, a dot segment, a very long one, an encoded slash)."""
        rng = self.rng
        pick = rng.random()
        if pick < 0.3:
            return rng.choice(
                ["%00", "a%00b", "%ED%A0%80", "%FF", "..", ".", "%2F", "%2e%2e", "%20", "~"]
            )
        if pick < 0.5:
            # httpx sends no URL past 65,536 characters.
            return "A" * min(rng.choice(LENGTHS), 20_000)
        raw = self.text().encode("utf-8", "surrogatepass")[:6000]
        return (
            "".join(
                chr(b) if b < 128 and (chr(b).isalnum() or chr(b) in "-_.") else f"%{b:02X}"
                for b in raw
            )
            or "%00"
        )


def loopback_only(url: str) -> None:
    """Exit unless ``url``'s host resolves to loopback addresses only."""
    host = urlsplit(url).hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as exc:
        sys.exit(f"cannot resolve {host!r}: {exc}")
    if not addresses or not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        sys.exit(f"refusing {host!r}: this fuzzer only sends to loopback addresses")


# uvicorn's own answer to a request it cannot parse (a control character in a header): the
# application never sees it.
SERVER_REFUSED = b"Invalid HTTP request received."


class Tally:
    """What the answers were: HTTP statuses, 5xx and transport errors (with the first
    request of each kind), and any other failure a fuzzer counts (``fail``)."""

    def __init__(self, *, n: int, time_limit: float):
        self.n, self.time_limit = n, time_limit
        self.started = time.monotonic()
        self.sent = 0
        self.statuses: Counter = Counter()
        self.kinds: Counter = Counter()  # what the fuzzer sent, by kind
        self.failures: Counter = Counter()
        self.examples: dict[str, str] = {}
        self.failed_by_kind: Counter = Counter()
        self.known: Counter = Counter()  # 5xx answers that are defects known already

    def more(self) -> bool:
        return self.sent < self.n and time.monotonic() - self.started < self.time_limit

    def fail(self, failure: str, kind: str, example) -> None:
        self.failures[failure] += 1
        self.failed_by_kind[f"{failure} / {kind}"] += 1
        self.examples.setdefault(f"{failure} / {kind}", repr(example)[:400])

    def send(self, client: httpx.Client, kind: str, method: str, url: str, *, known="", **request):
        """One request; the response, or None after a transport error (counted). ``known``:
        the defect, known already, that a 5xx answer to this request is (counted apart)."""
        self.sent += 1
        self.kinds[kind] += 1
        try:
            response = client.request(method, url, **request)
        except httpx.HTTPError as exc:
            self.fail(f"transport: {type(exc).__name__}", kind, (method, url, request))
            return None
        self.statuses[response.status_code] += 1
        if response.status_code >= 500 and known:
            self.known[known] += 1
            self.examples.setdefault(f"5xx known: {known}", repr((method, url, request))[:400])
        elif response.status_code >= 500:
            self.fail("5xx", kind, (method, url, request))
        return response

    def report(self, seed: int) -> int:
        """Print the totals; 1 if anything failed, 2 if the time limit stopped the run."""
        elapsed = time.monotonic() - self.started
        print(f"total: {self.sent} requests in {elapsed:.1f}s (seed {seed})")
        print("sent:", dict(sorted(self.kinds.items())))
        print("HTTP status:", dict(sorted(self.statuses.items())))
        transport = sum(v for k, v in self.failures.items() if k.startswith("transport"))
        others = {
            k: v for k, v in sorted(self.failures.items()) if k != "5xx" and "transport" not in k
        }
        print(f"5xx: {self.failures['5xx']}  transport errors: {transport}  other: {others}")
        for kind, count in sorted(self.failed_by_kind.items()):
            print(f"  {count} x {kind}; first: {self.examples[kind]}")
        if self.known:
            print(f"5xx of defects known already (not failures here): {sum(self.known.values())}")
            for known, count in sorted(self.known.items()):
                print(f"  {count} x {known}; first: {self.examples[f'5xx known: {known}']}")
        if any(self.failures.values()):
            return 1
        if self.sent < self.n:
            print(f"stopped by the time limit after {self.sent} of {self.n} requests")
            return 2
        return 0
