"""Approval groups: the held calls of one model reply, open together.

When one reply of the model holds several calls that the tool policy holds for a person, they
open as one group, in the transaction that journals them (runtime.turn.groups journals the
calls, runtime.decisions.interaction_state.interaction_group_open opens them). Each call is an
approval of its own (interactions/v1: one interaction per call, its id the effect's), with
everything a decision checks and binds: who decides, step-up, quorum and stages, the receipt.
What the group adds is what its calls share: one item in the inbox (the ``listed`` row), one
pause on the wire listing them all, and one resume of the turn, once the last of them has its
decision. A group is decided call by call (any channel, through the one decision flow) or at
once (runtime.decisions.group_flow: the flow for each of its calls, in one transaction).

The wire's pause keeps the first open call's interaction as its top-level fields, so a client
that knows one interaction at a time answers it, finds the next one on the task, and so on;
``groupId`` and ``interactions`` (every call still open) are for the clients that know groups;
``outcomes`` says what became of those decided so far. Never a call's arguments (the caller
never sees them).

Everything here runs inside the caller's transaction, with the task's row locked; the
interactions' rows are written by runtime.decisions.interaction_state alone.
"""

import logging
from dataclasses import dataclass

from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.progress import approval_progress, progress_said
from runtime.decisions.receipts import decision_outcome
from runtime.decisions.summaries import held_call_record
from runtime.kernel import extensions as ext
from runtime.kernel.shapes import agent_message
from runtime.kernel.task_models import Task, TaskState, new_key
from runtime.kernel.task_state import task_status_set, with_plan
from runtime.policy.ladders import (
    LadderError,
    expiry_outcome,
    rule_deadline_steps,
    steps_parse,
    steps_stored,
)
from runtime.policy.lookup import Policy

logger = logging.getLogger(__name__)

# How many of a group's calls the pause's text names before it counts the rest.
PROMPT_NAMES = 5


@dataclass(frozen=True)
class HeldApproval:
    """The approval that asks a person about one held call (runtime.turn.calls makes it): the
    interaction's public id (the effect's), its prompt, wire detail and server-side request,
    and what its policy asks for as it opens."""

    public_id: str
    prompt: str
    detail: dict
    request: dict
    deciders: str = "operators"
    approvers: tuple[str, ...] = ()
    approvals_required: int = 1
    risk: str = Interaction.Risk.NORMAL

    @classmethod
    def of_call(cls, effect: Effect, policy: Policy, *, reason: str) -> "HeldApproval":
        """The approval that asks a person about the held call ``effect`` under ``policy``
        (the rule that holds it now, read once with its trust keys), saying ``reason``."""
        return cls(
            public_id=effect.public_id,  # interactions/v1: for a held call, the effect id
            prompt=f"Approve {effect.server} / {effect.tool}?",
            detail={"server": effect.server, "tool": effect.tool, "reason": reason},
            request={
                **approval_request(step=effect.step, policy=policy),
                # What every surface summarises the held call from.
                "call": held_call_record(
                    server=effect.server,
                    tool=effect.tool,
                    arguments=effect.arguments,
                    policy=policy,
                    context=lambda: call_context_of(effect),
                ),
            },
            deciders=policy.deciders,
            approvers=tuple(policy.approvers),
            approvals_required=policy.required,
            risk=policy.trust.risk,
        )


def call_context_of(effect: Effect) -> dict:
    """The context a held call's templates may name (``{@caller}``, ``{@agent}``): its task's
    caller and agent, as the turn holding it has them loaded (no query when it has)."""
    task = effect.task
    agent = task.agent
    return {"caller": task.subject, "agent": agent.slug}


def approval_request(*, step: int, policy: Policy) -> dict:
    """The server-side ``request`` of an approval that holds a call: its transcript step,
    the rule of the tool policy that held it (runtime.policy.rules: kept here, not in
    ``detail``, since its conditions name argument values), the stages it asks for when
    more than one, and the rule's own ladder, parsed."""
    request: dict = {"step": step}
    if policy.rule is not None:
        request["policyRule"] = policy.rule.stored()
        rule = policy.rule.rule
        # The rule's deadline (expires, warn, on_expiry) is steps of its ladder.
        ladder = [*(rule.get("ladder") or []), *rule_deadline_steps(rule)]
        if ladder:
            try:
                request["ladder"] = steps_stored(steps_parse(ladder))
            except LadderError:
                # Stored around its checks (load_agents and admin parse it): the approval
                # still opens, with the tool's or the agent's ladder.
                logger.warning("a policy rule's ladder of %s cannot be read", policy.rule.entry)
        if rule.get("on_expiry") is not None:
            try:
                request["onExpiry"] = expiry_outcome(rule["on_expiry"])
            except ValueError:
                logger.warning("a policy rule's on_expiry of %s cannot be read", policy.rule.entry)
        if rule.get("risk") == "low":
            # What approve on expiry asks besides the tenant's leave (interaction_expire).
            request["lowRisk"] = True
    if len(policy.stages) > 1:
        request["stages"] = [stage.stored() for stage in policy.stages]
    return request


def new_group_id() -> str:
    return new_key("grp_", 12)


def group_members(*, task: Task, group_id: str) -> list[Interaction]:
    """The group's calls, in the reply's order (read under the task's lock)."""
    members = list(
        Interaction.objects.filter(tenant_id=task.tenant_id, task=task, group_id=group_id).order_by(
            "group_position"
        )
    )
    for member in members:
        member.task = task
    return members


def interaction_wire(interaction: Interaction) -> dict:
    """An open interaction as interactions/v1 puts it on the status message; an approval
    with its ``progress`` (runtime.decisions.progress)."""
    wire = {
        "interactionId": interaction.public_id,
        "kind": interaction.kind,
        "prompt": interaction.prompt,
        "detail": interaction.detail,
    }
    progress = approval_progress(interaction)
    if progress is not None:
        wire["progress"] = progress
    return wire


def pause_message(task: Task, text: str, interaction: Interaction) -> dict:
    """The status message of a task paused on ``interaction`` (first open call of a group),
    saying ``text``: and, under it as a text part of its own, the approval's progress where
    there is more to say than the prompt (runtime.decisions.progress.progress_said), so that
    a caller without the extension reads it too. The first part stays the prompt."""
    message = agent_message(task, text)
    line = progress_said(interaction)
    if line:
        message["parts"].append({"text": line})
    return message


def group_prompt(open_members: list[Interaction], size: int) -> str:
    """The pause's text: how many calls wait, of how many, and which tools (never their
    arguments)."""
    names = [
        f"{(m.detail or {}).get('server', '')} / {(m.detail or {}).get('tool', '')}"
        for m in open_members[:PROMPT_NAMES]
    ]
    more = len(open_members) - len(names)
    if more:
        names.append(f"{more} more")
    waiting = len(open_members)
    counted = f"{waiting} call{'s' if waiting != 1 else ''}"
    if waiting < size:
        counted += f" of {size}"
    return f"Approve {counted} of one reply: {'; '.join(names)}?"


def group_pause_ext(task: Task, *, group_id: str, members: list[Interaction]) -> dict:
    """The status extension of a task waiting on a group: the first open call's interaction
    at the top (a client that knows one interaction answers it), the group's id, every call
    still open, and the outcome of each one decided so far."""
    waiting = [m for m in members if m.state == Interaction.State.OPEN]
    data = {
        **interaction_wire(waiting[0]),
        "groupId": group_id,
        "interactions": [interaction_wire(m) for m in waiting],
    }
    decided = [m for m in members if m.state != Interaction.State.OPEN]
    if decided:
        data["outcomes"] = [decision_outcome(m)[ext.INTERACTIONS] for m in decided]
    return with_plan(task, {ext.INTERACTIONS: data})


def group_pause_set(task: Task, *, group_id: str, members: list[Interaction], **changes) -> None:
    """Say on the task what its group still waits for (a status update, still
    AUTH_REQUIRED): after one of its calls is decided, so that the caller reads the calls
    left, and a client that knows one interaction finds the next one at the top."""
    waiting = [m for m in members if m.state == Interaction.State.OPEN]
    task_status_set(
        task,
        TaskState.AUTH_REQUIRED,
        message=pause_message(task, group_prompt(waiting, len(members)), waiting[0]),
        status_ext=group_pause_ext(task, group_id=group_id, members=members),
        **changes,
    )


def pause_restate(*, task: Task, interaction: Interaction) -> None:
    """The task says again what its open ``interaction`` waits for now (a status update in
    the same interrupted state, with its progress: runtime.decisions.progress), so that open
    streams and push configs hear of each approval recorded, extension and escalation. A
    group says it for all its calls (unless the whole group is being decided at once:
    runtime.decisions.group_flow says it once, at the end)."""
    if task.state not in (TaskState.AUTH_REQUIRED, TaskState.INPUT_REQUIRED):
        return
    if interaction.group_id:
        if not getattr(task, "group_deciding", False):
            members = group_members(task=task, group_id=interaction.group_id)
            group_pause_set(task, group_id=interaction.group_id, members=members)
        return
    task_status_set(
        task,
        task.state,
        message=pause_message(task, interaction.prompt, interaction),
        status_ext=with_plan(task, {ext.INTERACTIONS: interaction_wire(interaction)}),
    )
