"""The operator's inbox: open approvals, questions, connection requests and uncertain effects,
filtered and searched from the URL, a keyset page at a time, polled for new items.

Views are thin: they read the filters, call the inbox's selectors and render. Every read names
the tenant of the person's current membership.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from approvals.inbox_html import rows_html
from approvals.presenting import (
    URL_SAFE,
    keyset_cursor_format,
    keyset_cursor_parse,
    span_text,
    when_text,
)
from notifications.selectors import ladder_position_columns
from runtime.agents.agent_models import Agent
from runtime.agents.agent_selectors import agents_for_tenant
from runtime.decisions.approvers import approvals_progress
from runtime.decisions.call_summaries import call_summaries_for, call_summary_short
from runtime.decisions.inbox import (
    INBOX_KINDS,
    agents_with_open_counts,
    group_calls_standing,
    inbox_counts,
    inbox_page,
)
from tenants.access import member_required


def inbox_rows(items, *, now: datetime, subject: str = "", query: str = "") -> list[dict]:
    """What the inbox's list shows of each item, worked out once here, not by template filters
    (a page of 50 items formats 200 times; the filters cost more than the page's queries).

    ``subject``: who looks (an approval they gave of two is marked theirs); ``query``: the
    inbox's filters, carried to each item's page so that deciding there moves on to the next
    item of the same list."""
    interaction_url = reverse("approvals:interaction", args=["-"])[: -len("-/")]
    effect_url = reverse("approvals:effect", args=["-"])[: -len("-/")]
    carried = f"?{query}" if query else ""
    zone = timezone.get_current_timezone()
    rows = []
    for item in items:
        created, created_title = when_text(item.created_at, zone)
        base = effect_url if item.kind == "uncertain" else interaction_url
        interaction = item.interaction
        summary = interaction.summary if interaction else ""
        impact = interaction.impact if interaction else ""
        row = {
            "kind": item.kind,
            "public_id": item.public_id,
            "url": f"{base}{quote(item.public_id, safe=URL_SAFE)}/"
            + (carried if item.kind != "uncertain" else ""),
            "prompt": item.prompt,
            "summary": summary,
            # What the item is, in the domain's words: the held call's summary ("Deploy
            # 2026.12.07-1 to production"), else the prompt; the prompt (naming the tool)
            # and the agent come after it, smaller.
            "headline": summary or item.prompt,
            # What approving does, in words (the policy rule's impact), under the headline.
            "impact": impact,
            **risk_marks(item),
            # Only an approval that still counts is theirs: one a policy edit voided is not.
            "approved_by_me": bool(subject and any(a.get("by") == subject for a in item.standing)),
            "state": item.interaction.state if item.interaction else "open",
            "task_id": item.task_public_id,
            "agent_name": item.agent_name,
            "subject": item.subject,
            "created": created,
            "created_title": created_title,
            "age": span_text((now - item.created_at).total_seconds()),
            "expires": None,
            "progress": approvals_progress(item.interaction, counted=len(item.standing))
            if item.interaction
            else "",
        }
        if item.group:
            _group_row(row, item.group, url=f"{interaction_url}{{}}/{carried}")
        if item.expires_at:
            expires, expires_title = when_text(item.expires_at, zone)
            row["expires"] = expires
            row["expires_title"] = expires_title
            row["expires_in"] = span_text((item.expires_at - now).total_seconds()) or "a minute"
        rows.append(row)
    return rows


def _group_row(row: dict, calls, *, url: str) -> None:
    """An approval group's item (runtime.decisions.approval_groups): one row for the calls of
    one model reply, each call's summary in it, and how many still wait."""
    waiting = sum(1 for call in calls if call.state == "open")
    row["prompt"] = f"Approve {len(calls)} calls of one reply" + (
        f" ({waiting} still open)" if 0 < waiting < len(calls) else ""
    )
    row["summary"] = ""
    row["impact"] = ""
    row["headline"] = row["prompt"]
    row["group"] = [
        {
            "public_id": call.public_id,
            "position": call.group_position + 1,
            "prompt": call.prompt,
            "summary": call.summary,
            "impact": call.impact,
            "state": call.state,
            "url": url.format(quote(call.public_id, safe=URL_SAFE)),
        }
        for call in calls
    ]


def risk_marks(item) -> dict:
    """A row's risk, read at a glance: its badges (``risk: high``, the number of people, in
    stages) and the tone that colours the row (``high`` before ``people``)."""
    interaction = item.interaction
    if interaction is None or interaction.kind != "approval":
        return {"badges": [], "tone": ""}
    badges = []
    if interaction.risk == "high":
        badges.append(("risk-high", "risk: high"))
    if item.staged:
        badges.append(("staged", f"{interaction.approvals_required} people in stages"))
    elif interaction.approvals_required > 1:
        badges.append(("two-person", f"{interaction.approvals_required} people"))
    tone = "high" if interaction.risk == "high" else "people" if len(badges) else ""
    return {"badges": badges, "tone": tone}


def ladder_text(action: str, roles) -> str:
    """Where an item stands on its reminder ladder, in the inbox's words."""
    if action == "escalate":
        return f"escalated to {', '.join(roles or ()) or 'admin'}"
    return "reminded"


def with_ladders(rows: list[dict], items, *, tenant) -> list[dict]:
    """The rows of a page read with ``ladder_position_columns`` (inbox_page's ``columns``):
    where each stands on its ladder, and its model summary."""
    ids = [i.interaction.pk for i in items if i.interaction]
    # A model's summary of each held call, short, where the tenant has them (one query).
    summaries = call_summaries_for(tenant=tenant, interaction_ids=ids)
    for row, item in zip(rows, items, strict=True):
        action = getattr(item.interaction, "ladder_action", None)
        row["ladder"] = ladder_text(action, item.interaction.ladder_roles) if action else ""
        summary = summaries.get(item.interaction.pk) if item.interaction else None
        row["model_summary"] = (
            {"text": call_summary_short(summary), "flagged": summary.flagged}
            if summary is not None and not item.group
            else None
        )
    return rows


# The age filter: a name in the URL and the bounds it puts on the item's creation time.
INBOX_AGES = {
    "1h": ("in the last hour", timedelta(hours=1), None),
    "1d": ("in the last day", timedelta(days=1), None),
    "old1d": ("older than a day", None, timedelta(days=1)),
    "old7d": ("older than a week", None, timedelta(days=7)),
}
INBOX_STATE_NAMES = ("open", "decided", "expired")
# Every GET parameter the inbox reads; the rest is dropped from the links it builds.
INBOX_PARAMS = ("q", "state", "kind", "agent", "caller", "age", "before")
SEARCH_MAX = 200


@dataclass(frozen=True)
class InboxFilters:
    kind: str = ""
    agent: Agent | None = None
    state: str = "open"
    search: str = ""
    caller: str = ""
    age: str = ""

    @property
    def active(self) -> bool:
        return bool(self.kind or self.agent or self.search or self.caller or self.age) or (
            self.state != "open"
        )

    def selector_args(self, *, now: datetime) -> dict:
        newer, older = (INBOX_AGES[self.age][1:]) if self.age else (None, None)
        return {
            "kind": self.kind or None,
            "agent": self.agent,
            "state": self.state,
            "search": self.search,
            "caller": self.caller,
            "created_after": now - newer if newer else None,
            "created_before": now - older if older else None,
        }


def _clean_text(raw: str) -> str:
    # A NUL reaching PostgreSQL is a DataError (a 500): text filters drop them.
    return raw.replace("\x00", "").strip()[:SEARCH_MAX]


def inbox_filters_from(params, *, agents) -> InboxFilters:
    """The inbox's filters from GET (or POSTed) parameters.

    Unknown filter values are ignored rather than refused: a stale bookmark still works.
    """
    kind = params.get("kind", "")
    slug = params.get("agent", "")
    state = params.get("state", "")
    age = params.get("age", "")
    return InboxFilters(
        kind=kind if kind in INBOX_KINDS else "",
        agent=next((a for a in agents if a.slug == slug), None),
        state=state if state in INBOX_STATE_NAMES else "open",
        search=_clean_text(params.get("q", "")),
        caller=_clean_text(params.get("caller", "")),
        age=age if age in INBOX_AGES else "",
    )


def _inbox_filters(request) -> tuple[InboxFilters, list]:
    agents = agents_with_open_counts(tenant=request.membership.tenant)
    return inbox_filters_from(request.GET, agents=agents), agents


def _inbox_context(request) -> dict:
    filters, agents = _inbox_filters(request)
    tenant = request.membership.tenant
    # A cursor that does not parse starts at the newest, like the audit trail's.
    cursor = keyset_cursor_parse(request.GET.get("before", ""))
    now = timezone.now()
    counts = inbox_counts(agents=agents)
    # The counts were read a moment ago: none uncertain (most tenants, most of the time) and
    # the effects' query is left out; one that turns uncertain meanwhile shows at the next poll.
    uncertain = filters.agent.open_counts["uncertain"] if filters.agent else counts["uncertain"]
    page = inbox_page(
        tenant=tenant,
        cursor=cursor,
        any_uncertain=uncertain > 0,
        columns=ladder_position_columns(),
        **filters.selector_args(now=now),
    )
    query = request.GET.copy()
    for name in list(query):
        if name not in INBOX_PARAMS or (name == "before" and cursor is None):
            del query[name]
    newest = query.copy()
    newest.pop("before", None)
    next_url = None
    if page.next_cursor:
        older = newest.copy()
        older["before"] = keyset_cursor_format(page.next_cursor)
        next_url = f"?{older.urlencode()}"
    kind_links = []
    for k in INBOX_KINDS:
        linked = newest.copy()
        linked["kind"] = k
        linked.pop("state", None)
        kind_links.append({"kind": k, "count": counts.get(k, 0), "url": f"?{linked.urlencode()}"})
    can_bulk = request.membership.can_decide and filters.state == "open"
    rows = with_ladders(
        inbox_rows(page.items, now=now, subject=request.user.subject, query=carried_query(newest)),
        page.items,
        tenant=tenant,
    )
    return {
        "nav": "inbox",
        "items": rows,
        "items_html": rows_html(rows, can_bulk=can_bulk),
        "filters": filters,
        "filtered": filters.active,
        "kind": filters.kind,
        "agent": filters.agent.slug if filters.agent else "",
        "agents": agents,
        "kinds": INBOX_KINDS,
        "kind_links": kind_links,
        "open_total": sum(counts.values()),
        "states": INBOX_STATE_NAMES,
        "ages": [(name, label) for name, (label, _, _) in INBOX_AGES.items()],
        "can_bulk": can_bulk,
        "filter_query": newest.urlencode(),
        "paged": cursor is not None,
        "next_url": next_url,
        "newest_url": reverse("approvals:inbox") + (f"?{newest.urlencode()}" if newest else ""),
        "fragment_url": reverse("approvals:inbox_fragment")
        + (f"?{query.urlencode()}" if query else ""),
    }


@require_GET
@member_required
def inbox(request):
    return render(request, "approvals/inbox.html", _inbox_context(request))


@require_GET
@member_required
def inbox_fragment(request):
    """The inbox's list alone, for the page's poll (static/inbox.js) to swap in."""
    response = render(request, "approvals/_inbox_list.html", _inbox_context(request))
    response["Cache-Control"] = "no-store"
    return response


# --- moving on after a decision -------------------------------------------------------------

# How many items past the decided one are looked at for one the person may still act on.
_NEXT_LOOKAHEAD = 10


def inbox_url(query: str = "") -> str:
    """The inbox, with the filters an item's page carried."""
    return reverse("approvals:inbox") + (f"?{query}" if query else "")


def inbox_next(request, *, after) -> dict | None:
    """The open item the person moves on to after deciding ``after`` (an interaction): the
    next one of the inbox's list their filters make (the item page's query), older first,
    then from the newest; never one they approved already (two people). None: nothing else
    is waiting. Two queries at most, each a keyset page."""
    tenant = request.membership.tenant
    subject = request.user.subject
    query = carried_query(request.GET)
    if after.group_id:
        following = _group_next(tenant=tenant, after=after, subject=subject, query=query)
        if following is not None:
            return following
    agents = agents_for_tenant(tenant=tenant)
    filters = inbox_filters_from(request.GET, agents=agents)
    args = {**filters.selector_args(now=timezone.now()), "state": "open"}
    for cursor in ((after.created_at, 1, after.pk), None):
        page = inbox_page(tenant=tenant, cursor=cursor, page_size=_NEXT_LOOKAHEAD, **args)
        for row in inbox_rows(page.items, now=timezone.now(), subject=subject, query=query):
            if row["public_id"] != after.public_id and not row["approved_by_me"]:
                return row
    return None


def _group_next(*, tenant, after, subject: str, query: str) -> dict | None:
    """After one call of an approval group: its next call still open (in the reply's order,
    then from its first) that the person has not approved, before anything else of the
    inbox, where the group's calls share one row that the list's order would pass over."""
    calls, standing = group_calls_standing(tenant=tenant, group_id=after.group_id)
    later = [c for c in calls if c.group_position > after.group_position]
    earlier = [c for c in calls if c.group_position < after.group_position]
    for call in later + earlier:
        if call.state != "open" or any(a.get("by") == subject for a in standing.get(call.pk, ())):
            continue
        url = reverse("approvals:interaction", args=[call.public_id])
        return {
            "url": url + (f"?{query}" if query else ""),
            "prompt": f"call {call.group_position + 1} of {len(calls)} of the same reply: "
            f"{call.summary or call.prompt}",
        }
    return None


def carried_query(params) -> str:
    """The inbox filters among ``params``, as an item's page carries them."""
    kept = params.copy()
    for name in list(kept):
        if name not in INBOX_PARAMS or name == "before":
            del kept[name]
    return kept.urlencode()
