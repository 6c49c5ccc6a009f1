"""The audit trail of a tenant: keyset pages of its decisions and connection changes, newest
first, filtered by agent, tool, decider, outcome and date, and searched."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from runtime.decisions.search import search_query
from runtime.kernel.task_models import AuditEvent

# The outcomes the audit page filters by: the decisions' words (receipts.decision_word) and
# what else a person or the system did to an item.
AUDIT_OUTCOMES = (
    "approved",
    "denied",
    "expired",
    "answered",
    "connected",
    "declined",
    "approval_recorded",
    "approval_voided",
    "allowed_by_rule",
    "rule_created",
    "rule_revoked",
    "rule_inapplicable",
    "task_canceled",
    "disconnected",
)


@dataclass(frozen=True)
class AuditFilters:
    """What the audit page narrows to. ``agent``: an Agent of the tenant; ``tool``:
    ``server/tool`` or ``server``; ``decider``: part of a subject; ``outcome``: one of
    AUDIT_OUTCOMES; ``after``/``before``: bounds on the time; ``search``: text (an item's
    prompt, summary, reason, ids, who, what, and a held call's arguments)."""

    agent: object = None
    tool: str = ""
    decider: str = ""
    outcome: str = ""
    after: datetime | None = None
    before: datetime | None = None
    search: str = ""

    @property
    def active(self) -> bool:
        return any(
            (self.agent, self.tool, self.decider, self.outcome, self.after, self.before)
        ) or bool(self.search)

    @property
    def decisions_only(self) -> bool:
        """Connection changes name no agent or tool: such a filter leaves them out."""
        return bool(self.agent or self.tool)


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


def _common(rows, filters: AuditFilters):
    if filters.decider:
        rows = rows.filter(actor__icontains=filters.decider)
    if filters.outcome:
        rows = rows.filter(action=filters.outcome)
    if filters.after is not None:
        rows = rows.filter(created_at__gte=filters.after)
    if filters.before is not None:
        rows = rows.filter(created_at__lt=filters.before)
    return rows


def audit_decisions(*, tenant, filters: AuditFilters):
    """The tenant's decision rows the filters match (a queryset, unordered)."""
    rows = _common(AuditEvent.objects.filter(tenant=tenant), filters)
    if filters.agent is not None:
        rows = rows.filter(task__agent=filters.agent)
    if filters.tool:
        server, _, tool = filters.tool.partition("/")
        # Decisions on a held call name it on their interaction; voids, rules' uses and
        # standing rules on their own row.
        on_row = Q(detail__server=server)
        on_item = Q(interaction__detail__server=server)
        if tool:
            on_row &= Q(detail__tool=tool)
            on_item &= Q(interaction__detail__tool=tool)
        rows = rows.filter(on_row | on_item)
    if filters.search:
        words = filters.search
        rows = rows.filter(
            Q(actor__icontains=words)
            | Q(action__icontains=words)
            | Q(detail__icontains=words)
            | Q(task__public_id__icontains=words)
            | Q(interaction__public_id__icontains=words)
            # What the inbox's search finds an item by: never a redacted value.
            | Q(interaction__search_text__contains=search_query(words))
        )
    return rows


def audit_page(
    *, tenant, cursor: tuple[datetime, int, int] | None, page_size: int = 50, filters=None
) -> tuple[list[AuditEntry], tuple[datetime, int, int] | None]:
    """A keyset page of the tenant's decisions and connection changes, newest first."""
    from connections.models import ConnectionAuditEvent

    filters = filters or AuditFilters()
    decisions = _after_cursor(
        audit_decisions(tenant=tenant, filters=filters).select_related("task", "interaction"),
        _AUDIT_RANK["decision"],
        cursor,
    ).order_by("-created_at", "-pk")[: page_size + 1]
    connections = []
    if not filters.decisions_only:
        rows = _common(ConnectionAuditEvent.objects.filter(tenant=tenant), filters)
        if filters.search:
            rows = rows.filter(
                Q(actor__icontains=filters.search)
                | Q(action__icontains=filters.search)
                | Q(app__name__icontains=filters.search)
                | Q(app__slug__icontains=filters.search)
            )
        connections = _after_cursor(
            rows.select_related("app"), _AUDIT_RANK["connection"], cursor
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
