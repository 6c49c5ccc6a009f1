"""The Python client and the examples against a running Countersign (the live stack: uvicorn
and a Celery worker on the test database) and its demo gate, ``/a2a/demo/gate``, with the
demo partner token; the people decide through the REST API with the demo operator program's
token, as a chat bot or a mobile app would."""

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from countersign_client import Countersign, Denied, Expired, GateError, ReceiptError, TimedOut

from examples import langgraph_refunds, openai_agents_payments
from tests.llm_stub import LLMStub, call, completion

PAYMENT = {"amount": 250, "currency": "EUR", "to": "ACME GmbH"}


@pytest.fixture
def cs(live_stack, demo):
    client = Countersign(live_stack.url, demo["token"], tenant="demo", poll_interval=0.2)
    yield client
    client.close()


class Operator:
    """The demo operator program, deciding through the REST API."""

    def __init__(self, url: str, token: str):
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def open_approval(self, task_id: str, timeout: float = 30) -> dict:
        """The open approval of the task, with its held call, once the gate holds it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = self.http.get("/api/v1/interactions", params={"state": "open"})
            assert listed.status_code == 200, listed.text
            found = [i for i in listed.json()["results"] if i["taskId"] == task_id]
            if found:
                return self.http.get(f"/api/v1/interactions/{found[0]['id']}").json()
            time.sleep(0.1)
        raise TimeoutError(f"no open approval for {task_id}")

    def answer(self, approval: dict, **answer) -> None:
        answer.setdefault("argumentsHash", approval["heldCall"]["argumentsHash"])
        answered = self.http.post(f"/api/v1/interactions/{approval['id']}/answer", json=answer)
        assert answered.status_code == 200, answered.text


@pytest.fixture
def operator(live_stack, demo):
    person = Operator(live_stack.url, demo["operator_token"])
    yield person
    person.http.close()


@pytest.fixture
def background():
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool.submit


def task_of(cs, key: str) -> str:
    """The task of the request made with ``key`` (the same key is the same request)."""
    with pytest.raises(TimedOut) as timed_out:
        cs.require_approval("payments/send", PAYMENT, key=key, timeout=0.5)
    return timed_out.value.task_id


def test_a_search_the_policy_allows_comes_back_signed_by_the_policy(cs):
    decision = cs.require_approval("docs/search", {"query": "refund policy"})
    assert decision.approved and decision.decided_by == ["policy"]
    assert decision.receipt.decision == "allowed" and decision.receipt.channel == "policy"
    assert (decision.receipt.tenant, decision.receipt.agent) == ("demo", "gate")
    assert cs.jwks_fetches == 1


def test_an_edited_approval_runs_the_guarded_function_with_the_edited_arguments(
    cs, operator, demo, background
):
    @cs.guarded("payments/send", reason="invoice 7", timeout=60)
    def send_payment(amount: int, currency: str, to: str) -> dict:
        return {"amount": amount, "currency": currency, "to": to}

    paid = background(send_payment, 250, "EUR", "ACME GmbH")
    approval = operator.open_approval(wait_for_task(operator))
    assert approval["heldCall"]["arguments"] == PAYMENT
    operator.answer(approval, approved=True, arguments={**PAYMENT, "amount": 200})
    assert paid.result(60) == {**PAYMENT, "amount": 200}


def test_an_approval_comes_back_verified_and_a_retry_with_its_key_is_the_same_request(
    cs, operator, demo, live_stack, background
):
    task_id = task_of(cs, "invoice-7")
    assert task_of(cs, "invoice-7") == task_id  # not a second approval
    # A restarted caller picks the decision up by the task's id, following the task's stream
    # (Server-Sent Events) while the gate holds it.
    seen: list[tuple[str, str]] = []

    def record(response: httpx.Response) -> None:
        if response.request.method != "POST":
            return  # the JWKS
        method = json.loads(response.request.content)["method"]
        seen.append((method, response.headers.get("content-type", "")))

    http = httpx.Client(timeout=60, event_hooks={"response": [record]})
    with Countersign(live_stack.url, demo["token"], tenant="demo", http=http) as restarted:
        waiting = background(restarted.wait, task_id, timeout=60)
        approval = operator.open_approval(task_id)
        deadline = time.monotonic() + 30
        while not any(m == "SubscribeToTask" for m, _ in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        operator.answer(approval, approved=True, reason="ok")
        decision = waiting.result(60)
    assert ("SubscribeToTask", "text/event-stream") in [(m, t.split(";")[0]) for m, t in seen]
    assert decision.approved and decision.arguments == PAYMENT
    assert decision.decided_by == [demo["operator_subject"]]
    assert decision.receipt.task_id == task_id
    # The same receipt is refused for another agent, or another task.
    with Countersign(live_stack.url, demo["token"], tenant="demo", gate="support") as other:
        with pytest.raises(ReceiptError, match="agent"):
            other.receipt(decision.receipt.jws)
    with pytest.raises(ReceiptError, match="task_id"):
        cs.receipt(decision.receipt.jws, task_id="t-another")
    # ...and by a caller of another tenant (the receipt's check needs only the public keys).
    with Countersign(live_stack.url, "unused", tenant="other") as elsewhere:
        with pytest.raises(ReceiptError, match="tenant 'demo', not 'other'"):
            elsewhere.receipt(decision.receipt.jws)


def test_a_denial_raises_denied_with_the_reason(cs, operator, background):
    asked = background(cs.require_approval, "payments/send", PAYMENT, key="invoice-8", timeout=60)
    task_id = task_of(cs, "invoice-8")
    operator.answer(operator.open_approval(task_id), approved=False, reason="wrong payee")
    with pytest.raises(Denied) as denied:
        asked.result(60)
    assert denied.value.reason == "wrong payee"
    assert denied.value.receipt.approved is False and denied.value.task_id == task_id


def test_a_tool_the_gate_does_not_know_is_refused(cs):
    with pytest.raises(GateError) as refused:
        cs.require_approval("db/drop", {"table": "users"})
    assert refused.value.code == -32602


@pytest.fixture
def llm():
    stub = LLMStub().start()
    yield stub
    stub.stop()


def test_the_langgraph_example_refunds_what_the_operator_approved(
    live_stack, demo, operator, llm, background
):
    llm.play(completion(calls=[call("issue_refund", {"payment": "pay_1042", "amount": 40})]))
    ledger: list = []
    state = background(
        langgraph_refunds.run,
        "Refund 40 EUR of payment pay_1042.",
        countersign_url=live_stack.url,
        token=demo["token"],
        tenant="demo",
        openai_base_url=llm.url,
        ledger=ledger,
        approval_timeout=60,
    )
    approval = operator.open_approval(wait_for_task(operator))
    operator.answer(approval, approved=True)
    assert state.result(60)["outcome"] == "refunded 40 of pay_1042"
    assert ledger == [{"payment": "pay_1042", "amount": 40}]


def test_the_agents_sdk_example_pays_nothing_when_the_operator_denies(
    live_stack, demo, operator, llm, background
):
    llm.play(
        completion(
            calls=[call("send_payment", {"to": "ACME GmbH", "amount": 120, "currency": "EUR"})]
        ),
        completion("The payment was refused."),
    )
    ledger: list = []
    answer = background(
        lambda: asyncio.run(
            openai_agents_payments.run(
                "Pay ACME GmbH 120 EUR.",
                countersign_url=live_stack.url,
                token=demo["token"],
                tenant="demo",
                openai_base_url=llm.url,
                ledger=ledger,
                approval_timeout=60,
            )
        )
    )
    approval = operator.open_approval(wait_for_task(operator))
    operator.answer(approval, approved=False, reason="disputed")
    assert answer.result(60) == "The payment was refused."
    assert ledger == []


def wait_for_task(operator: Operator, timeout: float = 30) -> str:
    """The task id of the one open approval, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = operator.http.get("/api/v1/interactions", params={"state": "open"}).json()
        if listed["results"]:
            return listed["results"][0]["taskId"]
        time.sleep(0.1)
    raise TimeoutError("no open approval")


def open_interaction(task_id: str):
    from runtime.decisions.decision_models import Interaction

    return Interaction.objects.get(task__public_id=task_id, state=Interaction.State.OPEN)


def test_an_expired_request_raises_expired(cs):
    from runtime.decisions.interaction_state import interaction_expire

    with pytest.raises(TimedOut) as timed_out:
        cs.require_approval("payments/refund", {"payment": "pay_9"}, timeout=0.5)
    task_id = timed_out.value.task_id
    assert interaction_expire(pk=open_interaction(task_id).pk, due=False)
    with pytest.raises(Expired) as expired:
        cs.wait(task_id, timeout=60)
    assert expired.value.receipt.decision == "expired"
    assert expired.value.receipt.decided_by == ["system:expiry"]


def test_a_payment_of_1000_or_more_needs_two_people(cs):
    from runtime.decisions.approvers import Decider
    from tenants.models import Membership
    from tests.core import flow_answer

    def approve(task_id: str, email: str) -> str:
        membership = Membership.objects.select_related("user", "tenant").get(
            tenant__slug="demo", user__email=email
        )
        decider = Decider.of_member(membership, membership.user)
        interaction = open_interaction(task_id)
        flow_answer(
            tenant=interaction.tenant,
            interaction_id=interaction.public_id,
            answer={"approved": True},
            by=decider.subject,
            via="page",
            decider=decider,
        )
        return decider.subject

    large = {**PAYMENT, "amount": 1500}
    with pytest.raises(TimedOut) as timed_out:
        cs.require_approval("payments/send", large, timeout=0.5)
    task_id = timed_out.value.task_id
    first = approve(task_id, "operator@demo.test")
    with pytest.raises(TimedOut):  # one of two: still held
        cs.wait(task_id, timeout=1)
    second = approve(task_id, "admin@demo.test")
    decision = cs.wait(task_id, timeout=60)
    assert decision.arguments == large
    assert sorted(decision.decided_by) == sorted([first, second])
