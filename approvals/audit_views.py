"""The audit trail of a tenant's decisions and connection changes (filtered by agent, tool,
decider, outcome and date, and searched), and the export of its decision receipts (CSV or
JSON Lines, streamed by keyset pages; with the arguments shown and sent, redacted)."""

import csv
import json
import re
from datetime import date, datetime, time, timedelta

from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from approvals.inbox_views import SEARCH_MAX
from approvals.presenting import keyset_cursor_format, keyset_cursor_parse
from runtime.agents.agent_selectors import agents_for_tenant
from runtime.decisions.audit_trail import AUDIT_OUTCOMES, AuditFilters, audit_page
from runtime.decisions.receipts import receipts_page
from tenants.access import member_required

AUDIT_PARAMS = ("q", "agent", "tool", "decider", "outcome", "from", "to")
_TOOL_RE = re.compile(r"^[^/\s\x00]{1,100}(/[^/\s\x00]{1,100})?$")


def _day(raw: str) -> date | None:
    try:
        return date.fromisoformat(raw) if raw else None
    except ValueError:
        return None


def audit_filters_from(params, *, agents) -> AuditFilters:
    """The audit page's filters from GET; values that do not read are ignored (a stale
    bookmark still works). Dates are days in the tenant's time zone, ``to`` included."""
    text = lambda name: params.get(name, "").replace("\x00", "").strip()[:SEARCH_MAX]  # noqa: E731
    start, end = _day(params.get("from", "")), _day(params.get("to", ""))
    zone = timezone.get_current_timezone()
    tool = text("tool")
    outcome = text("outcome")
    return AuditFilters(
        agent=next((a for a in agents if a.slug == params.get("agent")), None),
        tool=tool if _TOOL_RE.match(tool) else "",
        decider=text("decider"),
        outcome=outcome if outcome in AUDIT_OUTCOMES else "",
        after=datetime.combine(start, time.min, zone) if start else None,
        before=datetime.combine(end + timedelta(days=1), time.min, zone) if end else None,
        search=text("q"),
    )


@require_GET
@member_required
def audit(request):
    tenant = request.membership.tenant
    agents = agents_for_tenant(tenant=tenant)
    filters = audit_filters_from(request.GET, agents=agents)
    cursor = keyset_cursor_parse(request.GET.get("before", ""))
    entries, next_cursor = audit_page(tenant=tenant, cursor=cursor, filters=filters)
    query = request.GET.copy()
    for name in list(query):
        if name not in AUDIT_PARAMS:
            del query[name]
    next_url = None
    if next_cursor:
        older = query.copy()
        older["before"] = keyset_cursor_format(next_cursor)
        next_url = f"?{older.urlencode()}"
    return render(
        request,
        "approvals/audit.html",
        {
            "nav": "audit",
            "entries": [_entry_view(entry) for entry in entries],
            "next_url": next_url,
            "newest_url": f"?{query.urlencode()}" if query else "?",
            "paged": cursor is not None,
            "filters": filters,
            "params": {name: request.GET.get(name, "") for name in AUDIT_PARAMS},
            "agents": agents,
            "outcomes": AUDIT_OUTCOMES,
        },
    )


def _entry_view(entry) -> dict:
    """A row of the audit page: the entry, and for a decision on a held call its summary
    (recorded with the decision; else the interaction's, redacted either way)."""
    summary = ""
    if entry.source == "decision":
        detail = entry.event.detail or {}
        interaction = entry.event.interaction if entry.event.interaction_id else None
        summary = detail.get("summary") or (interaction.summary if interaction else "")
    return {"entry": entry, "e": entry.event, "summary": summary}


# --- receipts export -------------------------------------------------------------------------

RECEIPT_FIELDS = (
    ("receipt", "public_id"),
    ("createdAt", "created_at"),
    ("decision", "decision"),
    ("decider", "decider"),
    ("channel", "channel"),
    ("channelUser", "channel_user"),
    ("agent", "agent_slug"),
    ("taskId", "task_public_id"),
    ("interactionId", "interaction_public_id"),
    ("effectId", "effect_public_id"),
    ("server", "server"),
    ("tool", "tool"),
    ("argumentsSha256", "arguments_hash"),
    ("sentArgumentsSha256", "sent_arguments_hash"),
    ("edited", "edited"),
    ("arguments", "arguments"),
    ("sentArguments", "sent_arguments"),
    ("policyVersion", "policy_version"),
    ("policyEntry", "policy_entry"),
    ("policyRule", "policy_rule"),
    ("steppedUp", "stepped_up"),
    ("ruleId", "rule_id"),
    ("reason", "reason"),
    # The receipt signed (runtime.decisions.signing): verify it against /.well-known/jwks.json.
    ("jws", "jws"),
    ("impact", "impact"),
)
EXPORT_PAGE = 500


def receipt_record_out(receipt) -> dict:
    out = {name: getattr(receipt, attr) for name, attr in RECEIPT_FIELDS}
    out["createdAt"] = receipt.created_at.isoformat()
    return out


def _csv_cell(value) -> str:
    if value is None:
        text = ""
    elif isinstance(value, dict | list):
        # The arguments, as the JSON Lines export has them.
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    else:
        text = "true" if value is True else "false" if value is False else str(value)
    # A cell a spreadsheet would read as a formula (CSV injection) is kept as text.
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _receipt_rows(tenant):
    """Every receipt of the tenant, newest first, one keyset page (one query) at a time."""
    after = None
    while True:
        page = receipts_page(tenant=tenant, after=after, size=EXPORT_PAGE)
        yield from page
        if len(page) < EXPORT_PAGE:
            return
        after = (page[-1].created_at, page[-1].pk)


class _Echo:
    def write(self, value):
        return value


@require_GET
@member_required
def audit_export(request, fmt: str):
    """The tenant's decision receipts as CSV or JSON Lines, streamed (never held whole)."""
    tenant = request.membership.tenant
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":
        writer = csv.writer(_Echo())

        def lines():
            yield writer.writerow([name for name, _ in RECEIPT_FIELDS])
            for receipt in _receipt_rows(tenant):
                yield writer.writerow(
                    [_csv_cell(value) for value in receipt_record_out(receipt).values()]
                )

        content_type, ext_name = "text/csv; charset=utf-8", "csv"
    else:

        def lines():
            for receipt in _receipt_rows(tenant):
                yield json.dumps(receipt_record_out(receipt), ensure_ascii=False) + "\n"

        content_type, ext_name = "application/jsonl; charset=utf-8", "jsonl"
    response = StreamingHttpResponse(lines(), content_type=content_type)
    response["Content-Disposition"] = (
        f'attachment; filename="receipts-{tenant.slug}-{stamp}.{ext_name}"'
    )
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response
