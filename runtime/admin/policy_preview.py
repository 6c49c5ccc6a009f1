"""The policy editor's preview: for a sample of a tool's arguments, which rule of the draft
policy on the agent's page (saved or not) would hold the call, who of the tenant would be
asked (each stage's approvers as people, and how many of them), and the title and impact
people would see. It reads the draft with the real policy code (runtime.policy.lookup's
``policy_for``, runtime.decisions.summaries' ``held_call_record``), on a copy of the agent
that is never saved: nothing is written, nothing is sent, no audit row.

Also the fields a rule's conditions may name for each tool (its input schema, as AGENT.md
declares it or its tool server's discovery found it) and the tools a preview offers."""

import copy
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from runtime.agents.agent_models import GATE_DEFAULT_ENTRY, Agent
from runtime.decisions.decision_models import Interaction
from runtime.decisions.summaries import held_call_record, held_call_view
from runtime.policy.approver_syntax import CALLER, DEFAULT_APPROVERS, GROUP_PREFIX, ROLES
from runtime.policy.checks import tool_input_schema
from runtime.policy.conditions import schema_fields
from runtime.policy.lookup import policy_for
from runtime.policy.needs import approvers_text
from tenants.models import ApproverGroup, Membership

# The most people a stage of the preview names (the rest are counted).
PEOPLE_SHOWN = 20


def policy_fields(keys, tools, discovered: dict) -> dict[str, dict[str, str]]:
    """{policy key: {field path: kind}} for each ``server/tool`` key whose input schema is
    known (runtime.policy.checks.tool_input_schema: the one a call is checked against)."""
    found = {}
    for key in keys:
        if "/" in key:
            server, _, name = key.partition("/")
            found[key] = schema_fields(tool_input_schema(server, name, tools, discovered))
    return found


def preview_tools(keys, discovered: dict) -> list[str]:
    """The tools a preview offers: each ``server/tool`` key, and each tool a whole server's
    discovery found."""
    names: list[str] = []
    for key in keys:
        if "/" in key:
            candidates = [key]
        elif key == GATE_DEFAULT_ENTRY:
            candidates = []
        else:
            candidates = [
                f"{key}/{tool['name']}"
                for tool in discovered.get(key) or ()
                if isinstance(tool, dict) and isinstance(tool.get("name"), str)
            ]
        names += [name for name in candidates if name not in names]
    return names


@dataclass(frozen=True)
class StagePreview:
    title: str
    who: str
    required: int
    people: list[str]
    more: int = 0
    caller: bool = False


@dataclass(frozen=True)
class PolicyPreview:
    tool: str
    held_by: str
    action: str
    summary: str = ""
    impact: str = ""
    stages: list[StagePreview] = field(default_factory=list)
    required: int = 0
    high_risk: bool = False
    editable: bool = False
    bulk: bool = True


def _people(tenant_id: int, approvers: tuple[str, ...]) -> tuple[list[str], int]:
    """The tenant's members an approval with these approvers asks: by role (admins,
    operators) or group; the e-mail addresses, and how many more than PEOPLE_SHOWN."""
    roles = [a for a in approvers if a in ROLES]
    groups = [a[len(GROUP_PREFIX) :] for a in approvers if a.startswith(GROUP_PREFIX)]
    if not roles and not groups:
        return [], 0
    in_groups = ApproverGroup.objects.filter(tenant_id=tenant_id, slug__in=groups).values("members")
    members = (
        Membership.objects.filter(tenant_id=tenant_id, user__is_active=True)
        .filter(role__in=[Membership.Role.ADMIN, Membership.Role.OPERATOR])
        .filter(Q(role__in=roles) | Q(pk__in=in_groups))
        .order_by("user__email")
        .values_list("user__email", flat=True)
        .distinct()
    )
    found = list(members[: PEOPLE_SHOWN + 1])
    more = 0
    if len(found) > PEOPLE_SHOWN:
        more = members.count() - PEOPLE_SHOWN
        found = found[:PEOPLE_SHOWN]
    return found, more


def policy_preview(*, agent: Agent, document: dict, tool: str, arguments: Any) -> PolicyPreview:
    """What the draft ``document`` ({"policy", "ladder"}) says of a call of ``tool``
    (``server/tool``) with ``arguments``, as the turn would read it (see the module)."""
    draft = copy.copy(agent)
    draft.__dict__ = dict(agent.__dict__)
    draft.__dict__.pop("_countersign_hint_rules", None)
    draft.tool_policy = document.get("policy") or {}
    draft.ladder = document.get("ladder") or {}
    server, _, name = tool.partition("/")
    policy = policy_for(draft, server, name, arguments)
    held_by = policy.rule.label() if policy.rule is not None else tool
    if policy.action != "approve":
        return PolicyPreview(tool=tool, held_by=held_by, action=policy.action)
    record = held_call_record(
        server=server,
        tool=name,
        arguments=arguments,
        policy=policy,
        context=lambda: {"agent": agent.slug, "caller": "(the caller)"},
    )
    view = held_call_view(
        Interaction(kind=Interaction.Kind.APPROVAL, request={"call": record}, detail={})
    ) or {"summary": "", "impact": ""}
    stages = []
    for stage in policy.stages:
        approvers = stage.approvers or DEFAULT_APPROVERS
        if policy.deciders == "either" and CALLER not in approvers and len(policy.stages) == 1:
            approvers = (*approvers, CALLER)
        people, more = _people(agent.tenant_id, tuple(approvers))
        stages.append(
            StagePreview(
                title=stage.title,
                who=approvers_text(approvers),
                required=stage.required,
                people=people,
                more=more,
                caller=CALLER in approvers,
            )
        )
    return PolicyPreview(
        tool=tool,
        held_by=held_by,
        action=policy.action,
        summary=view["summary"],
        impact=view["impact"],
        stages=stages,
        required=policy.required,
        high_risk=policy.trust.high_risk,
        editable=policy.trust.editable,
        bulk=policy.bulk,
    )
