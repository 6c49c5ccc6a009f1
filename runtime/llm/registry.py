"""The model providers an agent's ``model.provider`` may name."""

from collections.abc import Callable

from runtime.agents.agent_models import GATE_PROVIDER
from runtime.llm.actions import ModelProvider
from runtime.llm.gate_model import GateModel
from runtime.llm.gateway_model import GatewayModel
from runtime.llm.http_agent import HttpAgent
from runtime.llm.openai_chat import OpenAIChatModel
from runtime.llm.openai_responses import OpenAIResponsesModel
from runtime.llm.scripted import ScriptedModel

# provider name -> a factory taking the agent's ``model`` mapping.
PROVIDERS: dict[str, Callable[[dict], ModelProvider]] = {
    "scripted": lambda model: ScriptedModel(model.get("script", []), summary=model.get("summary")),
    # An MCP gateway (AGENT.md ``gateway``): no model, one MCP client's held call per turn.
    "gateway": GatewayModel,
    "http": HttpAgent,
    "openai": OpenAIChatModel,
    "openai-responses": OpenAIResponsesModel,
    GATE_PROVIDER: lambda model: GateModel(),
}


def model_for(agent) -> ModelProvider:
    provider = (agent.model or {}).get("provider", "scripted")
    if provider not in PROVIDERS:
        raise ValueError(f"Unknown model provider {provider!r}")
    return PROVIDERS[provider](agent.model)
