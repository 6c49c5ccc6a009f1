"""An approval gate (runtime.turn.gate): the call a caller describes is held, allowed or denied
under the gate's policy, and the task ends with the decision's signed receipt."""

import base64
import json
from io import StringIO

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.management import call_command

from runtime.agents.agentfile import AgentFileError, parse_agent_file
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.interaction_state import interaction_expire
from runtime.decisions.receipts import canonical_hash
from runtime.decisions.signing import jwks, signing_cache_clear
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


def test_denied_payment_is_rejected_with_the_reason_and_a_signed_receipt(agents):
    side = agents.a
    task = run(ask(side))
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    decide(interaction, by=side.operator.subject, approved=False, reason="wrong payee")
    task = run(task)
    assert task.state == TaskState.REJECTED
    assert "wrong payee" in task.status_message["parts"][0]["text"]
    receipt = receipt_of(task)
    assert receipt["approved"] is False and receipt["decision"] == "denied"
    assert receipt["reason"] == "wrong payee"
    assert verified(receipt["jws"])["approved"] is False


def test_expired_payment_is_rejected_with_a_receipt_the_expiry_signed(agents):
    side = agents.a
    task = run(ask(side))
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    assert interaction_expire(pk=interaction.pk, due=False)
    task = run(task)
    assert task.state == TaskState.REJECTED
    receipt = receipt_of(task)
    assert (receipt["decision"], receipt["channel"]) == ("expired", "expiry")
    assert receipt["decided_by"] == ["system:expiry"]
    verified(receipt["jws"])


def test_edited_then_approved_receipt_binds_the_edited_arguments(agents):
    side = agents.a
    task = run(ask(side))
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    edited = {**PAYMENT, "to": "ACME GmbH (DE89 3704)"}
    edit_approve(side, interaction, edited)
    task = run(task)
    assert task.state == TaskState.COMPLETED
    receipt = receipt_of(task)
    assert receipt["edited"] is True and receipt["arguments"] == edited
    assert receipt["arguments_sha256"] == canonical_hash(edited)
    assert verified(receipt["jws"])["arguments_sha256"] == canonical_hash(edited)


def test_an_allowed_call_completes_at_once_with_the_policy_as_its_decider(agents):
    side = agents.a
    task = run(ask(side, "docs/search", {"query": "refund policy"}, reason=None))
    assert task.state == TaskState.COMPLETED
    assert not Interaction.objects.filter(task=task).exists()
    receipt = receipt_of(task)
    assert (receipt["decision"], receipt["approved"]) == ("allowed", True)
    assert (receipt["decided_by"], receipt["channel"]) == (["policy"], "policy")
    assert receipt["policy"]["entry"] == "docs/search"
    verified(receipt["jws"])


def test_the_task_page_shows_the_callers_call_with_its_redacted_fields_hidden(agents):
    """The caller's own data part is on the task's history; the operators' task page shows
    the fields the rule redacts as on every surface but the decision page."""
    from django.urls import reverse

    from runtime.agents.agent_models import Agent

    side = agents.a
    gate = Agent.objects.get(tenant=side.tenant, name="gate")
    policy = dict(gate.tool_policy)
    policy["payments/refund"] = {**policy["payments/refund"], "redact": ["payment"]}
    gate.tool_policy = policy
    gate.save()
    task = run(ask(side, "payments/refund", {"payment": "pay_SECRET42"}))
    assert task.state == TaskState.AUTH_REQUIRED
    assert task.history[0]["parts"][-1]["data"]["arguments"] == {"payment": "pay_SECRET42"}
    html = (
        side.client_for(side.operator)
        .get(reverse("approvals:task", args=[task.public_id]))
        .content.decode()
    )
    assert "pay_SECRET42" not in html
    assert "&quot;payment&quot;: &quot;•••&quot;" in html or '"payment": "•••"' in html


def test_a_payment_of_1000_or_more_needs_two_people(agents):
    side = agents.a
    task = run(ask(side, arguments={**PAYMENT, "amount": 1500}))
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    decide(interaction, by=member(side, "operator").subject, approved=True)
    task = run(task)
    assert task.state == TaskState.AUTH_REQUIRED  # one of two
    assert not [a for a in task.artifacts if a["name"] == "receipt"]
    decide(interaction, by=member(side, "admin").subject, approved=True)
    task = run(task)
    assert task.state == TaskState.COMPLETED
    receipt = receipt_of(task)
    assert receipt["decided_by"] == [side.operator.subject, side.admin.subject]
    assert receipt["policy"]["rule"] == 1
    verified(receipt["jws"])


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"tool": "payments/wire", "arguments": {}}, "does not name payments/wire"),
        ({"tool": "payments", "arguments": {}}, "server/tool"),
        ({"tool": "payments/send", "arguments": [1]}, "must be an object"),
        ({"tool": "payments/send", "arguments": {"amount": 5}}, "invalid arguments"),
        ({"arguments": {}}, "one data part"),
    ],
)
def test_a_call_the_gate_cannot_take_is_invalid_params_and_creates_nothing(agents, data, says):
    side = agents.a
    before = Task.objects.count()
    with pytest.raises(InvalidParams, match=says):
        send(side, "gate", None, parts=[{"data": data}])
    assert Task.objects.count() == before and not Effect.objects.exists()


def test_a_default_entry_takes_the_tools_no_other_entry_names(agents):
    side = agents.a
    gate = side.tenant.agents.get(slug="gate")
    gate.tool_policy = {**gate.tool_policy, "*": "deny"}
    gate.save()
    task = run(ask(side, "payments/wire", {"to": "x"}))
    assert task.state == TaskState.REJECTED
    receipt = receipt_of(task)
    assert (receipt["decision"], receipt["policy"]["entry"]) == ("denied", "*")


def test_the_same_message_id_from_the_same_caller_is_the_same_task(agents):
    side = agents.a
    first = ask(side, messageId="pay-invoice-7")
    again = ask(side, messageId="pay-invoice-7")
    assert again.pk == first.pk
    assert Task.objects.filter(agent__slug="gate").count() == 1


def test_a_tampered_receipt_does_not_verify(agents):
    side = agents.a
    task = run(ask(side, "docs/search", {"query": "q"}, reason=None))
    jws = receipt_of(task)["jws"]
    header, payload, signature = jws.split(".")
    claims = json.loads(b64(payload))
    claims["arguments"] = {"query": "something else"}
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(InvalidSignature):
        verified(f"{header}.{forged}.{signature}")


def test_hosted_agents_receipts_are_signed(agents):
    side = agents.a
    task = run(send(side, "deployer", "deploy build 2026.10.06-1 to staging"))
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    decide(interaction, by=side.operator.subject, approved=True)
    [receipt] = Receipt.objects.filter(task_public_id=task.public_id)
    claims = verified(receipt.jws)
    assert claims["tool"] == "deploy/deploy_build" and claims["agent"] == "deployer"
    assert claims["arguments_sha256"] == receipt.sent_arguments_hash


def test_a_rotated_key_stays_published_and_new_receipts_use_the_new_one(agents):
    side = agents.a
    before = run(ask(side, "docs/search", {"query": "q"}, reason=None))
    old_kid = json.loads(b64(receipt_of(before)["jws"].split(".")[0]))["kid"]
    call_command("rotate_secrets", "--signing-key", stdout=StringIO())
    after = run(ask(side, "docs/search", {"query": "q2"}, reason=None))
    new_kid = json.loads(b64(receipt_of(after)["jws"].split(".")[0]))["kid"]
    assert new_kid != old_kid
    assert {old_kid, new_kid} <= {k["kid"] for k in jwks()["keys"]}
    verified(receipt_of(before)["jws"])
    verified(receipt_of(after)["jws"])


def test_a_signing_key_no_configured_key_opens_is_replaced_and_stays_published(agents, settings):
    side = agents.a
    before = run(ask(side, "docs/search", {"query": "q"}, reason=None))
    old_kid = json.loads(b64(receipt_of(before)["jws"].split(".")[0]))["kid"]
    signing_cache_clear()
    settings.CONNECTIONS_ENCRYPTION_KEY = "another key, set without rotate_secrets"
    after = run(ask(side, "docs/search", {"query": "q2"}, reason=None))
    assert after.state == TaskState.COMPLETED
    new_kid = json.loads(b64(receipt_of(after)["jws"].split(".")[0]))["kid"]
    assert new_kid != old_kid
    verified(receipt_of(before)["jws"])
    verified(receipt_of(after)["jws"])


GATE_FILE = """---
name: mygate
description: A gate.
gate: true
{extra}policy:
  payments/send: approve
---
"""


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("model: {provider: scripted}\n", "a gate has no model"),
        ("memory: {turns: 2}\n", "no conversation memory"),
        ("tools: [{server: payments}]\n", "named server and tool"),
    ],
)
def test_a_gate_file_with_a_model_memory_or_a_whole_server_is_refused(tmp_path, extra, says):
    path = tmp_path / "mygate.md"
    path.write_text(GATE_FILE.format(extra=extra))
    with pytest.raises(AgentFileError, match=says):
        parse_agent_file(path)


def test_the_gate_provider_is_declared_with_gate_true_only(tmp_path):
    path = tmp_path / "mygate.md"
    path.write_text(GATE_FILE.format(extra="").replace("gate: true\n", "model: {provider: gate}\n"))
    with pytest.raises(AgentFileError, match="gate: true"):
        parse_agent_file(path)
    path.write_text(GATE_FILE.format(extra=""))
    assert parse_agent_file(path).model == {"provider": "gate"}


def test_the_jwks_is_public_and_cacheable(agents, client):
    run(ask(agents.a, "docs/search", {"query": "q"}, reason=None))
    response = client.get("/.well-known/jwks.json")
    assert response.status_code == 200
    assert response["Cache-Control"] == "public, max-age=300"
    [key] = response.json()["keys"]
    assert {k: key[k] for k in ("kty", "crv", "use", "alg")} == {
        "kty": "OKP",
        "crv": "Ed25519",
        "use": "sig",
        "alg": "EdDSA",
    }
    assert "d" not in key  # never the private half
    assert client.post("/.well-known/jwks.json").status_code == 405


def test_a_gateways_held_call_in_a_message_shows_its_redacted_fields_hidden(agents):
    from runtime.agents.agent_models import Agent
    from runtime.decisions.summaries import message_calls_redacted

    side = agents.a
    gateway = Agent.objects.get(tenant=side.tenant, name="gateway")
    policy = dict(gateway.tool_policy)
    policy["deploy/deploy_build"] = [
        {**rule, "redact": ["build"]} for rule in policy["deploy/deploy_build"]
    ]
    gateway.tool_policy = policy
    gateway.save()
    call = {
        "server": "deploy",
        "tool": "deploy_build",
        "arguments": {"build": "b-7", "environment": "staging"},
    }
    message = {"role": "ROLE_USER", "parts": [{"text": "go"}, {"data": {"mcpCall": call}}]}
    shown = message_calls_redacted(gateway, message)
    assert shown["parts"][0] == {"text": "go"}
    assert shown["parts"][1]["data"]["mcpCall"]["arguments"] == {
        "build": "•••",
        "environment": "staging",
    }
    assert message["parts"][1]["data"]["mcpCall"]["arguments"]["build"] == "b-7"
    # A hosted agent's messages are as they were (its model's text is not a call).
    coder = Agent.objects.get(tenant=side.tenant, name="coder")
    assert message_calls_redacted(coder, message) is message
