"""An OpenAI Agents SDK app whose payment tool is held by a Countersign approval gate.

The model decides to pay; the tool asks the gate (``payments/send``) and waits for the people
who decide. Approved: the payment runs with the arguments as approved (an approver may have
lowered the amount). Denied: the tool tells the model why, and nothing is paid.

    COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=... COUNTERSIGN_TENANT=demo \\
    OPENAI_BASE_URL=... OPENAI_API_KEY=... python examples/openai_agents_payments.py "Pay ..."
"""

import asyncio
import os
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from countersign_client import AsyncCountersign, Denied, TimedOut
from openai import AsyncOpenAI

INSTRUCTIONS = (
    "You are a payments assistant. Pay suppliers with the send_payment tool when asked, "
    "then say what happened."
)


def payment_agent(
    cs: AsyncCountersign,
    model: OpenAIChatCompletionsModel,
    ledger: list,
    approval_timeout: float | None = None,
) -> Agent:
    """The agent; ``ledger`` is where the payments it makes go (the bank, in this example);
    ``approval_timeout``: how long a payment waits for a person (None: as long as it takes)."""

    @cs.guarded("payments/send", reason="asked by the payments assistant", timeout=approval_timeout)
    async def pay(to: str, amount: int, currency: str) -> str:
        # Runs only once approved, with the approved (perhaps edited) arguments.
        ledger.append({"to": to, "amount": amount, "currency": currency})
        return f"Paid {amount} {currency} to {to}."

    @function_tool
    async def send_payment(to: str, amount: int, currency: str) -> str:
        """Send a payment to a supplier. A person approves it first."""
        try:
            return await pay(to=to, amount=amount, currency=currency)
        except Denied as denied:
            return f"The payment was not approved: {denied.reason or 'denied'}. Nothing was paid."
        except TimedOut:
            return "Nobody has decided on the payment yet. Nothing was paid so far."

    return Agent(name="Payments", instructions=INSTRUCTIONS, tools=[send_payment], model=model)


async def run(
    prompt: str,
    *,
    countersign_url: str,
    token: str,
    tenant: str,
    openai_base_url: str | None = None,
    openai_api_key: str | None = None,
    model: str = "gpt-4o-mini",
    ledger: list | None = None,
    approval_timeout: float | None = None,
) -> str:
    """Run the agent on ``prompt`` and return its final answer."""
    set_tracing_disabled(True)  # no traces sent anywhere
    llm = AsyncOpenAI(base_url=openai_base_url, api_key=openai_api_key or "unused")
    async with AsyncCountersign(countersign_url, token, tenant=tenant) as cs:
        agent = payment_agent(
            cs,
            OpenAIChatCompletionsModel(model=model, openai_client=llm),
            ledger if ledger is not None else [],
            approval_timeout,
        )
        result = await Runner.run(agent, prompt)
    return str(result.final_output)


if __name__ == "__main__":
    print(
        asyncio.run(
            run(
                " ".join(sys.argv[1:]) or "Pay ACME GmbH 120 EUR for invoice 7.",
                countersign_url=os.environ.get("COUNTERSIGN_URL", "http://127.0.0.1:8000"),
                token=os.environ["COUNTERSIGN_TOKEN"],
                tenant=os.environ.get("COUNTERSIGN_TENANT", "demo"),
                openai_base_url=os.environ.get("OPENAI_BASE_URL"),
                openai_api_key=os.environ.get("OPENAI_API_KEY"),
            )
        )
    )
