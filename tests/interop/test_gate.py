"""The demo gate (/a2a/demo/gate) on the live stack, through the official a2a-sdk clients
(1.0 JSON-RPC, and its 0.3 transport) and HTTP+JSON on the wire: a held call waits in
AUTH_REQUIRED, an operator's decision ends it with the receipt artifact, whose JWS verifies
against the server's JWKS (fetched over HTTP, checked with the cryptography package alone)."""

import base64
import json
import uuid

import httpx
import pytest
from a2a.types import TaskState
from a2a.utils.errors import InvalidParamsError
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from runtime.decisions.decision_models import Interaction
from runtime.decisions.receipts import canonical_hash
from runtime.kernel import extensions as ext
from tenants.models import Tenant
from tests.core import flow_answer
from tests.interop.clients03 import Partner03
from tests.sdk_client import as_dict, payload, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

PAYMENT = {"amount": 250, "currency": "EUR", "to": "ACME GmbH"}


def call(tool="payments/send", arguments=None, **fields):
    return user_message(
        "for the March invoice",
        data={"tool": tool, "arguments": PAYMENT if arguments is None else arguments},
        **fields,
    )


def b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verified(base_url: str, jws: str) -> dict:
    """The JWS checked against the JWKS the server publishes, with no JOSE library."""
    keys = httpx.get(f"{base_url}/.well-known/jwks.json").json()["keys"]
    header, body, signature = jws.split(".")
    kid = json.loads(b64(header))["kid"]
    [key] = [k for k in keys if k["kid"] == kid]
    Ed25519PublicKey.from_public_bytes(b64(key["x"])).verify(
        b64(signature), f"{header}.{body}".encode()
    )
    return json.loads(b64(body))


def receipt_of(task) -> dict:
    [artifact] = [a for a in task.artifacts if a.name == "receipt"]
    return as_dict(artifact.parts[0])["data"]


def decide(demo, task_id: str, approved: bool, reason: str = "") -> None:
    interaction = Interaction.objects.get(task__public_id=task_id, state=Interaction.State.OPEN)
    flow_answer(
        tenant=Tenant.objects.get(slug=demo["tenant"]),
        interaction_id=interaction.public_id,
        answer={"approved": approved, "reason": reason},
        by="user:operator@demo.test",
        via="page",
    )


@pytest.fixture
def partner03(live_stack, demo):
    p = Partner03(live_stack.url, demo["token"])
    yield p
    p.close()


def test_a_held_payment_waits_then_completes_with_a_receipt_that_verifies(
    partner, demo, live_stack
):
    gate = demo["agents"]["gate"]
    task = partner.send(gate, call(), extensions=[ext.INTERACTIONS])
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    pause = as_dict(task.status.message)["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "approval"
    decide(demo, task.id, approved=True)
    done = partner.wait_for(gate, task.id, states={TaskState.TASK_STATE_COMPLETED})
    receipt = receipt_of(done)
    assert receipt["decision"] == "approved" and receipt["arguments"] == PAYMENT
    claims = verified(live_stack.url, receipt["jws"])
    assert claims["arguments_sha256"] == canonical_hash(PAYMENT)
    assert (claims["tenant"], claims["agent"], claims["task_id"]) == ("demo", "gate", task.id)


def test_the_stream_stays_open_through_the_approval_to_the_receipt(partner, demo, live_stack):
    gate = demo["agents"]["gate"]

    def approve(event):
        update = event.status_update if event.HasField("status_update") else None
        if update and update.status.state == TaskState.TASK_STATE_AUTH_REQUIRED:
            decide(demo, update.task_id, approved=True)

    events = partner.stream(gate, call(), on_event=approve)
    artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [a.artifact.name for a in artifacts] == ["receipt"]
    last = payload(events[-1])
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    data = as_dict(artifacts[0].artifact.parts[0])["data"]
    verified(live_stack.url, data["jws"])


def test_a_denied_payment_is_rejected_with_its_reason(partner, demo, live_stack):
    gate = demo["agents"]["gate"]
    task = partner.send(gate, call())
    decide(demo, task.id, approved=False, reason="wrong payee")
    done = partner.wait_for(gate, task.id, states={TaskState.TASK_STATE_REJECTED})
    assert "wrong payee" in status_text(done)
    receipt = receipt_of(done)
    assert receipt["approved"] is False
    assert verified(live_stack.url, receipt["jws"])["decision"] == "denied"


def test_a_retried_message_id_is_the_same_task(partner, demo):
    gate = demo["agents"]["gate"]
    key = str(uuid.uuid4())
    first = partner.send(gate, call(message_id=key))
    again = partner.send(gate, call(message_id=key))
    assert again.id == first.id
    assert Interaction.objects.filter(task__public_id=first.id).count() == 1


def test_an_unnamed_tool_is_invalid_params(partner, demo):
    with pytest.raises(InvalidParamsError):
        partner.send(demo["agents"]["gate"], call("payments/wire", {"to": "x"}))


def test_a_0_3_client_gets_the_receipt_of_an_allowed_call_and_a_held_one(
    partner03, demo, live_stack
):
    gate = demo["agents"]["gate"]
    allowed = partner03.send(gate, call("docs/search", {"query": "refunds"}))
    assert allowed.status.state == TaskState.TASK_STATE_COMPLETED
    receipt = receipt_of(allowed)
    assert (receipt["decision"], receipt["decided_by"]) == ("allowed", ["policy"])
    verified(live_stack.url, receipt["jws"])
    held = partner03.send(gate, call("payments/refund", {"payment": "pay_1"}))
    # 0.x says a held call is input-required (its status message's kind: approval).
    assert held.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    decide(demo, held.id, approved=True)
    done = partner03.wait_for(gate, held.id, states={TaskState.TASK_STATE_COMPLETED})
    assert verified(live_stack.url, receipt_of(done)["jws"])["tool"] == "payments/refund"


def test_http_json_binding_takes_the_gate_and_refuses_a_bad_call(demo, live_stack):
    url = f"{live_stack.url}{demo['agents']['gate']}/message:send"
    headers = {"Authorization": f"Bearer {demo['token']}", "A2A-Version": "1.0"}
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"data": {"tool": "docs/search", "arguments": {"query": "q"}}}],
    }
    sent = httpx.post(url, json={"message": message}, headers=headers, timeout=30)
    assert sent.status_code == 200, sent.text
    task = sent.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    [artifact] = task["artifacts"]
    assert artifact["name"] == "receipt"
    verified(live_stack.url, artifact["parts"][0]["data"]["jws"])
    bad = {**message, "messageId": str(uuid.uuid4()), "parts": [{"text": "pay please"}]}
    refused = httpx.post(url, json={"message": bad}, headers=headers, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "one data part" in refused.json()["error"]["message"]
