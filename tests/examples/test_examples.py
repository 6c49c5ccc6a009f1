"""The examples of examples/ run with the real libraries (the OpenAI Agents SDK, LangGraph),
the model a local OpenAI-compatible stand-in (tests/llm_stub.py), the gate a loopback gate
that answers as the server's contract says (tests/clients/gate_stub.py): each approved, and
denied."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from examples import langgraph_refunds, openai_agents_payments
from tests.clients.gate_stub import GateStub
from tests.llm_stub import LLMStub, call, completion


@pytest.fixture
def gate():
    stub = GateStub(tenant="demo", token="demo-partner-token").start()
    yield stub
    stub.stop()


@pytest.fixture
def llm():
    stub = LLMStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def background():
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool.submit


def where(gate, llm) -> dict:
    return {
        "countersign_url": gate.base,
        "token": gate.token,
        "tenant": gate.tenant,
        "openai_base_url": llm.url,
        "openai_api_key": "stub",
    }


def held_task(gate) -> str:
    task_id = gate.wait_for_task()
    gate.wait_for_subscription(task_id)
    return task_id


def tool_output(llm) -> str:
    """What the tool told the model (the tool message of the model's second request)."""
    messages = llm.bodies()[1]["messages"]
    return next(m["content"] for m in messages if m["role"] == "tool")


def run_agent(gate, llm, ledger):
    return asyncio.run(
        openai_agents_payments.run(
            "Pay ACME GmbH 120 EUR for invoice 7.",
            ledger=ledger,
            approval_timeout=60,
            **where(gate, llm),
        )
    )


def test_the_agents_sdk_tool_pays_what_was_approved(gate, llm, background):
    llm.play(
        completion(
            calls=[call("send_payment", {"to": "ACME GmbH", "amount": 120, "currency": "EUR"})]
        ),
        completion("Done: the payment went out."),
    )
    ledger: list = []
    answer = background(run_agent, gate, llm, ledger)
    task_id = held_task(gate)
    assert ledger == [] and gate.tasks[task_id].tool == "payments/send"
    assert gate.tasks[task_id].arguments == {"to": "ACME GmbH", "amount": 120, "currency": "EUR"}
    gate.decide(task_id, True, arguments={"to": "ACME GmbH", "amount": 100, "currency": "EUR"})
    assert answer.result(60) == "Done: the payment went out."
    assert ledger == [{"to": "ACME GmbH", "amount": 100, "currency": "EUR"}]
    assert tool_output(llm) == "Paid 100 EUR to ACME GmbH."


def test_the_agents_sdk_tool_pays_nothing_when_denied(gate, llm, background):
    llm.play(
        completion(
            calls=[call("send_payment", {"to": "ACME GmbH", "amount": 120, "currency": "EUR"})]
        ),
        completion("The payment was refused."),
    )
    ledger: list = []
    answer = background(run_agent, gate, llm, ledger)
    gate.decide(held_task(gate), False, reason="invoice 7 is disputed")
    assert answer.result(60) == "The payment was refused."
    assert ledger == []
    assert "not approved: invoice 7 is disputed" in tool_output(llm)


def run_graph(gate, llm, ledger):
    return langgraph_refunds.run(
        "Refund 40 EUR of payment pay_1042: the parcel arrived broken.",
        ledger=ledger,
        approval_timeout=60,
        **where(gate, llm),
    )


def test_the_langgraph_node_refunds_what_was_approved(gate, llm, background):
    llm.play(completion(calls=[call("issue_refund", {"payment": "pay_1042", "amount": 40})]))
    ledger: list = []
    state = background(run_graph, gate, llm, ledger)
    task_id = held_task(gate)
    assert gate.tasks[task_id].tool == "payments/refund"
    assert gate.tasks[task_id].reason.startswith("Refund 40 EUR of payment pay_1042")
    gate.decide(task_id, True, arguments={"payment": "pay_1042", "amount": 30})
    final = state.result(60)
    assert final["outcome"] == "refunded 30 of pay_1042"
    assert final["receipt_id"] == gate.tasks[task_id].receipt["receipt_id"]
    assert ledger == [{"payment": "pay_1042", "amount": 30}]
    assert llm.bodies()[0]["tools"][0]["function"]["name"] == "issue_refund"


def test_the_langgraph_node_refunds_nothing_when_denied(gate, llm, background):
    llm.play(completion(calls=[call("issue_refund", {"payment": "pay_1042", "amount": 40})]))
    ledger: list = []
    state = background(run_graph, gate, llm, ledger)
    task_id = held_task(gate)
    gate.decide(task_id, False, reason="already refunded")
    final = state.result(60)
    assert final["outcome"] == "refused: already refunded"
    assert json.loads(json.dumps(final))["receipt_id"].startswith("rcp_")
    assert ledger == []
