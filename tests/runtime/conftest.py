"""Runtime tests drive turns through the A2A endpoint (in-process) or call the services and
the turn loop directly; the endpoint helpers live in tests/a2a_endpoint/conftest.py."""

import pytest

from runtime.agentfile import AgentSpec
from runtime.services.agents import agent_upsert
from tests.a2a_endpoint.conftest import agents, client, eager  # noqa: F401 - fixtures

DEPLOY_TOOL = {
    "server": "deploy",
    "tool": "deploy_build",
    "description": "Deploy a build to an environment.",
    "schema": {
        "type": "object",
        "properties": {
            "build": {"type": "string", "minLength": 1},
            "environment": {"type": "string", "enum": ["staging", "production"]},
        },
        "required": ["build", "environment"],
        "additionalProperties": False,
    },
}
# Steps that tell the caller what the model received from its last tool call.
REPORT_RESULT = [
    {"if": {"result": "ok"}, "reply": "ok: {{ last.result }}"},
    {"if": {"result": "error"}, "reply": "error: {{ last.error }}"},
]


@pytest.fixture
def make_agent(agents):  # noqa: F811 - the imported fixture
    """Create an agent in tenant A (acme) from an AgentSpec with a scripted model."""

    def make(slug: str, steps: list, tenant=None, **fields):
        spec = AgentSpec(
            slug=slug,
            name=slug,
            description=f"test agent {slug}",
            skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
            model={"provider": "scripted", "script": [{"steps": steps}]},
            **fields,
        )
        agent, _ = agent_upsert(tenant=tenant or agents.a.tenant, spec=spec)
        return agent

    return make
