"""Send N signed, mutated Slack interactivity requests to a live server's Slack endpoint
(``/integrations/slack/<tenant>/interactions``) and count how it answers.

Each request is what Slack would send for the tenant's app (bench/fuzz_seed.py made it, and
the items it aims at): a ``block_actions`` click of ``cs_approve``, ``cs_deny``,
``cs_similar``, ``cs_answer``, ``cs_choice:N`` (or another action id), or a
``view_submission`` of the deny, answer and allow-similar modals, signed with the app's
signing secret as Slack signs. Then it is mutated: the item id, the shown hash, the user,
channel, message ts and trigger id, the reason, the answer, the choice, the duration and the
conditions replaced by hostile values (NUL, lone surrogates, 70,000 characters, wrong types),
the private metadata broken, the payload's ``type`` changed, the JSON or the bytes broken;
now and then the signature is wrong or the timestamp old (401 is the answer then).

A local stand-in for Slack's Web API (tests/integrations/slack/standin.py) answers the
server's ``views.open``, ``users.info`` and ``chat.postEphemeral`` on ``--slack-port``: start
the server and its worker with ``SLACK_API_URL=http://127.0.0.1:<port>/api/``. The Slack
user ``U0FUZZOP1`` is the demo operator there, so that clicks reach the decision flow.

Loopback only. It prints the totals, the HTTP status histogram and the 5xx answers and
transport errors, the 5xx split into the defects known when this was written (a NUL in the
item id, a NUL in a deny reason: counted apart) and any other; it exits 1 if there is any
other, 2 if the time limit stopped it first.

    .venv/bin/python bench/fuzz_slack.py --url http://127.0.0.1:8731 \\
        --seed-file var/fuzz/seed.json --slack-port 8732 --n 3000 --seed 1
"""

import argparse
import hashlib
import hmac
import json
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fuzzkit import Hostile, Tally, loopback_only  # noqa: E402
from tests.integrations.slack.standin import SlackStandIn  # noqa: E402

APPROVE, DENY, SIMILAR, ANSWER, CHOICE = (
    "cs_approve",
    "cs_deny",
    "cs_similar",
    "cs_answer",
    "cs_choice",
)
OPERATOR, STRANGER, UNCONFIRMED = "U0FUZZOP1", "U0FUZZST2", "U0FUZZUC3"
CHANNEL = "C0FUZZ"
DURATIONS = ["1h", "8h", "1d", "7d", "30d", "forever", "", "1y"]


class SlackFuzzer(Hostile):
    def __init__(self, seed: int, items: dict):
        super().__init__(seed)
        self.approvals = items["approvals"] or [{"id": "a_missing", "hash": ""}]
        self.questions = items["questions"] or [{"id": "q_missing", "choices": 2}]
        self.features: set[str] = set()

    def maybe(self, value, p: float = 0.15):
        """``value``, or now and then a hostile one (not spliced JSON: the payload is a form
        field's value)."""
        return self.hostile(raw=False) if self.rng.random() < p else value

    def item(self, kind: str) -> tuple[str, str, int]:
        """(item id, shown hash, choices) of a seeded item, or a hostile id."""
        rng = self.rng
        if kind == "question":
            found = rng.choice(self.questions)
            return found["id"], "", found["choices"]
        found = rng.choice(self.approvals)
        return found["id"], found["hash"], 0

    def item_id(self, real: str):
        value = self.maybe(real, 0.3)
        if isinstance(value, str) and "\x00" in value:
            self.features.add("nul item id")
        return value

    def user(self):
        rng = self.rng
        return self.maybe(rng.choice([OPERATOR, OPERATOR, OPERATOR, STRANGER, UNCONFIRMED]))

    def block_actions(self) -> dict:
        rng = self.rng
        action = rng.choice([APPROVE, APPROVE, DENY, SIMILAR, ANSWER, "choice", "cs_open", "x"])
        real, shown, choices = self.item("question" if action in (ANSWER, "choice") else "approval")
        if action == "choice":
            number = rng.choice([0, 1, max(choices - 1, 0), choices, -1, 10**6])
            action = rng.choice([f"{CHOICE}:{number}", f"{CHOICE}:", f"{CHOICE}:x", f"{CHOICE}:٣"])
        value = {"i": self.item_id(real), "h": self.maybe(shown)}
        if rng.random() < 0.1:
            value = self.hostile(raw=False)
        encoded = json.dumps(value) if rng.random() > 0.05 else self.text()
        return {
            "type": "block_actions",
            "user": {"id": self.user(), "team_id": "T0FUZZ"},
            "team": {"id": "T0FUZZ"},
            "channel": {"id": self.maybe(CHANNEL)},
            "container": {
                "type": "message",
                "message_ts": self.maybe(f"{int(time.time())}.000100"),
                "channel_id": CHANNEL,
            },
            "trigger_id": self.maybe("1337.42.abcdef"),
            "response_url": "https://hooks.slack.invalid/actions/T0FUZZ/1/x",
            "actions": [
                {
                    "type": "button",
                    "action_id": self.maybe(action, 0.05),
                    "block_id": "decide",
                    "value": self.maybe(encoded, 0.05),
                    "action_ts": str(time.time()),
                }
            ],
        }

    def view_submission(self) -> dict:
        rng = self.rng
        callback = rng.choice([DENY, DENY, ANSWER, ANSWER, SIMILAR, "cs_other"])
        real, shown, choices = self.item("question" if callback == ANSWER else "approval")
        metadata = {"i": self.item_id(real), "h": self.maybe(shown), "c": self.maybe(CHANNEL)}
        values: dict = {}
        if callback == DENY:
            reason = self.maybe(rng.choice(["no", "not today", "x" * 1000, "x" * 1001, ""]), 0.4)
            if isinstance(reason, str) and "\x00" in reason:
                self.features.add("nul deny reason")
            values["reason"] = {"reason": {"type": "plain_text_input", "value": reason}}
        elif callback == ANSWER:
            if rng.random() < 0.6:
                option = {"value": self.maybe(str(rng.randrange(-1, choices + 2)), 0.3)}
                values["choice"] = {"choice": {"type": "radio_buttons", "selected_option": option}}
            if rng.random() < 0.5:
                custom = self.maybe(rng.choice(["staging", "x" * 2001, ""]), 0.4)
                values["custom"] = {"custom": {"type": "plain_text_input", "value": custom}}
        elif callback == SIMILAR:
            duration = {"value": self.maybe(rng.choice(DURATIONS))}
            values["duration"] = {
                "duration": {"type": "static_select", "selected_option": duration}
            }
            if rng.random() < 0.5:
                scope = [{"value": self.maybe("caller_only")}]
                values["scope"] = {"scope": {"type": "checkboxes", "selected_options": scope}}
            if rng.random() < 0.5:
                fields = [{"value": self.maybe(f)} for f in ("environment", "build", "x")]
                values["conditions"] = {
                    "conditions": {"type": "checkboxes", "selected_options": fields}
                }
        self.mutate(values, raw=False, rounds=(0, 0, 1, 2))
        private = json.dumps(metadata) if rng.random() > 0.05 else self.maybe(self.text(), 1)
        return {
            "type": "view_submission",
            "user": {"id": self.user(), "team_id": "T0FUZZ"},
            "team": {"id": "T0FUZZ"},
            "view": {
                "id": "V0FUZZ",
                "callback_id": self.maybe(callback, 0.05),
                "private_metadata": private,
                "state": {"values": self.maybe(values, 0.05)},
            },
        }

    def request(self, secret: str) -> tuple[str, bytes, dict]:
        """(kind, body, headers) of one signed request."""
        rng = self.rng
        self.features = set()
        pick = rng.random()
        if pick < 0.5:
            kind, payload = "block_actions", self.block_actions()
        elif pick < 0.95:
            kind, payload = "view_submission", self.view_submission()
        else:
            kind, payload = "other", self.hostile(raw=False)
        if isinstance(payload, dict) and rng.random() < 0.05:
            payload["type"] = self.hostile(raw=False)
        text = json.dumps(payload, ensure_ascii=rng.random() < 0.7)
        if rng.random() < 0.03:
            text = self.mangle(text.encode("utf-8", "surrogatepass")).decode("utf-8", "replace")
        body = urlencode({"payload": text}, errors="surrogatepass").encode()
        if rng.random() < 0.03:
            body = self.mangle(body)
        timestamp = str(int(time.time()))
        pick = rng.random()
        if pick < 0.03:
            timestamp = str(int(time.time()) - 3600)
        # Slack's signature, over the bytes (slack_sdk's signs text, and these may not be).
        base = b"v0:" + timestamp.encode() + b":" + body
        signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        if pick > 0.97:
            signature = rng.choice(["", "v0=" + "0" * 64, signature[:-1] + "0", "v1=x"])
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature,
        }
        return kind, body, headers


KNOWN = ("nul item id", "nul deny reason")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's base URL, on loopback")
    parser.add_argument("--seed-file", required=True, help="bench/fuzz_seed.py's output")
    parser.add_argument("--slack-port", type=int, required=True, help="the Web API stand-in's")
    parser.add_argument("--n", type=int, default=3000, help="requests to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=1800, help="seconds for the run")
    parser.add_argument("--timeout", type=float, default=30, help="seconds for one request")
    args = parser.parse_args()
    loopback_only(args.url)
    items = json.loads(Path(args.seed_file).read_text())
    secret = items["slack"]["signing_secret"]
    endpoint = f"{args.url.rstrip('/')}/integrations/slack/{items['tenant']}/interactions"

    standin = SlackStandIn(token=items["slack"]["bot_token"], port=args.slack_port).start()
    standin.user(OPERATOR, items["operator_email"])
    standin.user(STRANGER, f"stranger-{uuid.uuid4().hex[:6]}@elsewhere.test")
    standin.user(UNCONFIRMED, items["operator_email"], confirmed=False)
    fuzzer = SlackFuzzer(args.seed, items)
    tally = Tally(n=args.n, time_limit=args.time_limit)
    try:
        with httpx.Client(timeout=args.timeout) as client:
            while tally.more():
                kind, body, headers = fuzzer.request(secret)
                known = ", ".join(sorted(f for f in fuzzer.features if f in KNOWN))
                tally.send(
                    client, kind, "POST", endpoint, content=body, headers=headers, known=known
                )
    finally:
        standin.stop()
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
