"""Policy replay: what a draft tool policy would have done with an agent's recorded calls
(the effect journal), beside what the policy in force did: how many calls each allowed,
held (by whom, how many people) and refused, and exactly which calls would change
(``manage.py policy replay``).

What happened to a call is read from its journal entry alone: ``approved_by: policy`` is a
call the policy allowed; a call denied "by the tool policy" one it refused; every other one
the policy held for a person (a standing rule's allowing it included: the policy held it,
a rule made by a person let it through). The draft is read by the same functions that hold
a live call (runtime.policy.rules.policy_rule_for, runtime.policy.lookup.policy_of), so the
replay says what the turn would have done; standing rules are not replayed.
"""

import copy
from dataclasses import dataclass, field
from datetime import datetime

from runtime.agents.agent_models import Agent
from runtime.agents.agent_schema import policy_problems
from runtime.decisions.decision_models import Effect
from runtime.policy.lookup import policy_of
from runtime.policy.rules import policy_rule_for

ALLOWED, HELD, REFUSED = "allowed", "held", "refused"
_ACTIONS = {"allow": ALLOWED, "approve": HELD, "deny": REFUSED}
POLICY_DENIED = "denied by the tool policy"


class DraftPolicyError(ValueError):
    """The draft is no policy an agent could load: ``problems`` says where and why."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ChangedCall:
    effect_id: str
    task_id: str
    server: str
    tool: str
    at: datetime
    was: str
    would: str
    # For a call the draft holds: who may decide and how many people.
    held_by: str = ""


@dataclass
class ReplayReport:
    calls: int = 0
    recorded: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_ACTIONS.values(), 0))
    draft: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_ACTIONS.values(), 0))
    # The draft's held calls by who decides ("operator or admin, 1 person").
    held_by: dict[str, int] = field(default_factory=dict)
    changed: list[ChangedCall] = field(default_factory=list)


def recorded_outcome(approved_by: str, outcome) -> str:
    """What the policy in force did with a journalled call (see the module)."""
    if approved_by == "policy":
        return ALLOWED
    if isinstance(outcome, dict) and outcome.get("reason") == POLICY_DENIED and not approved_by:
        return REFUSED
    return HELD


def _held_by(policy) -> str:
    who = " or ".join(policy.approvers) if policy.approvers else "operator or admin"
    people = f"{policy.required} {'person' if policy.required == 1 else 'people'}"
    stages = f", in {len(policy.stages)} stages" if len(policy.stages) > 1 else ""
    return f"{who}, {people}{stages}"


def draft_agent(agent: Agent, policy: dict) -> Agent:
    """``agent`` with ``policy`` in place of its tool policy, for reading only (never saved),
    after the checks an agent file's load makes; DraftPolicyError when it fails them."""
    if not isinstance(policy, dict):
        raise DraftPolicyError(["the policy must be a mapping of server/tool to entries"])
    problems = [
        f"{'.'.join(str(p) for p in path)}: {message}" for path, message in policy_problems(policy)
    ]
    if problems:
        raise DraftPolicyError(problems)
    draft = copy.copy(agent)
    draft.__dict__.pop("_countersign_hint_rules", None)  # the annotation cache: its own
    draft.tool_policy = policy
    return draft


def policy_replay(*, agent: Agent, policy: dict, since: datetime, until: datetime) -> ReplayReport:
    """Replay ``policy`` (a draft of ``agent``'s tool policy) over the agent's calls journalled
    in [since, until) (see the module)."""
    draft = draft_agent(agent, policy)
    report = ReplayReport()
    rows = (
        Effect.objects.filter(
            tenant_id=agent.tenant_id,
            task__agent_id=agent.pk,
            created_at__gte=since,
            created_at__lt=until,
        )
        .order_by("created_at", "id")
        .values_list(
            "public_id",
            "task__public_id",
            "server",
            "tool",
            "arguments",
            "approved_by",
            "outcome",
            "created_at",
        )
    )
    # One reading per distinct rule: a rule's Policy depends on the rule, not the call.
    read: dict[str, tuple[str, str]] = {}
    for public_id, task_id, server, tool, arguments, approved_by, outcome, at in rows.iterator(
        chunk_size=5000
    ):
        report.calls += 1
        was = recorded_outcome(approved_by, outcome)
        report.recorded[was] += 1
        match = policy_rule_for(draft, server, tool, arguments)
        found = read.get(match.version)
        if found is None:
            policy_read = policy_of(match)
            would = _ACTIONS.get(policy_read.action, HELD)
            found = read[match.version] = (would, _held_by(policy_read) if would == HELD else "")
        would, held_by = found
        report.draft[would] += 1
        if held_by:
            report.held_by[held_by] = report.held_by.get(held_by, 0) + 1
        if would != was:
            report.changed.append(
                ChangedCall(public_id, task_id, server, tool, at, was, would, held_by)
            )
    return report
