"""The Python client (clients/python, ``countersign_client``) against a gate on loopback that
answers as the server's contract says (tests/clients/gate_stub.py): real HTTP, A2A 1.0
JSON-RPC, Server-Sent Events, receipts signed with Ed25519 and checked against its JWKS."""

import asyncio
import json

import httpx
import jwt
import pytest
from countersign_client import (
    AsyncCountersign,
    Countersign,
    Denied,
    Expired,
    GateError,
    ReceiptError,
    TimedOut,
    arguments_sha256,
)
from countersign_client.cli import main as cli

from tests.clients.gate_stub import SigningKey, sha256_of

PAYMENT = {"to": "ACME GmbH", "amount": 120, "currency": "EUR"}


def held(gate, background, call):
    """Start ``call`` (which asks for approval and waits) and return its future and its task
    id once the client follows the task's stream."""
    future = background(call)
    task_id = gate.wait_for_task()
    gate.wait_for_subscription(task_id)
    return future, task_id


def test_an_approved_call_returns_the_decision_with_its_verified_receipt(gate, cs, background):
    future, task_id = held(
        gate,
        background,
        lambda: cs.require_approval("payments/send", PAYMENT, reason="invoice 7", timeout=30),
    )
    assert not future.done()
    gate.decide(task_id, True, decided_by=["user:alice@acme.test"])
    decision = future.result(30)
    assert decision.approved is True
    assert decision.arguments == PAYMENT
    assert decision.task_id == task_id
    assert decision.decided_by == ["user:alice@acme.test"]
    receipt = decision.receipt
    assert (receipt.tenant, receipt.agent, receipt.task_id) == ("acme", "gate", task_id)
    assert receipt.decision == "approved" and receipt.tool == "payments/send"
    assert receipt.arguments_sha256 == sha256_of(PAYMENT) == arguments_sha256(PAYMENT)
    assert receipt.kid == gate.key.kid
    assert gate.tasks[task_id].reason == "invoice 7"


def test_an_edited_approval_runs_the_decorated_function_with_the_edited_arguments(
    gate, cs, background
):
    ran = []

    @cs.guarded("payments/send", timeout=30)
    def send_payment(to: str, amount: int, currency: str = "EUR") -> str:
        ran.append((to, amount, currency))
        return f"paid {amount} {currency} to {to}"

    future, task_id = held(gate, background, lambda: send_payment("ACME GmbH", 120))
    assert gate.tasks[task_id].arguments == PAYMENT  # the default is part of what is asked
    assert ran == []
    gate.decide(task_id, True, arguments={**PAYMENT, "amount": 100})
    assert future.result(30) == "paid 100 EUR to ACME GmbH"
    assert ran == [("ACME GmbH", 100, "EUR")]


def test_a_denial_raises_denied_with_the_reason_and_the_signed_receipt(gate, cs, background):
    ran = []
    guarded = cs.guarded("payments/send", timeout=30)(lambda to, amount, currency: ran.append(to))
    future, task_id = held(gate, background, lambda: guarded("ACME GmbH", 120, "EUR"))
    gate.decide(task_id, False, reason="not this month", decided_by=["user:bob@acme.test"])
    with pytest.raises(Denied) as denied:
        future.result(30)
    assert denied.value.reason == "not this month"
    assert denied.value.task_id == task_id
    assert denied.value.receipt.approved is False
    assert denied.value.receipt.decided_by == ["user:bob@acme.test"]
    assert ran == []


def test_an_expired_request_raises_expired(gate, cs, background):
    future, task_id = held(
        gate,
        background,
        lambda: cs.require_approval("payments/refund", {"order": "o-1"}, timeout=30),
    )
    gate.decide(task_id, False, expired=True, reason="nobody decided in time")
    with pytest.raises(Expired) as expired:
        future.result(30)
    assert isinstance(expired.value, Denied)
    assert expired.value.receipt.decision == "expired"
    assert expired.value.receipt.decided_by == ["system:expiry"]


def test_a_call_the_policy_allows_comes_back_at_once_decided_by_the_policy(gate, cs):
    decision = cs.require_approval("docs/search", {"q": "refund policy"})
    assert decision.approved and decision.decided_by == ["policy"]
    assert decision.receipt.channel == "policy"
    assert "SubscribeToTask" not in gate.calls


def test_a_tool_the_policy_does_not_name_is_refused_and_nothing_is_made(gate, cs):
    with pytest.raises(GateError) as refused:
        cs.require_approval("db/drop", {"table": "users"})
    assert refused.value.code == -32602 and "db/drop" in refused.value.message
    assert gate.tasks == {}


def test_a_wrong_token_is_a_gate_error(gate):
    with Countersign(gate.base, "nope", tenant="acme") as wrong:
        with pytest.raises(GateError, match="401"):
            wrong.require_approval("docs/search", {"q": "x"})


def test_a_timeout_leaves_the_request_standing_and_wait_picks_it_up_after_a_restart(gate, cs):
    with pytest.raises(TimedOut) as timed_out:
        cs.require_approval("payments/send", PAYMENT, timeout=0.3)
    task_id = timed_out.value.task_id
    assert gate.tasks[task_id].state == "TASK_STATE_AUTH_REQUIRED"
    gate.decide(task_id, True)
    # Another process: a new client, knowing only the task id.
    with Countersign(gate.base, gate.token, tenant="acme", poll_interval=0.05) as restarted:
        decision = restarted.wait(task_id, timeout=30)
    assert decision.approved and decision.arguments == PAYMENT


def test_a_stream_kept_alive_does_not_outlast_the_timeout(gate, cs, background):
    gate.keepalive = 0.05  # the stream is never silent; the gate would hold it for 60 s
    asked = background(lambda: cs.require_approval("payments/send", PAYMENT, timeout=0.5))
    with pytest.raises(TimedOut) as timed_out:
        asked.result(30)
    assert gate.subscribed[timed_out.value.task_id] >= 1


def test_a_retry_with_one_key_is_one_request(gate, cs):
    with pytest.raises(TimedOut) as first:
        cs.require_approval("payments/send", PAYMENT, key="invoice-7", timeout=0.2)
    with pytest.raises(TimedOut) as again:
        cs.require_approval("payments/send", PAYMENT, key="invoice-7", timeout=0.2)
    assert again.value.task_id == first.value.task_id
    assert len(gate.tasks) == 1


def test_a_lost_answer_is_sent_again_as_the_same_request(gate, cs, background):
    gate.lose_answers = 2
    future, task_id = held(
        gate, background, lambda: cs.require_approval("payments/send", PAYMENT, timeout=30)
    )
    gate.decide(task_id, True)
    assert future.result(30).task_id == task_id
    assert gate.calls.count("SendMessage") == 3
    assert len(gate.tasks) == 1


def test_a_dropped_stream_is_followed_again(gate, cs, background):
    gate.drop_streams = 2
    future, task_id = held(
        gate, background, lambda: cs.require_approval("payments/send", PAYMENT, timeout=30)
    )
    gate.wait_for_subscription(task_id, 3)
    gate.decide(task_id, True)
    assert future.result(30).approved
    assert gate.subscribed[task_id] == 3


def test_without_streaming_the_client_polls_get_task(gate, cs, background):
    gate.streaming = False
    future = background(lambda: cs.require_approval("payments/send", PAYMENT, timeout=30))
    task_id = gate.wait_for_task()
    gate.decide(task_id, True)
    assert future.result(30).approved
    assert "GetTask" in gate.calls and task_id not in gate.subscribed


def test_the_jwks_is_fetched_once_and_again_for_a_key_it_does_not_know(gate, cs):
    for query in ("a", "b", "c"):
        cs.require_approval("docs/search", {"q": query})
    assert gate.calls.count("jwks") == 1
    gate.rotate()
    assert cs.require_approval("docs/search", {"q": "d"}).receipt.kid == gate.key.kid
    assert gate.calls.count("jwks") == 2


def test_a_receipt_signed_with_a_key_not_published_is_refused(gate, cs):
    gate.sign_with = SigningKey("k-unknown")
    with pytest.raises(ReceiptError, match="no key 'k-unknown'"):
        cs.require_approval("docs/search", {"q": "x"})


def test_a_receipt_whose_signature_does_not_match_its_key_is_refused(gate, cs):
    gate.sign_with = SigningKey(gate.key.kid)  # the published kid, another private key
    with pytest.raises(ReceiptError, match="signature"):
        cs.require_approval("docs/search", {"q": "x"})


@pytest.mark.parametrize(
    "claims",
    [{"tenant": "globex"}, {"agent": "other-gate"}, {"task_id": "t-someone-elses"}],
    ids=["tenant", "agent", "task"],
)
def test_a_receipt_of_another_tenant_agent_or_task_is_refused(gate, cs, claims):
    gate.claims_override = claims
    with pytest.raises(ReceiptError, match="the receipt is for"):
        cs.require_approval("docs/search", {"q": "x"})


def test_arguments_that_do_not_match_their_hash_are_refused(gate, cs):
    gate.claims_override = {"arguments": {"q": "something else"}}
    with pytest.raises(ReceiptError, match="arguments_sha256"):
        cs.require_approval("docs/search", {"q": "x"})


def test_a_tampered_receipt_is_refused(gate, cs):
    token = cs.require_approval("docs/search", {"q": "x"}).receipt.jws
    header, payload, signature = token.split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["approved"], claims["decision"] = True, "approved"
    claims["arguments"] = {"q": "y"}
    claims["arguments_sha256"] = sha256_of({"q": "y"})
    forged = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    with pytest.raises(ReceiptError, match="signature"):
        cs.receipt(f"{header}.{forged}.{signature}")
    assert cs.receipt(token).arguments == {"q": "x"}


def test_redacted_arguments_run_with_the_callers_values(gate, cs, background):
    gate.redact = {"iban"}
    asked = {"iban": "DE89 3704 0044 0532 0130 00", "amount": 120}
    future, task_id = held(
        gate, background, lambda: cs.require_approval("payments/send", asked, timeout=30)
    )
    gate.decide(task_id, True)
    decision = future.result(30)
    assert decision.receipt.arguments == {"iban": "•••", "amount": 120}
    assert decision.arguments == asked


def test_whole_floats_hash_as_integers_as_the_gate_writes_them(gate, cs, background):
    gate.redact = {"iban"}
    asked = {"iban": "DE89", "amount": 250.0, "split": [1.0, 0.5]}
    future, task_id = held(
        gate, background, lambda: cs.require_approval("payments/send", asked, timeout=30)
    )
    # The gate hashes what it stores: the arguments with whole floats as integers.
    gate.decide(task_id, True, arguments={"iban": "DE89", "amount": 250, "split": [1, 0.5]})
    decision = future.result(30)
    assert decision.arguments == {"iban": "DE89", "amount": 250, "split": [1, 0.5]}
    assert arguments_sha256(asked) == decision.receipt.arguments_sha256


def test_a_guarded_function_must_take_its_arguments_by_name(cs):
    with pytest.raises(TypeError, match="by name"):
        cs.guarded("payments/send")(lambda *amounts: amounts)


def test_the_async_client_approves_denies_and_guards(gate):
    async def scenario():
        async with AsyncCountersign(
            gate.base, gate.token, tenant="acme", poll_interval=0.05
        ) as acs:

            @acs.guarded("payments/send", timeout=30)
            async def send_payment(to: str, amount: int, currency: str) -> tuple:
                return (to, amount, currency)

            allowed = await acs.require_approval("docs/search", {"q": "x"})
            assert allowed.decided_by == ["policy"]

            paying = asyncio.create_task(send_payment("ACME GmbH", 120, "EUR"))
            task_id = await asyncio.to_thread(gate.wait_for_task, 2)
            await asyncio.to_thread(gate.wait_for_subscription, task_id)
            gate.decide(task_id, True, arguments={**PAYMENT, "amount": 99})
            assert await paying == ("ACME GmbH", 99, "EUR")

            refunding = asyncio.create_task(
                acs.require_approval("payments/refund", {"o": 1}, timeout=30)
            )
            task_id = await asyncio.to_thread(gate.wait_for_task, 3)
            await asyncio.to_thread(gate.wait_for_subscription, task_id)
            gate.decide(task_id, False, reason="no")
            with pytest.raises(Denied, match="no"):
                await refunding

            with pytest.raises(TimedOut) as timed_out:
                await acs.require_approval("payments/send", PAYMENT, timeout=0.2, key="k1")
            gate.decide(timed_out.value.task_id, True)
            assert (await acs.wait(timed_out.value.task_id)).approved
            assert gate.calls.count("jwks") == 1

    asyncio.run(scenario())


# The command line: countersign verify RECEIPT --jwks URL|FILE.


@pytest.fixture
def receipt_files(gate, cs, tmp_path):
    decision = cs.require_approval("docs/search", {"q": "x"})
    jwks = tmp_path / "jwks.json"
    jwks.write_text(httpx.get(f"{gate.base}/.well-known/jwks.json").text)
    whole = tmp_path / "receipt.json"
    whole.write_text(json.dumps(gate.tasks[decision.task_id].receipt))
    return decision, jwks, whole


def test_verify_prints_the_claims_of_a_receipt_that_holds(receipt_files, gate, capsys):
    decision, jwks, whole = receipt_files
    assert cli(["verify", decision.receipt.jws, "--jwks", str(jwks), "--tenant", "acme"]) == 0
    assert json.loads(capsys.readouterr().out)["task_id"] == decision.task_id
    assert cli(["verify", str(whole), "--jwks", f"{gate.base}/.well-known/jwks.json"]) == 0


def test_verify_refuses_a_tampered_receipt_another_tenants_and_an_unknown_key(
    receipt_files, capsys, tmp_path
):
    decision, jwks, _ = receipt_files
    header, payload, signature = decision.receipt.jws.split(".")
    tampered = f"{header}.{payload}.{signature[:-4]}AAAA"
    assert cli(["verify", tampered, "--jwks", str(jwks)]) == 1
    assert "does not hold" in capsys.readouterr().err
    assert cli(["verify", decision.receipt.jws, "--jwks", str(jwks), "--tenant", "globex"]) == 1
    assert "tenant 'acme', not 'globex'" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"keys": [SigningKey("k-other").jwk()]}))
    assert cli(["verify", decision.receipt.jws, "--jwks", str(other)]) == 1
    assert "no key" in capsys.readouterr().err


def test_verify_checks_the_arguments_you_will_run(receipt_files, tmp_path, capsys):
    decision, jwks, _ = receipt_files
    mine = tmp_path / "args.json"
    mine.write_text(json.dumps({"q": "x"}))
    assert cli(["verify", decision.receipt.jws, "--jwks", str(jwks), "--arguments", str(mine)]) == 0
    mine.write_text(json.dumps({"q": "DROP TABLE"}))
    assert cli(["verify", decision.receipt.jws, "--jwks", str(jwks), "--arguments", str(mine)]) == 1
