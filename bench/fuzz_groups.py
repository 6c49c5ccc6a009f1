"""Send N mutated requests to a live server's REST approval groups (``GET /api/v1/groups/<id>``,
``POST /api/v1/groups/<id>/answer``) and count how it answers.

Each request starts as a valid one for a group bench/fuzz_seed.py made (its id, and for an
answer ``{"approved": …, "reason": …, "argumentsHashes": {id: hash, …}}`` with the hashes of
its calls), by the demo operator token, and is then mutated: the group id as a hostile path
segment (NUL, a lone surrogate's bytes, bytes that are not UTF-8, 70,000 characters), the
body's values and keys as bench/fuzz_a2a.py mutates params (wrong types, NUL, lone
surrogates, 101 hashes, nesting, broken bytes), the verb, the content type, and the
credentials (a partner token, none, a hostile one). The seeded groups get decided as the run
goes on: later answers meet decided groups (409 and friends), as they should.

Loopback only. It prints the totals, the HTTP status histogram, the 5xx answers and transport
errors, and the error bodies that are not the API's JSON errors, with the first request of
each; it exits 1 if there are any, 2 if the time limit stopped it first.

    .venv/bin/python bench/fuzz_groups.py --url http://127.0.0.1:8731 \\
        --seed-file var/fuzz/seed.json --n 3000 --seed 1
"""

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fuzzkit import SERVER_REFUSED, Hostile, Tally, loopback_only  # noqa: E402

VERBS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


class GroupFuzzer(Hostile):
    def __init__(self, seed: int, items: dict):
        super().__init__(seed)
        self.groups = items["groups"] or [{"id": "g_missing", "interactions": []}]
        self.operator = items["operator_token"]
        self.partner = items["token"]

    def request(self) -> tuple[str, str, str, dict]:
        """(kind, verb, path, httpx's request arguments)."""
        rng = self.rng
        self.raw = []
        group = rng.choice(self.groups)
        segment = quote(group["id"], safe="") if rng.random() < 0.6 else self.path_segment()
        kind = rng.choice(["detail", "answer", "answer", "answer"])
        verb = "GET" if kind == "detail" else "POST"
        path = f"/api/v1/groups/{segment}" + ("/answer" if kind == "answer" else "")
        if rng.random() < 0.05:
            verb = rng.choice(VERBS)
        request: dict = {"headers": {"Content-Type": "application/json"}}
        credentials = rng.random()
        if credentials < 0.9:
            request["headers"]["Authorization"] = f"Bearer {self.operator}"
        elif credentials < 0.94:
            request["headers"]["Authorization"] = f"Bearer {self.partner}"
        elif credentials < 0.97:
            request["headers"]["Authorization"] = rng.choice(
                ["Bearer", "Bearer cs_" + "x" * 500, "Basic Zm9vOmJhcg==", "Bearer cs_\xe9"]
            ).encode("latin-1")
        if kind == "answer" or verb in ("POST", "PUT", "PATCH"):
            body: dict = {"approved": rng.choice([True, False])}
            if rng.random() < 0.6:
                body["reason"] = rng.choice(["ok", "", "x" * 1000, "x" * 1001])
            if rng.random() < 0.7:
                hashes = {m["id"]: m["hash"] for m in group["interactions"]}
                if rng.random() < 0.3 and hashes:
                    hashes.pop(rng.choice(list(hashes)))
                if rng.random() < 0.05:
                    hashes = {f"i_{n}": "0" * 64 for n in range(101)}
                body["argumentsHashes"] = hashes
            self.mutate(body)
            request["content"] = self.dumps(body)
            if rng.random() < 0.05:
                request["headers"]["Content-Type"] = rng.choice(
                    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
                )
        return kind, verb, path, request


def error_problem(response: httpx.Response) -> str | None:
    """Why an error answer is not the API's JSON error ({"detail": …}), or None."""
    if response.status_code < 400 or response.request.method == "HEAD":
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        if response.status_code == 400 and response.content == SERVER_REFUSED:
            return None
        # Paths that do not match (a NUL, an encoded slash) are Django's own 404 page.
        return None if response.status_code == 404 else "not JSON"
    if not isinstance(body, dict) or "detail" not in body:
        return "an error without detail"
    return None


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

    fuzzer = GroupFuzzer(args.seed, items)
    tally = Tally(n=args.n, time_limit=args.time_limit)
    with httpx.Client(timeout=args.timeout) as client:
        while tally.more():
            kind, verb, path, request = fuzzer.request()
            response = tally.send(client, kind, verb, base + path, **request)
            if response is not None:
                problem = error_problem(response)
                if problem:
                    tally.fail(problem, kind, (verb, path[:300], response.content[:200]))
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
