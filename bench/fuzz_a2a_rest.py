"""Send N mutated requests to a live agent's HTTP+JSON binding (A2A 1.0 §11) and count how
it answers.

Each request starts as a valid one of a route the binding serves (``POST …/message:send``,
``GET …/tasks/{id}``, ``GET …/tasks?…``, ``POST …/tasks/{id}:cancel``, the push-config routes,
``GET …/extendedAgentCard``), aimed at the tasks and configs the run has made, and is then
mutated: its JSON body as bench/fuzz_a2a.py mutates params (hostile values, keys, nesting,
broken bytes), its ids as hostile path segments (NUL, a lone surrogate's bytes, bytes that
are not UTF-8, dot segments, 70,000 characters), its query values, its verb (one the route
does not take), and its headers (``A2A-Version``, ``Content-Type``, ``A2A-Extensions``).
Streams (``message:stream``, ``:subscribe``) are only sent for tasks that do not exist.

Loopback only. It prints the totals, the HTTP status histogram, and the 5xx answers, the
transport errors and the error bodies that are not ``google.rpc.Status`` (AIP-193), with the
first request of each; it exits 1 if there are any, 2 if the time limit stopped it first.

    .venv/bin/python bench/fuzz_a2a_rest.py --url http://127.0.0.1:8731/a2a/demo/support \\
        --token cs_... --n 3000 --seed 1

Set the server up as for bench/fuzz_a2a.py (bench/README.md): its receivers and file URLs
are http://127.0.0.1:9 (discard, refused).
"""

import argparse
import json
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fuzz_a2a import STATES, Fuzzer  # noqa: E402
from bench.fuzzkit import SERVER_REFUSED, Tally, loopback_only  # noqa: E402

VERBS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
LIST_KEYS = [
    "contextId",
    "status",
    "pageSize",
    "pageToken",
    "historyLength",
    "statusTimestampAfter",
    "includeArtifacts",
]


class RestFuzzer(Fuzzer):
    def segment(self, real: str) -> str:
        """An id for a path: the real one mostly, else a hostile one."""
        return quote(real, safe="") if self.rng.random() < 0.6 else self.path_segment()

    def query_value(self) -> str:
        rng = self.rng
        if rng.random() < 0.5:
            return quote(str(self.hostile(raw=False)), safe="", errors="surrogatepass")[:10_000]
        return self.path_segment()

    def request(self) -> tuple[str, str, str, dict]:
        """(kind, verb, path under the agent's URL, httpx's request arguments)."""
        rng = self.rng
        self.raw = []
        kind = rng.choice(
            ["send", "send", "get", "list", "list", "cancel", "configs", "config", "card", "stream"]
        )
        body = None
        query: list[tuple[str, str]] = []
        task = self.segment(self.task_id())
        if kind == "send":
            verb, path = "POST", "/message:send"
            body = self.mutate(self.params("SendMessage"))
        elif kind == "get":
            verb, path = "GET", f"/tasks/{task}"
            if rng.random() < 0.5:
                query.append(("historyLength", str(rng.randrange(-2, 30))))
        elif kind == "list":
            verb, path = "GET", "/tasks"
            for key in LIST_KEYS:
                if rng.random() < 0.3:
                    value = {
                        "contextId": lambda: self._one(self.contexts, "ctx-1"),
                        "status": lambda: rng.choice(STATES + ["working", "WORKING", "x"]),
                        "pageSize": lambda: str(rng.randrange(-1, 120)),
                        "pageToken": lambda: self._one(self.list_tokens, ""),
                        "historyLength": lambda: str(rng.randrange(0, 20)),
                        "statusTimestampAfter": lambda: "2020-01-01T00:00:00Z",
                        "includeArtifacts": lambda: rng.choice(["true", "false", "1", "yes"]),
                    }[key]()
                    query.append((key, quote(value, safe="")))
        elif kind == "cancel":
            verb, path = "POST", f"/tasks/{task}:cancel"
        elif kind == "configs":
            verb = rng.choice(["GET", "POST"])
            path = f"/tasks/{task}/pushNotificationConfigs"
            if verb == "POST":
                body = self.mutate(self.push_config())
            elif rng.random() < 0.3:
                query.append(("pageSize", str(rng.randrange(-1, 120))))
        elif kind == "config":
            task_id, config_id = self._one(self.configs, (self.task_id(), "hook"))
            verb = rng.choice(["GET", "DELETE"])
            path = (
                f"/tasks/{self.segment(task_id)}/pushNotificationConfigs/{self.segment(config_id)}"
            )
        elif kind == "card":
            verb, path = "GET", "/extendedAgentCard"
        else:
            # Streams only for tasks that do not exist: a real one's stream lasts.
            missing = self.path_segment() if rng.random() < 0.5 else f"t1.{uuid.uuid4().hex}"
            verb, path = rng.choice(
                [("POST", f"/tasks/{missing}:subscribe"), ("GET", f"/tasks/{missing}:subscribe")]
            )
        # Query mutations: hostile values, unknown and repeated keys.
        for _ in range(rng.choice([0, 0, 1, 2])):
            key = rng.choice(LIST_KEYS + ["x", "%00", "a" * 300])
            query.append((key, self.query_value()))
        if rng.random() < 0.05:
            verb = rng.choice(VERBS)
        headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
        pick = rng.random()
        if pick < 0.05:
            headers["A2A-Version"] = rng.choice(
                ["0.3", "2.0", "", "1.0, 1.0", "\x7f", "1.0\xff"]
            ).encode("latin-1")
        elif pick < 0.08:
            del headers["A2A-Version"]
        elif pick < 0.11:
            headers["Content-Type"] = rng.choice(["text/plain", "application/json; charset=latin1"])
        elif pick < 0.14:
            headers["A2A-Extensions"] = rng.choice(
                ["x", "https://docs.nylorun.com/a2a/interactions/v1, ,", "é" * 3, "a," * 500]
            ).encode("utf-8")
        request: dict = {"headers": headers}
        if body is not None or (verb in ("POST", "PUT", "PATCH") and rng.random() < 0.5):
            request["content"] = self.dumps(body if body is not None else self.hostile())
        if query:
            path += "?" + "&".join(f"{quote(k, safe='%')}={v}" for k, v in query)
        return kind, verb, path, request

    def learned(self, kind: str, response: httpx.Response) -> None:
        try:
            body = response.json()
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        if kind == "send":
            self.learn("SendMessage", {"result": body})
        elif kind == "get":
            self.learn("GetTask", {"result": body})
        elif kind == "list":
            self.learn("ListTasks", {"result": body})
        elif kind == "configs" and "id" in body and "taskId" in body:
            self.learn("CreateTaskPushNotificationConfig", {"result": body})


def status_problem(response: httpx.Response) -> str | None:
    """Why an error answer is not a google.rpc.Status, or None (405s and 404s of paths the
    binding does not serve may be Django's own)."""
    if response.status_code < 400 or response.status_code == 405:
        return None
    if response.request.method == "HEAD":
        return None  # no body, by definition
    try:
        body = json.loads(response.content)
    except ValueError:
        if response.status_code == 400 and response.content == SERVER_REFUSED:
            return None
        return None if response.status_code == 404 else "not JSON"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return "an error that is not a google.rpc.Status"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the agent's URL, on loopback")
    parser.add_argument("--token", required=True, help="a partner token of the agent's tenant")
    parser.add_argument("--n", type=int, default=3000, help="requests to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=1800, help="seconds for the run")
    parser.add_argument("--timeout", type=float, default=30, help="seconds for one request")
    args = parser.parse_args()
    loopback_only(args.url)
    base = args.url.rstrip("/")

    fuzzer = RestFuzzer(args.seed)
    tally = Tally(n=args.n, time_limit=args.time_limit)
    auth = {"Authorization": f"Bearer {args.token}"}
    with httpx.Client(timeout=args.timeout, headers=auth) as client:
        while tally.more():
            kind, verb, path, request = fuzzer.request()
            response = tally.send(client, kind, verb, base + path, **request)
            if response is None:
                continue
            problem = status_problem(response)
            if problem:
                tally.fail(problem, kind, (verb, path[:300], response.content[:200]))
            elif response.status_code == 200:
                fuzzer.learned(kind, response)
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
