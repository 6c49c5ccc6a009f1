"""Fixtures for the operator channel: the demo agents in both tenants of the world, and real
paused turns made by running them in-process (message_send + turn_run)."""

import uuid

import pytest
from django.utils import timezone

from runtime.demo import seed_demo_agents
from runtime.models import Agent, Effect, Interaction, Task
from runtime.services.interactions import interaction_answer
from runtime.services.messages import message_send
from runtime.turn.runner import turn_run
from tenants.models import ApiToken
from tenants.tokens import api_token_create


def run(task: Task) -> Task:
    turn_run(task_pk=task.pk, worker_id="t")
    task.refresh_from_db()
    return task


def start(side, agent_slug: str, text: str) -> Task:
    agent = Agent.objects.get(tenant=side.tenant, slug=agent_slug)
    sent = message_send(
        tenant=side.tenant,
        agent=agent,
        subject=side.subject,
        message={"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]},
    )
    return run(sent.task)


class Maker:
    """Makes paused turns for one side of the world."""

    def __init__(self, side):
        self.side = side

    def approval(self, build: str = "2026.10.06-1") -> Interaction:
        task = start(self.side, "deployer", f"deploy build {build} to staging")
        return Interaction.objects.get(task=task, state=Interaction.State.OPEN)

    def question(self) -> Interaction:
        task = start(self.side, "code-reviewer", "Review this diff of payments-api")
        return Interaction.objects.get(task=task, state=Interaction.State.OPEN)

    def connection(self) -> Interaction:
        task = start(self.side, "coder", "open a pull request on payments-api: fix rounding")
        return Interaction.objects.get(task=task, state=Interaction.State.OPEN)

    def uncertain(self) -> Effect:
        """A deployment whose worker died mid-call: approved, journalled as sending, then the
        next run finds it sent but never closed (what turns.continue_call calls uncertain)."""
        interaction = self.approval()
        interaction_answer(
            tenant=self.side.tenant,
            interaction_id=interaction.public_id,
            answer={"approved": True},
            by="user:setup@example.test",
            via="page",
        )
        effect = Effect.objects.get(public_id=interaction.public_id)
        Effect.objects.filter(pk=effect.pk).update(
            state=Effect.State.SENDING, sent_at=timezone.now()
        )
        run(interaction.task)
        effect.refresh_from_db()
        assert effect.state == Effect.State.UNCERTAIN
        return effect


@pytest.fixture
def agents(world):
    for side in (world.a, world.b):
        seed_demo_agents(tenant=side.tenant)
        _, token = api_token_create(
            tenant=side.tenant,
            subject=f"program:{side.tenant.slug}-ops",
            name="ops bot",
            kind=ApiToken.Kind.OPERATOR,
        )
        side.extra["operator_token"] = token
        side.extra["make"] = Maker(side)
    return world
