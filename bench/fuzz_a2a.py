"""Send N mutated JSON-RPC bodies to a live A2A endpoint and count how it answers.

An outside probe of this kind once found bodies the endpoint answered with a 500; this is ours.
Each body starts as
a valid request of one of the methods the endpoint serves (or an unknown one), aimed at tasks
and push configs the run has made, and is then mutated: values replaced by hostile ones (NUL,
lone surrogates, strings longer than their columns, NaN, Infinity, 1e400, huge integers,
wrong types), keys added, nesting deepened (up to 100,000 levels), the envelope broken, and
now and then the bytes themselves (truncated, flipped, not UTF-8).

Run by hand against a server of your own; never part of the test run. Loopback only: the
script refuses any other host. It prints the totals, the HTTP status histogram, the JSON-RPC
error code histogram, and the number of 5xx answers, -32603 errors and answers that are not
JSON-RPC; it exits 1 if there are any, 2 if the time limit stopped it first.

    .venv/bin/python bench/fuzz_a2a.py --url http://127.0.0.1:8731/a2a/demo/support \\
        --token cs_... --n 20000 --seed 1

Keep the live server's deliveries and file fetches on loopback too (see bench/README.md):
the requests name receivers at http://127.0.0.1:9 (discard, refused).
"""

import argparse
import base64
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

SERVED = [
    "SendMessage",
    "GetTask",
    "CancelTask",
    "ListTasks",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
]
UNKNOWN = ["SendStreamingMessage", "GetExtendedAgentCard", "sendMessage", "tasks/get", "", "\x00"]
RECEIVER = "http://127.0.0.1:9/hook"
STATES = [
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_UNSPECIFIED",
]
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


class Fuzzer:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.raw: list[str] = []  # text spliced in for the "@rawN" markers of the next body
        self.tasks: list[str] = []
        self.contexts: list[str] = []
        self.configs: list[tuple[str, str]] = []
        self.list_tokens: list[str] = []

    # --- values ------------------------------------------------------------------------------

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

    def hostile(self, depth: int = 0):
        rng = self.rng
        pick = rng.random()
        if pick < 0.4:
            return self.text()
        if pick < 0.55:
            return rng.choice(HOSTILE_NUMBERS)
        if pick < 0.65:
            return rng.choice([float("nan"), float("inf"), -float("inf"), 1.5, -0.0])
        if pick < 0.72:
            return self._raw(rng.choice(RAW_NUMBERS))
        if pick < 0.8:
            levels = rng.choice(DEPTHS)
            opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
            return self._raw(opener * levels + "1" + closer * levels)
        if pick < 0.88 or depth > 2:
            return rng.choice([None, True, False, [], {}, [None], {"": None}])
        if pick < 0.94:
            return [self.hostile(depth + 1) for _ in range(rng.randrange(1, 4))]
        return {self.text(): self.hostile(depth + 1) for _ in range(rng.randrange(1, 4))}

    def _one(self, items: list, fallback: str) -> str:
        return self.rng.choice(items) if items and self.rng.random() < 0.8 else fallback

    def task_id(self) -> str:
        return self._one(self.tasks, f"t1.{uuid.uuid4().hex[:16]}")

    # --- valid requests -----------------------------------------------------------------------

    def push_config(self) -> dict:
        rng = self.rng
        config = {"url": RECEIVER}
        if rng.random() < 0.6:
            config["id"] = rng.choice(["hook", f"cfg-{rng.randrange(1000)}", "c" * 200])
        if rng.random() < 0.5:
            config["token"] = rng.choice(["tok", "t" * 1000])
        if rng.random() < 0.4:
            config["authentication"] = {"scheme": rng.choice(["Bearer", "s" * 100])}
            if rng.random() < 0.5:
                config["authentication"]["credentials"] = "secret"
        return config

    def part(self) -> dict:
        rng = self.rng
        pick = rng.random()
        if pick < 0.6:
            return {"text": rng.choice(["hello", "main", "approve", "x" * 300])}
        if pick < 0.85:
            return {"data": {"n": rng.randrange(100), "tags": ["a", "b"], "ok": True}}
        if pick < 0.95:
            return {"url": "http://127.0.0.1:9/a.txt", "mediaType": "text/plain"}
        return {"raw": base64.b64encode(b"hello").decode(), "mediaType": "text/plain"}

    def params(self, method: str) -> dict:
        rng = self.rng
        if method == "SendMessage":
            message = {
                "messageId": f"m-{uuid.uuid4()}",
                "role": "ROLE_USER",
                "parts": [self.part() for _ in range(rng.randrange(1, 4))],
            }
            if rng.random() < 0.3:
                message["contextId"] = self._one(self.contexts, f"ctx-{rng.randrange(50)}")
            if rng.random() < 0.2:
                message["taskId"] = self.task_id()
            if rng.random() < 0.2:
                message["metadata"] = {"note": "fuzz", "delivery": rng.choice(["queue", "reject"])}
            # Not blocking: a blocking send would wait for the worker, and the run is bounded.
            configuration = {"returnImmediately": True}
            if rng.random() < 0.3:
                configuration["historyLength"] = rng.randrange(0, 20)
            if rng.random() < 0.15:
                configuration["taskPushNotificationConfig"] = self.push_config()
            return {"message": message, "configuration": configuration}
        if method in ("GetTask", "CancelTask"):
            params = {"id": self.task_id()}
            if method == "GetTask" and rng.random() < 0.4:
                params["historyLength"] = rng.randrange(0, 20)
            return params
        if method == "ListTasks":
            params = {}
            for key, make in (
                ("contextId", lambda: self._one(self.contexts, "ctx-1")),
                ("status", lambda: rng.choice(STATES)),
                ("pageSize", lambda: rng.randrange(1, 101)),
                ("pageToken", lambda: self._one(self.list_tokens, "")),
                ("historyLength", lambda: rng.randrange(0, 20)),
                ("statusTimestampAfter", lambda: "2020-01-01T00:00:00Z"),
                ("includeArtifacts", lambda: rng.random() < 0.5),
            ):
                if rng.random() < 0.3:
                    params[key] = make()
            return params
        if method == "CreateTaskPushNotificationConfig":
            return {"taskId": self.task_id(), **self.push_config()}
        if method == "ListTaskPushNotificationConfigs":
            params = {"taskId": self.task_id()}
            if rng.random() < 0.3:
                params["pageSize"] = rng.randrange(1, 101)
            return params
        # Get and Delete a config.
        task_id, config_id = self._one(self.configs, (self.task_id(), "hook"))
        return {"taskId": task_id, "id": config_id}

    # --- mutations ----------------------------------------------------------------------------

    def _places(self, value):
        """Every (container, key) of ``value``, at any depth."""
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield value, key
            if isinstance(item, dict | list):
                yield from self._places(item)

    def mutate(self, params: dict) -> dict:
        rng = self.rng
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
            places = list(self._places(params))
            kind = rng.random()
            if places and kind < 0.6:
                container, key = rng.choice(places)
                container[key] = self.hostile()
            elif places and kind < 0.7:
                container, key = rng.choice(places)
                del container[key]
            else:
                dicts = [params] + [c[k] for c, k in places if isinstance(c[k], dict)]
                rng.choice(dicts)[self.text()] = self.hostile()
        return params

    def body(self) -> bytes:
        rng = self.rng
        self.raw = []
        method = rng.choice(SERVED) if rng.random() < 0.92 else rng.choice(UNKNOWN)
        params = self.mutate(self.params(method if method in SERVED else "GetTask"))
        envelope = {"jsonrpc": "2.0", "id": rng.randrange(1, 10**6), "method": method}
        envelope["params"] = params
        if rng.random() < 0.08:
            key = rng.choice(["jsonrpc", "id", "method", "params"])
            if rng.random() < 0.3:
                envelope.pop(key)
            else:
                envelope[key] = self.hostile()
        text = json.dumps(envelope, ensure_ascii=rng.random() < 0.8)
        text = _RAW.sub(lambda m: self.raw[int(m.group(1))], text)
        data = text.encode("utf-8", "surrogatepass")  # raw surrogates: not UTF-8
        if rng.random() < 0.06:
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

    # --- what the answers teach -----------------------------------------------------------------

    def learn(self, method: str, body: dict) -> None:
        result = body.get("result")
        if not isinstance(result, dict):
            return
        task = result.get("task") or (result if method in ("GetTask", "CancelTask") else None)
        if isinstance(task, dict) and isinstance(task.get("id"), str):
            if task["id"] not in self.tasks:
                self.tasks = (self.tasks + [task["id"]])[-200:]
            if task.get("contextId") and task["contextId"] not in self.contexts:
                self.contexts = (self.contexts + [task["contextId"]])[-100:]
        if method == "CreateTaskPushNotificationConfig" and "id" in result:
            self.configs = (self.configs + [(result["taskId"], result["id"])])[-100:]
        if method == "ListTasks" and result.get("nextPageToken"):
            self.list_tokens = (self.list_tokens + [result["nextPageToken"]])[-20:]


def loopback_only(url: str) -> None:
    host = urlsplit(url).hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as exc:
        sys.exit(f"cannot resolve {host!r}: {exc}")
    if not addresses or not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        sys.exit(f"refusing {host!r}: this fuzzer only sends to loopback addresses")


def _not_json(literal: str):
    raise ValueError(f"{literal} is not JSON")


def json_rpc_problem(response: httpx.Response) -> str | None:
    """Why an answer is not a JSON-RPC 2.0 response, or None."""
    try:
        body = json.loads(response.content, parse_constant=_not_json)
    except ValueError as exc:
        return f"not JSON: {exc}"
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return "not a JSON-RPC 2.0 object"
    if ("result" in body) == ("error" in body) or "id" not in body:
        return "needs id and exactly one of result and error"
    if "error" in body:
        error = body["error"]
        if not isinstance(error, dict) or not isinstance(error.get("code"), int):
            return "error without an integer code"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the agent's JSON-RPC URL, on loopback")
    parser.add_argument("--token", required=True, help="a partner token of the agent's tenant")
    parser.add_argument("--n", type=int, default=20_000, help="bodies to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=1800, help="seconds for the run")
    parser.add_argument("--timeout", type=float, default=30, help="seconds for one request")
    args = parser.parse_args()
    loopback_only(args.url)

    fuzzer = Fuzzer(args.seed)
    statuses: Counter = Counter()
    codes: Counter = Counter()
    failures: Counter = Counter()
    examples: dict[str, bytes] = {}
    headers = {
        "Authorization": f"Bearer {args.token}",
        "A2A-Version": "1.0",
        "Content-Type": "application/json",
    }
    started = time.monotonic()
    sent = 0
    with httpx.Client(timeout=args.timeout, headers=headers) as client:
        while sent < args.n and time.monotonic() - started < args.time_limit:
            data = fuzzer.body()
            sent += 1
            try:
                response = client.post(args.url, content=data)
            except httpx.HTTPError as exc:
                failures[f"transport: {type(exc).__name__}"] += 1
                examples.setdefault(f"transport: {type(exc).__name__}", data)
                continue
            statuses[response.status_code] += 1
            if response.status_code >= 500:
                failures["5xx"] += 1
                examples.setdefault("5xx", data)
            problem = json_rpc_problem(response)
            if problem:
                failures["not JSON-RPC"] += 1
                examples.setdefault("not JSON-RPC", data)
                continue
            body = response.json()
            if "error" in body:
                codes[body["error"]["code"]] += 1
                if body["error"]["code"] == -32603:
                    failures["-32603"] += 1
                    examples.setdefault("-32603", data)
            else:
                codes["result"] += 1
                try:
                    method = json.loads(data).get("method")
                except (ValueError, AttributeError, RecursionError):
                    method = None
                fuzzer.learn(method, body)
    elapsed = time.monotonic() - started

    print(f"total: {sent} bodies in {elapsed:.1f}s (seed {args.seed})")
    print("HTTP status:", dict(sorted(statuses.items())))
    print(
        "JSON-RPC:",
        dict(sorted(codes.items(), key=lambda kv: (kv[0] == "result", str(kv[0])))),
    )
    print(
        f"5xx: {failures['5xx']}  -32603: {failures['-32603']}  "
        f"not JSON-RPC: {failures['not JSON-RPC']}  "
        f"transport errors: {sum(v for k, v in failures.items() if k.startswith('transport'))}"
    )
    for kind, data in examples.items():
        print(f"first {kind} body: {data[:300]!r}")
    if any(failures.values()):
        return 1
    if sent < args.n:
        print(f"stopped by the time limit after {sent} of {args.n} bodies")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
