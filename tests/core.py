"""Drive turns through the core services and the turn loop, without the A2A wire.

A message is taken with `message_send` and its turn run with `turn_run`, in the test's own
thread and transaction. Under `django_db` (not transactional) the turns that the services
enqueue on commit are dropped with the test's transaction, so a turn runs exactly when a
test calls `run`.
"""

import dataclasses
import uuid
from io import StringIO

from django.core.management import call_command
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.flow import Decision, decision_take
from runtime.decisions.standing_rules import rule_create
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task, TaskState
from runtime.turn.intake import message_send
from runtime.turn.runner import turn_run
from tenants.models import Membership

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

# A question with choices and no custom answer, then a reply naming the choice.
CHOOSER = [
    {
        "ask": {
            "id": "env",
            "prompt": "Which environment?",
            "choices": ["staging", "production"],
            "allowCustom": False,
        }
    },
    {"reply": "Chose {{ answers.env }}."},
]


def deploy_step(environment: str = "staging", tool: str = "deploy_build", build: str = "b-1"):
    """A scripted model step calling the demo deploy tool."""
    return {
        "call": {
            "server": "deploy",
            "tool": tool,
            "args": {"build": build, "environment": environment},
        }
    }


def caller_may_approve(tenant, slug: str = "deployer") -> None:
    """Let the caller approve the agent's held calls in band too (``deciders: either``): the
    demo deployer's policy leaves them to the tenant's operators."""
    agent = Agent.objects.get(tenant=tenant, slug=slug)

    def either(rule):
        return {**(rule if isinstance(rule, dict) else {"action": rule}), "deciders": "either"}

    agent.tool_policy = {
        key: [either(r) for r in rule] if isinstance(rule, list) else either(rule)
        for key, rule in agent.tool_policy.items()
    }
    agent.save(update_fields=["tool_policy"])


def message(text: str | None = "go", **fields) -> dict:
    """A caller's message as the services take it (A2A Message, ProtoJSON names)."""
    built = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER"}
    if text is not None:
        built["parts"] = [{"text": text}]
    built.update(fields)
    return built


def run(task: Task, worker_id: str = "t") -> Task:
    """Run (or resume) the task's turn until it pauses or ends; return the task re-read."""
    turn_run(task_pk=task.pk, worker_id=worker_id)
    task.refresh_from_db()
    return task


def send(side, agent_slug: str, text: str = "go", **fields) -> Task:
    """Take a new message for the agent from the side's partner; the turn is not run yet."""
    agent = Agent.objects.get(tenant=side.tenant, slug=agent_slug)
    return message_send(
        tenant=side.tenant, agent=agent, subject=side.subject, message=message(text, **fields)
    ).task


def start(side, agent_slug: str, text: str) -> Task:
    """Send a message and run its turn."""
    return run(send(side, agent_slug, text))


def reply(task: Task, text: str | None = None, **fields):
    """The partner's message on the task (an in-band answer); returns the SendResult."""
    return message_send(
        tenant=task.tenant,
        agent=task.agent,
        subject=task.subject,
        message=message(text, taskId=task.public_id, contextId=task.wire_context_id, **fields),
    )


def in_band(interaction: Interaction, **answer) -> dict:
    """The interactions/v1 metadata of an answer to ``interaction``."""
    return {ext.INTERACTIONS: {"interactionId": interaction.public_id, **answer}}


def open_interaction(task: Task) -> Interaction:
    return Interaction.objects.get(task=task, state=Interaction.State.OPEN)


def held_approval(side, agent_slug: str, text: str = "go") -> Interaction:
    """Send a message to the side's agent and run its turn to the pause on a held call: the
    open approval (its task and agent read with it)."""
    task = run(send(side, agent_slug, text))
    assert task.state == TaskState.AUTH_REQUIRED, task.status_message
    return Interaction.objects.select_related("task", "task__agent").get(
        task=task, state=Interaction.State.OPEN
    )


def member(side, role: str = "operator") -> Decider:
    """The side's ``role`` member as the decider they are (their membership's role and
    groups)."""
    user = getattr(side, role)
    return Decider.of_member(Membership.objects.get(tenant=side.tenant, user=user), user)


def flow_answer(
    *,
    tenant,
    interaction_id: str,
    answer: dict,
    by: str,
    via: str,
    decider: Decider | None = None,
    stepped_up: bool = False,
    arguments: dict | None = None,
    shown_hash: str | None = None,
) -> Interaction:
    """A decision through the one decision flow (runtime.decisions.flow.decision_take), as
    the tests spell it: ``answer`` is {approved, reason} or {value}; ``decider`` defaults to a
    person deciding as an operator under ``by``; ``stepped_up``: they re-authenticated."""
    decider = decider or Decider(subject=by)
    if stepped_up:
        decider = dataclasses.replace(decider, stepped_up=True)
    decision = Decision(
        approved=answer.get("approved"),
        value=answer.get("value"),
        reason=answer.get("reason", ""),
        arguments=arguments,
        shown_hash=shown_hash,
    )
    return decision_take(
        tenant=tenant,
        interaction_id=interaction_id,
        decider=decider,
        decision=decision,
        channel=via,
    ).interaction


def decide(
    interaction: Interaction,
    by: str = "user:operator@acme.test",
    *,
    stepped_up: bool = False,
    **answer,
):
    """An operator's decision on the page, through the decision flow (``stepped_up``: the
    member re-authenticated recently, as a ``risk: high`` approval needs)."""
    return flow_answer(
        tenant=interaction.tenant,
        interaction_id=interaction.public_id,
        answer=answer,
        by=by,
        via="page",
        stepped_up=stepped_up,
    )


def edit_approve(side, interaction: Interaction, arguments: dict):
    """``side``'s operator approves ``interaction`` on the page with edited ``arguments``."""
    return flow_answer(
        tenant=side.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": True},
        by=side.operator.subject,
        via="page",
        arguments=arguments,
    )


def approved_with_rule(side, slug, text, *, role="operator", **rule):
    """Hold a call, approve it as ``role`` and make a standing rule from that approval (for
    the caller only, with no conditions, for a day, unless ``rule`` says otherwise)."""
    task = run(send(side, slug, text))
    interaction = Interaction.objects.get(task=task, state="open")
    decider = member(side, role)
    decide(interaction, by=decider.subject, approved=True)
    rule.setdefault("caller_only", True)
    rule.setdefault("conditions", [])
    rule.setdefault("duration", "1d")
    made = rule_create(
        tenant=side.tenant, interaction_id=interaction.public_id, decider=decider, **rule
    )
    assert run(task).state == TaskState.COMPLETED
    return made


def load_agents(path, tenant: str = "acme") -> str:
    """``manage.py load_agents PATH --tenant TENANT``: what it printed."""
    out = StringIO()
    call_command("load_agents", str(path), "--tenant", tenant, stdout=out)
    return out.getvalue()


def status_text(task: Task) -> str:
    return " ".join(p.get("text", "") for p in (task.status_message or {}).get("parts", []))


def tool_results(task: Task) -> list[dict]:
    return [e for e in task.transcript if e["type"] == "tool_result"]


def states(task: Task) -> list[str]:
    """The task's states in the order its status events recorded them."""
    return list(task.events.filter(kind="status").order_by("seq").values_list("state", flat=True))


class Maker:
    """Makes paused turns for one side of the world."""

    def __init__(self, side):
        self.side = side

    def approval(self, build: str = "2026.10.06-1") -> Interaction:
        return open_interaction(start(self.side, "deployer", f"deploy build {build} to staging"))

    def question(self) -> Interaction:
        return open_interaction(
            start(self.side, "code-reviewer", "Review this diff of payments-api")
        )

    def connection(self) -> Interaction:
        return open_interaction(
            start(self.side, "coder", "open a pull request on payments-api: fix rounding")
        )

    def uncertain(self) -> Effect:
        """A deployment whose worker died mid-call: approved, journalled as sending, then the
        next run finds it sent but never closed (what turns.continue_call calls uncertain)."""
        interaction = self.approval()
        decide(interaction, by="user:setup@example.test", approved=True)
        effect = Effect.objects.get(public_id=interaction.public_id)
        Effect.objects.filter(pk=effect.pk).update(
            state=Effect.State.SENDING, sent_at=timezone.now()
        )
        run(interaction.task)
        effect.refresh_from_db()
        assert effect.state == Effect.State.UNCERTAIN
        return effect
