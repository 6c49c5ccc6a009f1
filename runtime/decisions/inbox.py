"""The operators' inbox: keyset pages of open items (the audit trail's are in
runtime.decisions.audit_trail)."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Q
from django.db.models.functions import Coalesce

from runtime.agents.agent_models import Agent
from runtime.decisions.approvers import approval_needs
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.search import search_query
from runtime.kernel.task_models import (
    Task,
)
from runtime.policy.needs import approval_binding
from runtime.policy.rules import policy_rule_for

# --- the operator pages and the operator REST API ------------------------------------------

INBOX_KINDS = ("approval", "question", "connection", "uncertain")


@dataclass(frozen=True)
class InboxItem:
    """One thing waiting for a person: an open interaction or an uncertain effect."""

    kind: str  # approval | question | connection | uncertain
    public_id: str
    # The task's and its agent's, read with the item (no Task or Agent instance per row).
    agent_name: str
    task_public_id: str
    prompt: str
    subject: str
    created_at: datetime
    expires_at: datetime | None
    interaction: Interaction | None = None
    effect: Effect | None = None
    # An approval group's item (its listed row): every call of the group, in the reply's order.
    group: tuple[Interaction, ...] = ()
    # The approvals recorded (two people or more) that still count (approvals_standing).
    standing: tuple[dict, ...] = ()
    # An approval decided in stages (its policy rule's ``stages``), for the row's badge.
    staged: bool = False


INBOX_PAGE_SIZE = 50
# Ties on the time are broken by source (interactions first) and then by id, both descending,
# so the keyset cursor (time, source rank, id) names one place in the merged order.
_INBOX_RANK = {"interaction": 1, "effect": 0}
# What the inbox shows of an interaction (approvals.inbox_views.inbox_rows): none of its JSON but
# the approvals a two-person rule counts. A held call's arguments (``request``) and the rest
# are read when the interaction is opened, not for each row of a page: a row shows the
# call's one-line summary, written when it was held (runtime.decisions.search).
_INBOX_INTERACTION_FIELDS = (
    "public_id",
    "tenant",
    "task",
    "agent",
    "kind",
    "prompt",
    "summary",
    "impact",
    "approvals_required",
    "approvals",
    "risk",
    "state",
    "expires_at",
    "created_at",
    "group_id",
)
# What a row shows of the item's task and agent, joined into the item's query as columns: a
# Task and an Agent instance for each of a page's rows cost more than its query.
_INBOX_TASK_COLUMNS = {
    "task_public_id": F("task__public_id"),
    "task_subject": F("task__subject"),
    "agent_name": F("task__agent__name"),
}
# What an approval group's item shows of each of its calls (one more query for a page that
# holds groups, none for one that does not).
_GROUP_CALL_FIELDS = (
    "public_id",
    "tenant",
    "task",
    "kind",
    "prompt",
    "summary",
    "impact",
    "state",
    "group_id",
    "group_position",
)


def _keyset_after(rows, cursor, *, rank: int, field: str = "created_at"):
    """Rows strictly after the cursor (time, rank, id) in the newest-first merged order.

    The redundant ``<= time`` keeps the time an index condition; the OR only filters ties.
    """
    if cursor is None:
        return rows
    ts, cursor_rank, cursor_pk = cursor
    if rank < cursor_rank:
        return rows.filter(**{f"{field}__lte": ts})
    if rank > cursor_rank:
        return rows.filter(**{f"{field}__lt": ts})
    return rows.filter(**{f"{field}__lte": ts}).filter(
        Q(**{f"{field}__lt": ts}) | Q(**{field: ts, "pk__lt": cursor_pk})
    )


@dataclass(frozen=True)
class InboxPage:
    items: list[InboxItem]
    # (time, source rank, id) of the last item when there are older ones, else None.
    next_cursor: tuple[datetime, int, int] | None


def inbox_page(
    *,
    tenant,
    kind: str | None = None,
    agent: Agent | None = None,
    cursor: tuple[datetime, int, int] | None = None,
    page_size: int = INBOX_PAGE_SIZE,
    state: str = "open",
    search: str = "",
    caller: str = "",
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    any_uncertain: bool = True,
    columns: dict | None = None,
) -> InboxPage:
    """A keyset page of what waits for a person in the tenant, newest first.

    Open interactions and uncertain effects, merged: two queries whatever the page holds
    (each reads at most ``page_size + 1`` rows through an index, see migration 0006).
    ``state`` "decided" or "expired" lists closed interactions instead (no effects);
    ``search`` matches prompt, agent, caller, task id and a held call's arguments (never
    a redacted one: runtime.decisions.search); ``caller`` is a subject. ``any_uncertain``
    False: the caller knows that no effect is uncertain (the navigation's counts,
    agents_with_open_counts), so their query is not run. ``columns``: expressions over
    each interaction that the caller's rows show beside it, read with the page (the inbox's:
    where it stands on its reminder ladder, notifications' rows).
    """
    items: list[tuple[tuple, InboxItem]] = []
    if kind != "uncertain":
        interactions = inbox_interactions(
            tenant=tenant,
            kind=kind,
            agent=agent,
            state=state,
            search=search,
            caller=caller,
            created_after=created_after,
            created_before=created_before,
        )
        interactions = _keyset_after(interactions, cursor, rank=_INBOX_RANK["interaction"])
        rows = (
            interactions.only(*_INBOX_INTERACTION_FIELDS)
            .annotate(**_INBOX_TASK_COLUMNS, **(columns or {}))
            .order_by("-created_at", "-pk")[: page_size + 1]
        )
        rows = list(rows)
        groups = group_calls(tenant, [r.group_id for r in rows if r.group_id])
        standing = approvals_standing(tenant=tenant, interactions=rows)
        staged = staged_ids(tenant, rows)
        for interaction in rows:
            item = InboxItem(
                kind=interaction.kind,
                public_id=interaction.public_id,
                agent_name=interaction.agent_name,
                task_public_id=interaction.task_public_id,
                prompt=interaction.prompt,
                subject=interaction.task_subject,
                created_at=interaction.created_at,
                expires_at=interaction.expires_at,
                interaction=interaction,
                group=groups.get(interaction.group_id, ()),
                standing=standing.get(interaction.pk, ()),
                staged=interaction.pk in staged,
            )
            items.append(
                ((interaction.created_at, _INBOX_RANK["interaction"], interaction.pk), item)
            )
    if any_uncertain and (not kind or kind == "uncertain") and state == "open":
        effects = Effect.objects.filter(tenant=tenant, state=Effect.State.UNCERTAIN).annotate(
            inbox_at=Coalesce("sent_at", "created_at")
        )
        if agent is not None:
            effects = effects.filter(task__agent=agent)
        if caller:
            effects = effects.filter(task__subject=caller)
        if search:
            effects = effects.filter(
                Q(server__icontains=search)
                | Q(tool__icontains=search)
                | Q(public_id__icontains=search)
                | Q(task__agent__slug__icontains=search)
                | Q(task__agent__name__icontains=search)
                | Q(task__subject__icontains=search)
                | Q(task__public_id__icontains=search)
            )
        if created_after is not None:
            effects = effects.filter(inbox_at__gte=created_after)
        if created_before is not None:
            effects = effects.filter(inbox_at__lt=created_before)
        effects = _keyset_after(effects, cursor, rank=_INBOX_RANK["effect"], field="inbox_at")
        rows = (
            effects.only(
                "public_id", "tenant", "task", "server", "tool", "state", "created_at", "sent_at"
            )
            .annotate(**_INBOX_TASK_COLUMNS)
            .order_by("-inbox_at", "-pk")[: page_size + 1]
        )
        for effect in rows:
            item = InboxItem(
                kind="uncertain",
                public_id=effect.public_id,
                agent_name=effect.agent_name,
                task_public_id=effect.task_public_id,
                prompt=f"Did {effect.server} / {effect.tool} happen? Its outcome was lost.",
                subject=effect.task_subject,
                created_at=effect.inbox_at,
                expires_at=None,
                effect=effect,
            )
            items.append(((effect.inbox_at, _INBOX_RANK["effect"], effect.pk), item))
    items.sort(key=lambda pair: pair[0], reverse=True)
    more = len(items) > page_size
    page = items[:page_size]
    return InboxPage(
        items=[item for _, item in page], next_cursor=page[-1][0] if more and page else None
    )


def staged_ids(tenant, interactions) -> set[int]:
    """Which of ``interactions`` are decided in stages: one query, for a page that holds an
    approval of more than one person (stages need two at least), reading no JSON back (the
    stages are in ``request``, which a page never carries)."""
    several = [i.pk for i in interactions if i.approvals_required > 1]
    if not several:
        return set()
    return set(
        Interaction.objects.filter(
            tenant=tenant, pk__in=several, request__has_key="stages"
        ).values_list("pk", flat=True)
    )


def group_calls(tenant, group_ids: list[str]) -> dict[str, tuple[Interaction, ...]]:
    """The calls of each approval group of a page (the inbox's, bulk triage's), by group id,
    in the reply's order: one query, whatever the number."""
    if not group_ids:
        return {}
    calls: dict[str, list[Interaction]] = {}
    rows = (
        Interaction.objects.filter(tenant=tenant, group_id__in=set(group_ids))
        .only(*_GROUP_CALL_FIELDS)
        .order_by("group_id", "group_position")
    )
    for row in rows:
        calls.setdefault(row.group_id, []).append(row)
    return {group_id: tuple(found) for group_id, found in calls.items()}


def approvals_standing(*, tenant, interactions) -> dict[int, tuple[dict, ...]]:
    """The approvals recorded on each of ``interactions`` (read with their agent) that still
    count, by pk: those that approved the rule that holds the call now and its arguments, as
    approvers.approval_needs counts them for one decision; an approval a policy edit voided
    (its rule's version changed) is not one, so no list says "you approved" of it. Two
    queries for a page whatever its size, none when nothing was approved yet."""
    recorded = [i for i in interactions if i.approvals]
    if not recorded:
        return {}
    effects = {
        (e.task_id, e.public_id): e
        for e in Effect.objects.filter(
            tenant=tenant,
            task_id__in={i.task_id for i in recorded},
            public_id__in={i.public_id for i in recorded},
        ).only("task_id", "public_id", "server", "tool", "arguments", "arguments_hash")
    }
    agents = {
        agent.pk: agent
        for agent in Agent.objects.filter(
            tenant=tenant, pk__in={i.agent_id for i in recorded}
        ).only("pk", "tenant_id", "tool_policy")
    }
    found = {}
    for interaction in recorded:
        effect = effects.get((interaction.task_id, interaction.public_id))
        agent = agents[interaction.agent_id]
        if effect is None:
            # No held call (none journalled): the one decision's own reading says.
            found[interaction.pk] = approval_needs(interaction, agent).approved
            continue
        rule = policy_rule_for(agent, effect.server, effect.tool, effect.arguments)
        binds = approval_binding(version=rule.version, arguments_hash=effect.arguments_hash)
        found[interaction.pk] = tuple(a for a in interaction.approvals if a.get("binds") == binds)
    return found


def group_calls_standing(*, tenant, group_id: str) -> tuple[list[Interaction], dict]:
    """Every call of the tenant's approval group, in the reply's order (with their tasks),
    and the approvals of each that still count (approvals_standing)."""
    calls = list(
        Interaction.objects.filter(tenant=tenant, group_id=group_id)
        .select_related("task")
        .only(*_GROUP_CALL_FIELDS, "approvals", "approvals_required", "agent", "task__agent_id")
        .order_by("group_position")
        if group_id
        else ()
    )
    return calls, approvals_standing(tenant=tenant, interactions=calls)


# The inbox's states: what an interaction's state must be for each.
INBOX_STATES = {
    "open": (Interaction.State.OPEN,),
    "decided": (Interaction.State.ANSWERED,),
    "expired": (Interaction.State.EXPIRED,),
}


def inbox_interactions(
    *,
    tenant,
    kind: str | None = None,
    agent: Agent | None = None,
    state: str = "open",
    search: str = "",
    caller: str = "",
    created_after: datetime | None = None,
    created_before: datetime | None = None,
):
    """The tenant's interactions the inbox's filters match (a queryset, unordered): one row
    per approval group (its listed one), as for an interaction on its own."""
    rows = Interaction.objects.filter(
        tenant=tenant, state__in=INBOX_STATES.get(state, INBOX_STATES["open"]), listed=True
    )
    if kind:
        rows = rows.filter(kind=kind)
    if agent is not None:
        rows = rows.filter(task__agent=agent)
    if caller:
        rows = rows.filter(subject=caller)
    if search:
        # One column, a trigram index on PostgreSQL (runtime.decisions.search).
        rows = rows.filter(search_text__contains=search_query(search))
    if created_after is not None:
        rows = rows.filter(created_at__gte=created_after)
    if created_before is not None:
        rows = rows.filter(created_at__lt=created_before)
    return rows


# The tenant's agents, each joined to its open items per kind (one row per agent and kind
# that has any): interactions counted from the partial index interaction_listed_by_agent
# (tenant, agent, kind; open rows the inbox lists, one per approval group) without reading
# the tasks, uncertain effects (few,
# found by effect_state) joined to their tasks for the agent. A correlated count per agent
# and kind let the planner scan every open interaction once per agent (400 ms at 10,000);
# so did a join to the counts as a subquery, which PostgreSQL ran again for each agent of
# a nested loop (13 ms at 10,000 over 5 agents, 3 ms as a CTE it must materialise once).
_AGENTS_WITH_OPEN_COUNTS = f"""
WITH c AS MATERIALIZED (
    SELECT agent_id, kind, COUNT(*) AS n
    FROM {Interaction._meta.db_table}
    WHERE tenant_id = %(tenant)s AND state = %(open)s AND listed
    GROUP BY agent_id, kind
    UNION ALL
    SELECT t.agent_id, %(uncertain)s, COUNT(*)
    FROM {Effect._meta.db_table} e JOIN {Task._meta.db_table} t ON t.id = e.task_id
    WHERE e.tenant_id = %(tenant)s AND e.state = %(uncertain)s
    GROUP BY t.agent_id
)
SELECT a.id, a.tenant_id, a.slug, a.name, c.kind AS open_kind, c.n AS open_n
FROM {Agent._meta.db_table} a
LEFT JOIN c ON c.agent_id = a.id
WHERE a.tenant_id = %(tenant)s
ORDER BY a.slug, c.kind
"""


def agents_with_open_counts(*, tenant) -> list[Agent]:
    """The tenant's agents, each with ``open_counts`` {kind: open items}: one query, so the
    inbox's navigation counts cost the page nothing more than its agent filter did."""
    rows = Agent.objects.raw(
        _AGENTS_WITH_OPEN_COUNTS,
        {"tenant": tenant.pk, "open": Interaction.State.OPEN, "uncertain": Effect.State.UNCERTAIN},
    )
    agents: dict[int, Agent] = {}
    for row in rows:
        agent = agents.get(row.pk)
        if agent is None:
            agent = agents[row.pk] = row
            agent.open_counts = dict.fromkeys(INBOX_KINDS, 0)
        if row.open_kind in agent.open_counts:
            agent.open_counts[row.open_kind] = row.open_n or 0
    return list(agents.values())


def inbox_counts(*, agents: list[Agent]) -> dict[str, int]:
    """Open items per kind over ``agents`` (from agents_with_open_counts)."""
    return {kind: sum(a.open_counts[kind] for a in agents) for kind in INBOX_KINDS}
