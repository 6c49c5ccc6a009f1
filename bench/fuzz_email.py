"""Send N mutated requests to a live server's e-mail decision links
(``/integrations/email/<token>/<approve|deny>``) and count how it answers.

Each request starts as what a recipient's browser sends: the link's page (GET), or the
confirmation posted from it (POST, with the page's CSRF token, ``reason`` and ``shown_hash``),
for a link bench/fuzz_seed.py minted; then it is mutated: the token and the action as hostile
path segments (NUL, a lone surrogate's bytes, bytes that are not UTF-8, dot segments, 70,000
characters), the verb, the form's values (NUL, lone surrogates, 1,001 characters, repeated
fields), the body's type and bytes (JSON, multipart, broken), and the CSRF token (left out:
403). The seeded links get spent as the run goes on: later posts meet spent links (410).

Loopback only. It prints the totals, the HTTP status histogram, and the 5xx answers and
transport errors, with the first request of each; it exits 1 if there are any, 2 if the time
limit stopped it first.

    .venv/bin/python bench/fuzz_email.py --url http://127.0.0.1:8731 \\
        --seed-file var/fuzz/seed.json --n 3000 --seed 1
"""

import argparse
import json
import re
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fuzzkit import Hostile, Tally, loopback_only  # noqa: E402

VERBS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
CSRF_INPUT = re.compile(rb'name="csrfmiddlewaretoken" value="([^"]+)"')
SHOWN_HASH = re.compile(rb'name="shown_hash" value="([0-9a-f]{64})"')


class EmailFuzzer(Hostile):
    def __init__(self, seed: int, items: dict):
        super().__init__(seed)
        self.tokens = items["email_tokens"] or ["missing"]
        self.csrf = ""  # the last page's form token (its cookie is in the client)
        self.shown = "0" * 64

    def value(self, plain: str) -> str:
        """A form value: ``plain``, or a hostile text (as a browser would send it)."""
        return plain if self.rng.random() < 0.6 else self.text()

    def request(self) -> tuple[str, str, str, dict]:
        """(kind, verb, path, httpx's request arguments)."""
        rng = self.rng
        self.raw = []
        token = rng.choice(self.tokens)
        token = quote(token, safe="") if rng.random() < 0.7 else self.path_segment()
        action = rng.choice(["approve", "deny"]) if rng.random() < 0.85 else self.path_segment()
        path = f"/integrations/email/{token}/{action}"
        if rng.random() < 0.03:
            path += rng.choice(["/", "/x", "?a=%00"])
        kind = rng.choice(["page", "post", "post"])
        verb = "GET" if kind == "page" else "POST"
        if rng.random() < 0.05:
            verb = rng.choice(VERBS)
        request: dict = {}
        if verb in ("POST", "PUT", "PATCH"):
            fields = [("reason", self.value(rng.choice(["", "no", "x" * 1000, "x" * 1001])))]
            fields.append(("shown_hash", self.value(self.shown)))
            if rng.random() < 0.9:
                fields.append(("csrfmiddlewaretoken", self.csrf))
            if rng.random() < 0.1:
                fields.append(("reason", self.text()))
            rng.shuffle(fields)
            pick = rng.random()
            if pick < 0.85:
                body = urlencode(fields, errors="surrogatepass").encode()
                kind_header = "application/x-www-form-urlencoded"
            elif pick < 0.92:
                body = self.dumps(self.mutate(dict(fields)))
                kind_header = "application/json"
            else:
                body = b"--b\r\nContent-Disposition: form-data; name=reason\r\n\r\n\x00\r\n--b--"
                kind_header = rng.choice(["multipart/form-data; boundary=b", "multipart/form-data"])
            if rng.random() < 0.05:
                body = self.mangle(body)
            request = {
                "content": body,
                "headers": {"Content-Type": kind_header, "X-CSRFToken": self.csrf}
                if rng.random() < 0.05
                else {"Content-Type": kind_header},
            }
        return kind, verb, path, request

    def learned(self, response: httpx.Response) -> None:
        """The page's CSRF token and shown hash, for the posts that follow."""
        found = CSRF_INPUT.search(response.content)
        if found:
            self.csrf = found.group(1).decode()
        shown = SHOWN_HASH.search(response.content)
        if shown:
            self.shown = shown.group(1).decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's base URL, on loopback")
    parser.add_argument("--seed-file", required=True, help="bench/fuzz_seed.py's output")
    parser.add_argument("--n", type=int, default=3000, help="requests to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=1800, help="seconds for the run")
    parser.add_argument("--timeout", type=float, default=30, help="seconds for one request")
    args = parser.parse_args()
    loopback_only(args.url)
    items = json.loads(Path(args.seed_file).read_text())
    base = args.url.rstrip("/")

    fuzzer = EmailFuzzer(args.seed, items)
    tally = Tally(n=args.n, time_limit=args.time_limit)
    with httpx.Client(timeout=args.timeout) as client:
        while tally.more():
            kind, verb, path, request = fuzzer.request()
            response = tally.send(client, kind, verb, base + path, **request)
            if response is not None and verb == "GET":
                fuzzer.learned(response)
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
