"""A LangGraph graph whose refund node asks a Countersign approval gate first.

``plan`` asks the model which payment to refund and how much (a tool call); ``refund`` calls
``require_approval("payments/refund", ...)`` and refunds only what was approved; a denial
ends the graph with the reason and its signed receipt's id.

    COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=... COUNTERSIGN_TENANT=demo \\
    OPENAI_BASE_URL=... OPENAI_API_KEY=... python examples/langgraph_refunds.py "Refund ..."
"""

import json
import os
import sys
from typing import Any, TypedDict

from countersign_client import Countersign, Denied
from langgraph.graph import END, START, StateGraph
from openai import OpenAI

REFUND_TOOL = {
    "type": "function",
    "function": {
        "name": "issue_refund",
        "description": "Refund (part of) a payment.",
        "parameters": {
            "type": "object",
            "properties": {"payment": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["payment", "amount"],
        },
    },
}


class Refund(TypedDict, total=False):
    request: str
    payment: str
    amount: float
    outcome: str
    receipt_id: str


def refund_graph(
    cs: Countersign,
    llm: OpenAI,
    *,
    model: str = "gpt-4o-mini",
    ledger: list,
    approval_timeout: float | None = None,
) -> Any:
    """The compiled graph; ``ledger`` is where the refunds it makes go; ``approval_timeout``:
    how long a refund waits for a person (None: as long as it takes; then TimedOut)."""

    def plan(state: Refund) -> Refund:
        reply = llm.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": "Turn the request into one issue_refund call."},
                {"role": "user", "content": state["request"]},
            ],
            tools=[REFUND_TOOL],  # type: ignore[list-item]
        )
        call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
        arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
        return {"payment": arguments["payment"], "amount": arguments["amount"]}

    def refund(state: Refund) -> Refund:
        try:
            decision = cs.require_approval(
                "payments/refund",
                {"payment": state["payment"], "amount": state["amount"]},
                reason=state["request"],
                timeout=approval_timeout,
            )
        except Denied as denied:
            return {"outcome": f"refused: {denied.reason}", "receipt_id": denied.receipt.receipt_id}
        ledger.append(decision.arguments)  # what was approved, not what was asked
        approved = decision.arguments
        return {
            "outcome": f"refunded {approved['amount']} of {approved['payment']}",
            "receipt_id": decision.receipt.receipt_id,
        }

    graph = StateGraph(Refund)
    graph.add_node("plan", plan)
    graph.add_node("refund", refund)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "refund")
    graph.add_edge("refund", END)
    return graph.compile()


def run(
    request: str,
    *,
    countersign_url: str,
    token: str,
    tenant: str,
    openai_base_url: str | None = None,
    openai_api_key: str | None = None,
    ledger: list | None = None,
    approval_timeout: float | None = None,
) -> Refund:
    """Run the graph on ``request`` and return its final state."""
    llm = OpenAI(base_url=openai_base_url, api_key=openai_api_key or "unused")
    with Countersign(countersign_url, token, tenant=tenant) as cs:
        graph = refund_graph(
            cs,
            llm,
            ledger=ledger if ledger is not None else [],
            approval_timeout=approval_timeout,
        )
        return graph.invoke({"request": request})


if __name__ == "__main__":
    state = run(
        " ".join(sys.argv[1:]) or "Refund 40 EUR of payment pay_1042: the parcel arrived broken.",
        countersign_url=os.environ.get("COUNTERSIGN_URL", "http://127.0.0.1:8000"),
        token=os.environ["COUNTERSIGN_TOKEN"],
        tenant=os.environ.get("COUNTERSIGN_TENANT", "demo"),
        openai_base_url=os.environ.get("OPENAI_BASE_URL"),
        openai_api_key=os.environ.get("OPENAI_API_KEY"),
    )
    print(state["outcome"], f"(receipt {state.get('receipt_id')})")
