"""Reads the endpoint and the pages share; every one takes the tenant."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from runtime.errors import TaskNotFound
from runtime.models import (
    ANONYMOUS,
    TERMINAL_STATES,
    Agent,
    AuditEvent,
    Effect,
    Interaction,
    StandingRule,
    Task,
    TaskEvent,
    TaskFile,
    TaskState,
)


def task_for_caller(
    *,
    tenant,
    agent: Agent,
    subject: str,
    task_id: str,
    lock: bool = False,
    direct: bool = False,
) -> Task:
    """The caller's task, or TaskNotFound; ``lock`` takes its row lock (inside a transaction).
    A direct reply never handed to its caller (Task.direct) is found only with ``direct``."""
    tasks = Task.objects.select_for_update() if lock else Task.objects
    tasks = tasks.filter(tenant=tenant, agent=agent, public_id=task_id)
    if not direct:
        tasks = tasks.filter(direct=False)
    if subject == ANONYMOUS:
        # A caller without credentials owns no subject: the task id (128 random bits in its
        # context key) is its capability, and reaches only tasks anonymous callers started.
        tasks = tasks.filter(Q(subject=ANONYMOUS) | Q(subject__startswith=f"{ANONYMOUS}:"))
    else:
        tasks = tasks.filter(subject=subject)
    # public_id is unique: one row at most, so no ORDER BY to compile and run (.first()).
    task = next(iter(tasks[:1]), None)
    if task is None:
        raise TaskNotFound(f"Task {task_id} was not found.", taskId=task_id)
    return task


def tasks_page(
    *,
    tenant,
    agent: Agent,
    subject: str,
    context_id: str | None,
    state: str | None,
    status_after: datetime | None,
    cursor: tuple[datetime, int] | None,
    page_size: int,
) -> tuple[list[Task], int, bool]:
    """A keyset page of a caller's tasks, latest status change first; (tasks, total, more)."""
    if subject == ANONYMOUS:
        # Anonymous callers are not one caller: listing would show each the others' tasks.
        return [], 0, False
    base = Task.objects.filter(tenant=tenant, agent=agent, subject=subject, direct=False)
    if context_id:
        base = base.filter(wire_context_id=context_id)
    if state:
        base = base.filter(state=state)
    if status_after:
        base = base.filter(status_timestamp__gte=status_after)
    page = base
    if cursor:
        ts, pk = cursor
        page = page.filter(Q(status_timestamp__lt=ts) | Q(status_timestamp=ts, pk__lt=pk))
    rows = list(page.order_by("-status_timestamp", "-pk")[: page_size + 1])
    return rows[:page_size], base.count(), len(rows) > page_size


# --- the operator pages and the operator REST API ------------------------------------------

INBOX_KINDS = ("approval", "question", "connection", "uncertain")


@dataclass(frozen=True)
class InboxItem:
    """One thing waiting for a person: an open interaction or an uncertain effect."""

    kind: str  # approval | question | connection | uncertain
    public_id: str
    agent: Agent
    task: Task
    prompt: str
    subject: str
    created_at: datetime
    expires_at: datetime | None
    interaction: Interaction | None = None
    effect: Effect | None = None


INBOX_PAGE_SIZE = 50
# Ties on the time are broken by source (interactions first) and then by id, both descending,
# so the keyset cursor (time, source rank, id) names one place in the merged order.
_INBOX_RANK = {"interaction": 1, "effect": 0}
# The columns a list of interactions shows; a task's JSON (transcript, history) is never read.
_INTERACTION_LIST_FIELDS = (
    "public_id",
    "tenant",
    "kind",
    "prompt",
    "detail",
    "request",
    "subject",
    "deciders",
    "approvers",
    "approvals_required",
    "approvals",
    "widened_to",
    "state",
    "answer",
    "answered_by",
    "answered_via",
    "answered_at",
    "expires_at",
    "created_at",
    "task__public_id",
    "task__wire_context_id",
    "task__subject",
    "task__agent__slug",
    "task__agent__name",
)


# What the inbox shows of an interaction (approvals.views.inbox_rows): none of its JSON but
# the approvals a two-person rule counts. A held call's arguments (``request``) and the rest
# are read when the interaction is opened, not for each row of a page.
_INBOX_INTERACTION_FIELDS = (
    "public_id",
    "tenant",
    "kind",
    "prompt",
    "approvals_required",
    "approvals",
    "state",
    "expires_at",
    "created_at",
    "task__public_id",
    "task__subject",
    "task__agent__slug",
    "task__agent__name",
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
) -> InboxPage:
    """A keyset page of what waits for a person in the tenant, newest first.

    Open interactions and uncertain effects, merged: two queries whatever the page holds
    (each reads at most ``page_size + 1`` rows through an index, see migration 0006).
    ``state`` "decided" or "expired" lists closed interactions instead (no effects);
    ``search`` matches prompt, agent, caller and task id; ``caller`` is a subject.
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
            interactions.select_related("task", "task__agent")
            .only(*_INBOX_INTERACTION_FIELDS)
            .order_by("-created_at", "-pk")[: page_size + 1]
        )
        for interaction in rows:
            item = InboxItem(
                kind=interaction.kind,
                public_id=interaction.public_id,
                agent=interaction.task.agent,
                task=interaction.task,
                prompt=interaction.prompt,
                subject=interaction.task.subject,
                created_at=interaction.created_at,
                expires_at=interaction.expires_at,
                interaction=interaction,
            )
            items.append(
                ((interaction.created_at, _INBOX_RANK["interaction"], interaction.pk), item)
            )
    if (not kind or kind == "uncertain") and state == "open":
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
            effects.select_related("task", "task__agent")
            .only(
                "public_id",
                "tenant",
                "server",
                "tool",
                "state",
                "created_at",
                "sent_at",
                "task__public_id",
                "task__subject",
                "task__agent__slug",
                "task__agent__name",
            )
            .order_by("-inbox_at", "-pk")[: page_size + 1]
        )
        for effect in rows:
            item = InboxItem(
                kind="uncertain",
                public_id=effect.public_id,
                agent=effect.task.agent,
                task=effect.task,
                prompt=f"Did {effect.server} / {effect.tool} happen? Its outcome was lost.",
                subject=effect.task.subject,
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
    """The tenant's interactions the inbox's filters match (a queryset, unordered)."""
    rows = Interaction.objects.filter(
        tenant=tenant, state__in=INBOX_STATES.get(state, INBOX_STATES["open"])
    )
    if kind:
        rows = rows.filter(kind=kind)
    if agent is not None:
        rows = rows.filter(task__agent=agent)
    if caller:
        rows = rows.filter(subject=caller)
    if search:
        rows = rows.filter(
            Q(prompt__icontains=search)
            | Q(public_id__icontains=search)
            | Q(subject__icontains=search)
            | Q(task__agent__slug__icontains=search)
            | Q(task__agent__name__icontains=search)
            | Q(task__public_id__icontains=search)
        )
    if created_after is not None:
        rows = rows.filter(created_at__gte=created_after)
    if created_before is not None:
        rows = rows.filter(created_at__lt=created_before)
    return rows


# The tenant's agents, each joined to its open items per kind (one row per agent and kind
# that has any): interactions counted from the partial index interaction_open_by_agent
# (tenant, agent, kind; open rows only) without reading the tasks, uncertain effects (few,
# found by effect_state) joined to their tasks for the agent. A correlated count per agent
# and kind let the planner scan every open interaction once per agent (400 ms at 10,000);
# so did a join to the counts as a subquery, which PostgreSQL ran again for each agent of
# a nested loop (13 ms at 10,000 over 5 agents, 3 ms as a CTE it must materialise once).
_AGENTS_WITH_OPEN_COUNTS = f"""
WITH c AS MATERIALIZED (
    SELECT agent_id, kind, COUNT(*) AS n
    FROM {Interaction._meta.db_table}
    WHERE tenant_id = %(tenant)s AND state = %(open)s
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
            agent.open_counts[row.open_kind] = row.open_n
    return list(agents.values())


def inbox_counts(*, agents: list[Agent]) -> dict[str, int]:
    """Open items per kind over ``agents`` (from agents_with_open_counts)."""
    return {kind: sum(a.open_counts[kind] for a in agents) for kind in INBOX_KINDS}


def agents_for_tenant(*, tenant) -> list[Agent]:
    return list(Agent.objects.filter(tenant=tenant).order_by("slug").only("pk", "slug", "name"))


def interactions_for_tenant(
    *, tenant, state: str | None = None, kind: str | None = None, agent_slug: str | None = None
):
    """The tenant's interactions (a queryset, for the REST API's keyset pagination)."""
    rows = Interaction.objects.filter(tenant=tenant)
    if state:
        rows = rows.filter(state=state)
    if kind:
        rows = rows.filter(kind=kind)
    if agent_slug:
        rows = rows.filter(task__agent__slug=agent_slug)
    return rows.select_related("task", "task__agent").only(*_INTERACTION_LIST_FIELDS)


def interactions_keyset_page(
    rows, *, after: tuple[datetime, int] | None, before: tuple[datetime, int] | None, size: int
) -> tuple[list[Interaction], bool]:
    """A keyset page of ``rows``, newest first: (the page, whether more lie that way).

    ``after`` (time, id) pages towards older rows, ``before`` back towards newer ones.
    The redundant bound on the time keeps it an index condition; the OR only filters ties.
    """
    if before is not None:
        ts, pk = before
        rows = rows.filter(created_at__gte=ts).filter(
            Q(created_at__gt=ts) | Q(created_at=ts, pk__gt=pk)
        )
        page = list(rows.order_by("created_at", "pk")[: size + 1])
        return list(reversed(page[:size])), len(page) > size
    if after is not None:
        ts, pk = after
        rows = rows.filter(created_at__lte=ts).filter(
            Q(created_at__lt=ts) | Q(created_at=ts, pk__lt=pk)
        )
    page = list(rows.order_by("-created_at", "-pk")[: size + 1])
    return page[:size], len(page) > size


def interaction_for_tenant(*, tenant, public_id: str) -> Interaction | None:
    return (
        Interaction.objects.filter(tenant=tenant, public_id=public_id)
        .select_related("task", "task__agent")
        .first()
    )


def held_call_for(*, interaction: Interaction) -> Effect | None:
    """The tool call an approval holds (interactions/v1: its id is the effect's id)."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    return Effect.objects.filter(
        tenant_id=interaction.tenant_id,
        task_id=interaction.task_id,
        public_id=interaction.public_id,
    ).first()


def held_call_of(interaction: Interaction) -> Effect | None:
    """``held_call_for``, read once per interaction object: a decision's step-up check, edit
    and receipt share the row, and so does the answer that shows the decided interaction
    (the row as the decision left it, an edit's arguments included)."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    if _HELD_CALL not in interaction.__dict__:
        effect = held_call_for(interaction=interaction)
        if effect is not None and Interaction.task.is_cached(interaction):
            effect.task = interaction.task  # the decision's (locked) task: no second read
        interaction.__dict__[_HELD_CALL] = effect
    return interaction.__dict__[_HELD_CALL]


def held_call_known(interaction: Interaction, effect: Effect | None) -> None:
    """Give ``held_call_of`` the held call read along with the interaction (one statement)."""
    interaction.__dict__[_HELD_CALL] = effect


_HELD_CALL = "_held_call"


def effect_for_tenant(*, tenant, public_id: str) -> Effect | None:
    return (
        Effect.objects.filter(tenant=tenant, public_id=public_id)
        .select_related("task", "task__agent")
        .first()
    )


def effect_resolutions(*, effect: Effect) -> list[AuditEvent]:
    """Who resolved an uncertain effect, and how (the audit keeps it; the effect row does not)."""
    return list(
        AuditEvent.objects.filter(
            tenant_id=effect.tenant_id,
            task_id=effect.task_id,
            action__startswith="effect_",
            detail__effectId=effect.public_id,
        ).order_by("-created_at", "-pk")
    )


def task_for_tenant(*, tenant, public_id: str) -> Task | None:
    return Task.objects.filter(tenant=tenant, public_id=public_id).select_related("agent").first()


def tasks_for_tenant(*, tenant, state: str | None = None, agent_slug: str | None = None):
    """The tenant's tasks, latest status change first (a queryset, for a paginator)."""
    rows = (
        Task.objects.filter(tenant=tenant)
        .select_related("agent")
        .defer("transcript", "history", "artifacts", "runs", "status_ext", "artifact_ext")
    )
    if state:
        rows = rows.filter(state=state)
    if agent_slug:
        rows = rows.filter(agent__slug=agent_slug)
    return rows.order_by("-status_timestamp", "-pk")


def task_events(*, task: Task) -> list[TaskEvent]:
    return list(TaskEvent.objects.filter(tenant_id=task.tenant_id, task=task).order_by("seq"))


def task_effects(*, task: Task) -> list[Effect]:
    return list(Effect.objects.filter(tenant_id=task.tenant_id, task=task).order_by("step"))


def task_interactions(*, task: Task) -> list[Interaction]:
    return list(
        Interaction.objects.filter(tenant_id=task.tenant_id, task=task).order_by("created_at")
    )


@dataclass(frozen=True)
class AuditEntry:
    """A row of the audit page: a decision (AuditEvent) or a connection change."""

    source: str  # decision | connection
    pk: int
    created_at: datetime
    actor: str
    action: str
    via: str
    event: object


# Ties on created_at are broken by source (decisions first) and then by id, both descending,
# so the keyset cursor (created_at, source rank, id) names one place in the merged order.
_AUDIT_RANK = {"decision": 1, "connection": 0}


def _after_cursor(rows, rank: int, cursor):
    if cursor is None:
        return rows
    ts, cursor_rank, cursor_pk = cursor
    if rank < cursor_rank:
        return rows.filter(created_at__lte=ts)
    if rank > cursor_rank:
        return rows.filter(created_at__lt=ts)
    return rows.filter(Q(created_at__lt=ts) | Q(created_at=ts, pk__lt=cursor_pk))


def audit_page(
    *, tenant, cursor: tuple[datetime, int, int] | None, page_size: int = 50
) -> tuple[list[AuditEntry], tuple[datetime, int, int] | None]:
    """A keyset page of the tenant's decisions and connection changes, newest first."""
    from connections.models import ConnectionAuditEvent

    decisions = _after_cursor(
        AuditEvent.objects.filter(tenant=tenant).select_related("task", "interaction"),
        _AUDIT_RANK["decision"],
        cursor,
    ).order_by("-created_at", "-pk")[: page_size + 1]
    connections = _after_cursor(
        ConnectionAuditEvent.objects.filter(tenant=tenant).select_related("app"),
        _AUDIT_RANK["connection"],
        cursor,
    ).order_by("-created_at", "-pk")[: page_size + 1]
    entries = [
        AuditEntry("decision", e.pk, e.created_at, e.actor, e.action, e.via, e) for e in decisions
    ] + [
        AuditEntry("connection", e.pk, e.created_at, e.actor, e.action, "page", e)
        for e in connections
    ]
    entries.sort(key=lambda e: (e.created_at, _AUDIT_RANK[e.source], e.pk), reverse=True)
    page = entries[:page_size]
    more = len(entries) > page_size
    last = page[-1] if page and more else None
    next_cursor = (last.created_at, _AUDIT_RANK[last.source], last.pk) if last else None
    return page, next_cursor


def task_file_for_caller(
    *, tenant, agent_slug: str, task_id: str, subject: str, file_id: str
) -> TaskFile | None:
    """A hosted file of a caller's task, or None when any part does not match (no leaks)."""
    return (
        TaskFile.objects.filter(
            tenant=tenant,
            public_id=file_id,
            task__public_id=task_id,
            task__subject=subject,
            task__agent__slug=agent_slug,
        )
        .select_related("task")
        .first()
    )


# --- the turn queue ---------------------------------------------------------------------------


def turn_may_start(task: Task) -> bool:
    """Turns of one context run one at a time, in order."""
    return not (
        Task.objects.filter(context=task.context, turn__lt=task.turn)
        .exclude(state__in=TERMINAL_STATES)
        .exists()
    )


def turns_to_sweep(
    *, now=None, stale_submitted_after: timedelta = timedelta(seconds=30)
) -> list[int]:
    """Turns whose worker died (lease ran out) or whose start message was lost."""
    now = now or timezone.now()
    working = (
        Task.objects.filter(state=TaskState.WORKING)
        .filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True))
        # A turn parked on an uncertain effect waits for an operator, not for the sweep.
        .exclude(effects__state=Effect.State.UNCERTAIN)
    )
    submitted = Task.objects.filter(
        state=TaskState.SUBMITTED,
        lease_expires_at__isnull=True,
        created_at__lt=now - stale_submitted_after,
    )
    pks = list(working.values_list("pk", flat=True)[:500])
    pks += [t.pk for t in submitted.select_related("context")[:500] if turn_may_start(t)]
    return pks


def interactions_for_bulk(*, tenant, public_ids: list[str]) -> dict[str, tuple]:
    """The tenant's interactions by public id, each with the tool call it holds (or None) and
    the agent it belongs to: two queries, whatever the number."""
    rows = Interaction.objects.filter(tenant=tenant, public_id__in=public_ids).select_related(
        "task", "task__agent"
    )
    found = {row.public_id: row for row in rows}
    held = {
        (e.task_id, e.public_id): e
        for e in Effect.objects.filter(
            tenant=tenant,
            public_id__in=[p for p, row in found.items() if row.kind == Interaction.Kind.APPROVAL],
        ).only("pk", "task_id", "public_id", "server", "tool")
    }
    return {
        public_id: (row, held.get((row.task_id, public_id))) for public_id, row in found.items()
    }


def rules_for_tenant(*, tenant, active_only: bool = False, limit: int = 500):
    """The tenant's standing rules, newest first (active ones only when asked)."""
    rows = StandingRule.objects.filter(tenant=tenant).select_related("agent", "created_from")
    if active_only:
        now = timezone.now()
        rows = rows.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )
    return list(rows.order_by("-created_at", "-pk")[:limit])


def rule_for_tenant(*, tenant, public_id: str):
    return (
        StandingRule.objects.filter(tenant=tenant, public_id=public_id)
        .select_related("agent")
        .first()
    )
