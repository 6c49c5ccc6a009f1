"""The webhook receivers of docs/samples (Python and Node.js), against the real sender: a
webhook channel's delivery of a held call, as Countersign signs and sends it, is verified and
printed once; the same delivery with its body, its signature or its timestamp changed is
refused. And docs/reference/webhook-events.md shows each event as the sender writes it."""

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from notifications.channel_settings import channel_save
from notifications.models import Channel
from tests.core import decide
from tests.live import ROOT, wait_until
from tests.notifications.test_delivery import hold

pytestmark = pytest.mark.django_db

SAMPLES = ROOT / "docs" / "samples"
EVENTS_PAGE = ROOT / "docs" / "reference" / "webhook-events.md"


class Recorder:
    """A local receiver that keeps each request as it came (headers and body), answering 200."""

    def __init__(self):
        self.requests: list[tuple[dict, bytes]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    made = Recorder()
    yield made
    made.stop()


class Sample:
    """A sample receiver run as a reader would run it, on a free loopback port."""

    def __init__(self, command: list[str], secret: str, log: Path):
        self.out = log.with_suffix(".out")
        self.err = log.with_suffix(".err")
        self.process = subprocess.Popen(
            [*command, "0"],
            cwd=SAMPLES,
            env={"WEBHOOK_SECRET": secret, "PATH": "/usr/bin:/bin"},
            stdout=self.out.open("w"),
            stderr=self.err.open("w"),
        )
        wait_until(lambda: "listening on" in self.err.read_text(), 20, what="the sample")
        self.url = re.search(r"listening on (\S+)", self.err.read_text()).group(1) + "hook"

    def printed(self) -> list[dict]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


def node() -> list[str]:
    if not shutil.which("node"):
        pytest.skip("no Node.js (node) on PATH: apt-get install nodejs")
    return [shutil.which("node"), "webhook-receiver.mjs"]


@pytest.fixture(params=["python", "node"])
def sample_command(request) -> list[str]:
    if request.param == "python":
        return [sys.executable, "webhook_receiver.py"]
    return node()


def post(url: str, headers: dict, body: bytes) -> int:
    sent = {k: v for k, v in headers.items() if k.startswith("webhook-") or k == "content-type"}
    return httpx.post(url, content=body, headers=sent, timeout=10).status_code


def test_a_sample_receiver_verifies_the_real_sender_and_refuses_a_tampered_delivery(
    agents, notify, recorder, sample_command, tmp_path, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    channel, secret = channel_save(
        tenant=agents.a.tenant, name="pager", kind="webhook", url=recorder.url
    )
    sample = Sample(sample_command, secret, tmp_path / "sample")
    try:
        # The opening, as Countersign sent it, recorded: then played to the sample as it came
        # and changed in each way an attacker could.
        interaction = hold(agents.a, capture)
        [(headers, body)] = recorder.requests
        assert post(sample.url, headers, body) == 204
        assert post(sample.url, headers, body) == 204  # a redelivery: handled once
        tampered = body.replace(b"2026.10.06-1", b"2026.10.06-9")
        assert tampered != body and post(sample.url, headers, tampered) == 401
        signature = headers["webhook-signature"]
        forged = signature[:-6] + ("AAAA==" if not signature.endswith("AAAA==") else "BBBB==")
        assert post(sample.url, {**headers, "webhook-signature": forged}, body) == 401
        stale = str(int(time.time()) - 3600)
        assert post(sample.url, {**headers, "webhook-timestamp": stale}, body) == 401
        assert post(sample.url, {"content-type": "application/json"}, body) == 401
        [printed] = sample.printed()
        assert printed["id"] == headers["webhook-id"]
        assert printed["event"]["type"] == "interaction.opened"
        assert printed["event"]["data"]["interactionId"] == interaction.public_id

        # Then the channel posts to the sample itself: the decision's follow-up, sent live.
        channel_save(
            tenant=agents.a.tenant,
            channel=Channel.objects.get(pk=channel.pk),
            name="pager",
            kind="webhook",
            url=sample.url,
        )
        with capture(execute=True):
            decide(interaction, approved=True, reason="staging is free")
        wait_until(lambda: len(sample.printed()) == 2, 20, what="the follow-up")
        decided = sample.printed()[1]["event"]
        assert decided["type"] == "interaction.decided"
        assert decided["data"]["outcome"] == "approved"
        assert decided["data"]["reason"] == "staging is free"
    finally:
        sample.stop()
    assert "refused:" in sample.err.read_text()


def documented_events() -> dict[str, dict]:
    """The JSON examples of the events page, by their type."""
    found = {}
    for block in re.findall(r"```json\n(.*?)```", EVENTS_PAGE.read_text(), re.S):
        event = json.loads(block)
        found[event["type"]] = event
    return found


def shape(value) -> object:
    """The keys of an event, nested, without their values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items() if key != "arguments"}
    return type(value).__name__


def test_the_events_page_shows_each_event_as_the_sender_writes_it(
    agents, notify, recorder, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    channel_save(tenant=agents.a.tenant, name="pager", kind="webhook", url=recorder.url)
    interaction = hold(agents.a, capture)
    with capture(execute=True):
        decide(interaction, approved=True, reason="staging is free")
    sent = {event["type"]: event for event in (json.loads(b) for _, b in recorder.requests)}
    assert set(sent) == {"interaction.opened", "interaction.decided"}
    shown = documented_events()
    for kind, event in sent.items():
        assert shape(shown[kind]) == shape(event), kind
    # Every type the sender can write has its example on the page.
    from integrations.webhook.transport import WEBHOOK_TYPES
    from notifications.models import Delivery

    types = {f"interaction.{WEBHOOK_TYPES.get(e, e)}" for e in Delivery.Event.values} | {
        "interaction.test"
    }
    assert types <= set(shown), types - set(shown)
