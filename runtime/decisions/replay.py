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
from datetime import UTC, datetime

import orjson
from django.db.models import BooleanField, ExpressionWrapper, Q, TextField
from django.db.models.functions import Cast

from runtime.agents.agent_models import Agent
from runtime.agents.agent_schema import policy_problems
from runtime.decisions.decision_models import Effect
from runtime.kernel.task_models import Task
from runtime.policy.lookup import policy_of
from runtime.policy.rules import (
    is_shadow,
    policy_rule_for,
    policy_rule_place,
    unwritten_rule,
)

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


def _held_by(policy) -> str:
    who = " or ".join(policy.approvers) if policy.approvers else "operator or admin"
    people = f"{policy.required} {'person' if policy.required == 1 else 'people'}"
    stages = f", in {len(policy.stages)} stages" if len(policy.stages) > 1 else ""
    return f"{who}, {people}{stages}"


def has_shadow_rules(agent: Agent) -> bool:
    """Whether any entry or rule of the agent's policy is written ``mode: shadow``."""
    for written in (agent.tool_policy or {}).values():
        if any(is_shadow(rule) for rule in (written if isinstance(written, list) else [written])):
            return True
    return False


def shadow_record(agent: Agent, server: str, tool: str, arguments) -> dict | None:
    """What a ``mode: shadow`` rule that matches this call would have done, as its journal
    entry keeps it (``Effect.shadow``), or None when no shadow rule matches: the turn enforces
    the policy without such rules (runtime.policy.rules.policy_rule_place)."""
    place = policy_rule_place(agent, server, tool, arguments, shadow=True)
    if place is None:
        return None
    key, written, index = place
    if not is_shadow(written if index is None else written[index]):
        return None
    match = policy_rule_for(agent, server, tool, arguments, shadow=True)
    read = policy_of(match)
    would = _ACTIONS.get(read.action, HELD)
    return {
        "would": would,
        "rule": match.label(),
        "heldBy": _held_by(read) if would == HELD else "",
    }


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
    # Read as the database has them: the arguments as JSON text (parsed here, faster than
    # the ORM's field conversion) and whether the policy denied the call (a condition on the
    # outcome, so that the outcome itself is never read).
    rows = (
        Effect.objects.filter(
            tenant_id=agent.tenant_id,
            task__agent_id=agent.pk,
            created_at__gte=since,
            created_at__lt=until,
        )
        .annotate(
            arguments_text=Cast("arguments", TextField()),
            at_text=Cast("created_at", TextField()),
            policy_denied=ExpressionWrapper(
                Q(outcome__reason=POLICY_DENIED), output_field=BooleanField()
            ),
        )
        .order_by("created_at", "id")
        .values_list(
            "public_id",
            "task_id",
            "server",
            "tool",
            "arguments_text",
            "approved_by",
            "policy_denied",
            "at_text",
        )
    )
    # What the draft does, by the place of the rule that holds a call: a rule's action and
    # approvers depend on the rule, not on the call (runtime.policy.rules.policy_rule_place).
    by_place: dict[tuple, tuple[str, str]] = {}
    changed: list[tuple] = []
    for row in rows.iterator(chunk_size=5000):
        public_id, task_id, server, tool, arguments_text, approved_by, policy_denied, at = row
        report.calls += 1
        if approved_by == "policy":
            was = ALLOWED
        elif policy_denied and not approved_by:
            was = REFUSED
        else:
            was = HELD
        report.recorded[was] += 1
        arguments = orjson.loads(arguments_text) if arguments_text else {}
        # A draft's shadow rules are replayed as if enforced: what they would have done.
        place = policy_rule_place(draft, server, tool, arguments, shadow=True)
        key = (server, tool) if place is None else (place[0], place[2])
        found = by_place.get(key)
        if found is None:
            if place is None:
                match = unwritten_rule(draft, server, tool)
            else:
                match = policy_rule_for(draft, server, tool, arguments, shadow=True)
            read = policy_of(match)
            would = _ACTIONS.get(read.action, HELD)
            found = by_place[key] = (would, _held_by(read) if would == HELD else "")
        would, held_by = found
        report.draft[would] += 1
        if held_by:
            report.held_by[held_by] = report.held_by.get(held_by, 0) + 1
        if would != was:
            changed.append((public_id, task_id, server, tool, at, was, would, held_by))
    report.changed = _changed_calls(changed)
    return report


def _changed_calls(changed: list[tuple]) -> list[ChangedCall]:
    """The changed calls, their tasks' public ids read for those alone and their times (read
    as text, which costs less than the ORM's conversion of every call's) parsed."""
    task_ids = {row[1] for row in changed}
    tasks = dict(Task.objects.filter(pk__in=task_ids).values_list("pk", "public_id"))
    return [
        ChangedCall(public_id, tasks.get(task_id, ""), server, tool, _moment(at), *rest)
        for public_id, task_id, server, tool, at, *rest in changed
    ]


def _moment(text: str) -> datetime:
    found = datetime.fromisoformat(text)
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def shadow_comparison(*, agent: Agent, since: datetime) -> ReplayReport:
    """What the ``mode: shadow`` rules recorded on the agent's calls since ``since``
    (``Effect.shadow``) beside what happened: the comparison a replay makes, for the agent's
    page."""
    report = ReplayReport()
    rows = (
        Effect.objects.filter(
            tenant_id=agent.tenant_id,
            task__agent_id=agent.pk,
            created_at__gte=since,
            shadow__isnull=False,
        )
        .order_by("-created_at", "-id")
        .values_list(
            "public_id",
            "task__public_id",
            "server",
            "tool",
            "created_at",
            "approved_by",
            "outcome",
            "shadow",
        )
    )
    for public_id, task_id, server, tool, at, approved_by, outcome, shadow in rows[:10000]:
        report.calls += 1
        denied = isinstance(outcome, dict) and outcome.get("reason") == POLICY_DENIED
        was = (
            ALLOWED if approved_by == "policy" else REFUSED if denied and not approved_by else HELD
        )
        if not isinstance(shadow, dict) or shadow.get("would") not in report.draft:
            continue
        would = shadow["would"]
        report.recorded[was] += 1
        report.draft[would] += 1
        held_by = shadow.get("heldBy", "")
        if held_by:
            report.held_by[held_by] = report.held_by.get(held_by, 0) + 1
        if would != was:
            report.changed.append(
                ChangedCall(public_id, task_id, server, tool, at, was, would, held_by)
            )
    return report
