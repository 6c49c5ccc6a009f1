"""Approval groups for the tests: an agent on a hosted model whose one reply
holds several calls, its model the local OpenAI-compatible stub (tests/llm_stub.py: real HTTP
on 127.0.0.1), and the group its held calls open as."""

import contextlib
from collections.abc import Iterator

from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import Task
from tests.core import DEPLOY_TOOL, run, send
from tests.llm_stub import LLMStub, call, completion

KEY = "sk-test-" + "grp31" * 6
DEPLOY = "deploy__deploy_build"
STAGING = {"build": "b-1", "environment": "staging"}
PRODUCTION = {"build": "b-1", "environment": "production"}


@contextlib.contextmanager
def model_stub(settings, monkeypatch) -> Iterator[LLMStub]:
    """The stub as the installer's model server, its key in the environment."""
    stub = LLMStub().start()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings.OPENAI_BASE_URL = stub.url
    settings.MODEL_RETRY_BASE_SECONDS = 0.05
    settings.MODEL_MAX_ATTEMPTS = 2
    settings.MODEL_TIMEOUT_SECONDS = 5
    try:
        yield stub
    finally:
        stub.stop()


def planner(tenant, slug: str = "planner", *, policy: dict | None = None, tools=(DEPLOY_TOOL,)):
    """An agent on a hosted model whose deploys are held (unless ``policy`` says otherwise)."""
    spec = AgentSpec(
        slug=slug,
        name=slug,
        description="Deploys builds, several in one reply.",
        skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
        instructions="You deploy builds.",
        model={"provider": "openai", "model": "gpt-4o-mini"},
        tools=list(tools),
        tool_policy=policy if policy is not None else {"deploy/deploy_build": "approve"},
    )
    return agent_upsert(tenant=tenant, spec=spec)[0]


def two_deploys(stub: LLMStub, *, then: str = "Both handled.") -> None:
    """The model's first reply: a staging and a production deploy; its next: ``then``."""
    stub.play(
        completion(calls=[call(DEPLOY, STAGING, "d_staging"), call(DEPLOY, PRODUCTION, "d_prod")]),
        completion(then),
    )


def group_of(task: Task) -> list[Interaction]:
    """The task's approval group: its calls, in the reply's order."""
    found = list(
        Interaction.objects.filter(task=task).exclude(group_id="").order_by("group_position")
    )
    assert found and len({i.group_id for i in found}) == 1, found
    return found


def held_group(side, stub: LLMStub, slug: str = "planner", **policy) -> tuple[Task, list]:
    """A turn of the side's ``slug`` agent paused on a group of two held deploys."""
    two_deploys(stub)
    task = run(send(side, slug, "deploy b-1 to staging and production"))
    assert task.state == "TASK_STATE_AUTH_REQUIRED", task.status_message
    return task, group_of(task)
