"""An approval gate (runtime.turn.gate): the call a caller describes is held, allowed or denied
under the gate's policy, and the task ends with the decision's signed receipt."""

import base64
import json

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.management import call_command

from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.receipts import canonical_hash
from runtime.decisions.signing import jwks
from runtime.decisions.summaries import title_render
from runtime.kernel.errors import InvalidParams
from runtime.kernel.task_models import Task, TaskState
from tests.core import decide, edit_approve, member, run, send

pytestmark = pytest.mark.django_db

PAYMENT = {"amount": 250, "currency": "EUR", "to": "ACME GmbH"}


def ask(side, tool="payments/send", arguments=None, reason="invoice 7", **fields) -> Task:
    data = {"tool": tool, "arguments": PAYMENT if arguments is None else arguments}
    if reason is not None:
        data["reason"] = reason
    return send(side, "gate", "for the March invoice", parts=[{"data": data}], **fields)


def receipt_of(task: Task) -> dict:
    [artifact] = [a for a in task.artifacts if a["name"] == "receipt"]
    [part] = artifact["parts"]
    return part["data"]


def b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verified(jws: str) -> dict:
    """The JWS's claims, checked with the cryptography package alone against the JWKS (not
    the library that signed it)."""
    header, payload, signature = jws.split(".")
    head = json.loads(b64(header))
    assert head["alg"] == "EdDSA" and head["typ"] == "JWT"
    [key] = [k for k in jwks()["keys"] if k["kid"] == head["kid"]]
    assert (key["kty"], key["crv"]) == ("OKP", "Ed25519")
    public = Ed25519PublicKey.from_public_bytes(b64(key["x"]))
    public.verify(b64(signature), f"{header}.{payload}".encode())
    return json.loads(b64(payload))


def test_held_payment_waits_then_completes_with_a_signed_receipt(agents):
    side = agents.a
    task = run(ask(side))
    assert task.state == TaskState.AUTH_REQUIRED
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    call = interaction.request["call"]
    assert title_render(call["title"], call["arguments"]) == "Pay 250 EUR to ACME GmbH"
    assert interaction.detail["reason"] == "invoice 7"
    decide(interaction, by=side.operator.subject, approved=True, reason="ok")
    task = run(task)
    assert task.state == TaskState.COMPLETED
    receipt = receipt_of(task)
    assert receipt["approved"] is True and receipt["decision"] == "approved"
    assert receipt["tool"] == "payments/send" and receipt["arguments"] == PAYMENT
    assert receipt["arguments_sha256"] == canonical_hash(PAYMENT)
    assert receipt["decided_by"] == [side.operator.subject]
    assert receipt["channel"] == "page" and receipt["edited"] is False
    assert receipt["policy"]["entry"] == "payments/send" and receipt["policy"]["rule"] == 2
    claims = verified(receipt["jws"])
    assert {k: claims[k] for k in receipt if k != "jws"} == {
        k: v for k, v in receipt.items() if k != "jws"
    }
    assert (claims["tenant"], claims["agent"], claims["task_id"]) == (
        side.tenant.slug,
        "gate",
        task.public_id,
    )
    assert claims["interaction_id"] == interaction.public_id
    assert Receipt.objects.get(public_id=receipt["receipt_id"]).jws == receipt["jws"]
