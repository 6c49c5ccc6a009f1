"""The audit trail of a tenant's decisions and connection changes, and the export of its
decision receipts (CSV or JSON Lines, streamed by keyset pages)."""

import csv
import json

from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from approvals.presenting import keyset_cursor_parse
from runtime.decisions.inbox import audit_page
from runtime.decisions.receipts import receipts_page
from tenants.access import member_required


@require_GET
@member_required
def audit(request):
    cursor = keyset_cursor_parse(request.GET.get("before", ""))
    entries, next_cursor = audit_page(tenant=request.membership.tenant, cursor=cursor)
    next_url = None
    if next_cursor:
        ts, rank, pk = next_cursor
        next_url = f"?before={ts.isoformat()}~{rank}~{pk}".replace("+", "%2B")
    return render(
        request,
        "approvals/audit.html",
        {"nav": "audit", "entries": entries, "next_url": next_url, "paged": cursor is not None},
    )


# --- receipts export (issue 13) -------------------------------------------------------------

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
    ("policyVersion", "policy_version"),
    ("policyEntry", "policy_entry"),
    ("policyRule", "policy_rule"),
    ("steppedUp", "stepped_up"),
    ("ruleId", "rule_id"),
    ("reason", "reason"),
)
EXPORT_PAGE = 500


def receipt_record_out(receipt) -> dict:
    out = {name: getattr(receipt, attr) for name, attr in RECEIPT_FIELDS}
    out["createdAt"] = receipt.created_at.isoformat()
    return out


def _csv_cell(value) -> str:
    text = "true" if value is True else "false" if value is False else str(value)
    if value is None:
        text = ""
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
