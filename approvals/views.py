"""Operator pages: the inbox, the decision pages, the audit trail and the tasks.

Views are thin: they check access, parse a form, call a runtime service and render. Every
read names the tenant of the person's current membership; other tenants' ids answer 404.
"""

import base64
import binascii
import csv
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.text import get_valid_filename
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from a2a_endpoint.selectors import push_deliveries_for_task
from approvals.access import effect_for_member, interaction_for_member, task_for_member
from approvals.forms import AnswerForm, ApprovalForm, ArgumentsForm, EffectResolveForm
from approvals.stepup import step_up_redirect, stepped_up
from approvals.trust import (
    allow_similar_form,
    approvers_context,
    bulk_refusal,
    rule_after_approval,
    rule_precheck,
)
from notifications.selectors import deliveries_for_interaction, ladder_positions, ladder_steps_for
from runtime.agents.agent_selectors import agents_for_tenant
from runtime.agents.tools import policy_for, tool_spec
from runtime.decisions.approvers import Decider, approvals_progress
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.decision_selectors import (
    effect_resolutions,
    held_call_for,
    interactions_for_bulk,
    task_effects,
    task_interactions,
)
from runtime.decisions.effects import effect_resolve
from runtime.decisions.inbox import (
    INBOX_KINDS,
    agents_with_open_counts,
    audit_page,
    inbox_counts,
    inbox_interactions,
    inbox_page,
)
from runtime.decisions.interactions import interaction_answer
from runtime.decisions.receipts import receipts_for, receipts_page, tool_trust
from runtime.kernel import extensions as ext
from runtime.kernel.errors import (
    AlreadyDecided,
    DeciderRefused,
    InvalidParams,
    NotAllowed,
    StepUpRequired,
    TaskNotFound,
)
from runtime.kernel.presence import streams_attached
from runtime.kernel.task_models import TaskState
from runtime.kernel.task_selectors import task_events, tasks_for_tenant
from tenants.access import member_required, require_decider

# --- presenting a task's messages ----------------------------------------------------------


def message_view(message: dict) -> dict:
    """A ProtoJSON Message as the page shows it: who, its text, its data, its files."""
    texts, datas, files = [], [], []
    for part in message.get("parts") or []:
        if "text" in part:
            texts.append(part["text"])
        elif "data" in part:
            datas.append(json.dumps(part["data"], indent=2, sort_keys=True))
        else:
            files.append(part.get("filename") or part.get("url") or "a file")
    return {
        "role": "agent" if message.get("role") == "ROLE_AGENT" else "caller",
        "texts": texts,
        "datas": datas,
        "files": files,
    }


def visible_messages(task) -> list[dict]:
    """What the caller and the agent said on the task: the history, then the status message."""
    shown = list(task.history or [])
    if task.status_message:
        shown.append(task.status_message)
    return [message_view(m) for m in shown]


def pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


# --- the inbox -----------------------------------------------------------------------------


# What reverse() leaves unquoted in a path segment (RFC 3986 sub-delimiters, "~:@").
URL_SAFE = "!$&'()*+,;=~:@"
_SPANS = (
    ("year", 365 * 86400),
    ("month", 30 * 86400),
    ("week", 7 * 86400),
    ("day", 86400),
    ("hour", 3600),
    ("minute", 60),
)


def span_text(seconds: float) -> str:
    """A duration in its largest unit: "3 hours", "1 day" ("" under a minute)."""
    for unit, size in _SPANS:
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return ""


def _when(moment: datetime) -> tuple[str, str]:
    """An aware time as (ISO 8601, "30 Nov 2026, 11:41:46") in the site's time zone."""
    local = timezone.localtime(moment)
    return local.isoformat(), f"{local.day} {local:%b %Y, %H:%M:%S}"


def inbox_rows(items, *, now: datetime) -> list[dict]:
    """What the inbox's list shows of each item, worked out once here, not by template filters
    (a page of 50 items formats 200 times; the filters cost more than the page's queries)."""
    interaction_url = reverse("approvals:interaction", args=["-"])[: -len("-/")]
    effect_url = reverse("approvals:effect", args=["-"])[: -len("-/")]
    rows = []
    for item in items:
        created, created_title = _when(item.created_at)
        base = effect_url if item.kind == "uncertain" else interaction_url
        row = {
            "kind": item.kind,
            "public_id": item.public_id,
            "url": f"{base}{quote(item.public_id, safe=URL_SAFE)}/",
            "prompt": item.prompt,
            "state": item.interaction.state if item.interaction else "open",
            "task_id": item.task.public_id,
            "agent_name": item.agent.name,
            "subject": item.subject,
            "created": created,
            "created_title": created_title,
            "age": span_text((now - item.created_at).total_seconds()),
            "expires": None,
            "progress": approvals_progress(item.interaction) if item.interaction else "",
        }
        if item.expires_at:
            expires, expires_title = _when(item.expires_at)
            row["expires"] = expires
            row["expires_title"] = expires_title
            row["expires_in"] = span_text((item.expires_at - now).total_seconds()) or "0 minutes"
        rows.append(row)
    return rows


def ladder_text(step) -> str:
    """Where an item stands on its reminder ladder, in the inbox's words."""
    if step.action == "escalate":
        return f"escalated to {', '.join(step.roles) or 'admin'}"
    return "reminded"


def with_ladders(rows: list[dict], items, *, tenant) -> list[dict]:
    positions = ladder_positions(
        tenant=tenant, interaction_ids=[i.interaction.pk for i in items if i.interaction]
    )
    for row, item in zip(rows, items, strict=True):
        step = positions.get(item.interaction.pk) if item.interaction else None
        row["ladder"] = ladder_text(step) if step else ""
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
    agent: object = None
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
    cursor = _parse_keyset_cursor(request.GET.get("before", ""))
    now = timezone.now()
    page = inbox_page(tenant=tenant, cursor=cursor, **filters.selector_args(now=now))
    query = request.GET.copy()
    for name in list(query):
        if name not in INBOX_PARAMS or (name == "before" and cursor is None):
            del query[name]
    newest = query.copy()
    newest.pop("before", None)
    next_url = None
    if page.next_cursor:
        older = newest.copy()
        older["before"] = _format_keyset_cursor(page.next_cursor)
        next_url = f"?{older.urlencode()}"
    counts = inbox_counts(agents=agents)
    kind_links = []
    for k in INBOX_KINDS:
        linked = newest.copy()
        linked["kind"] = k
        linked.pop("state", None)
        kind_links.append({"kind": k, "count": counts.get(k, 0), "url": f"?{linked.urlencode()}"})
    can_bulk = request.membership.can_decide and filters.state == "open"
    return {
        "nav": "inbox",
        "items": with_ladders(
            inbox_rows(page.items, now=now),
            page.items,
            tenant=tenant,
        ),
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


# --- deciding on an interaction ------------------------------------------------------------


def _edit_form(interaction: Interaction, held_call, data=None) -> ArgumentsForm | None:
    """The arguments form of a held call whose policy says ``editable: true``, else None."""
    agent = interaction.task.agent
    if held_call is None or not tool_trust(agent, held_call.server, held_call.tool).editable:
        return None
    if interaction.approvals_required > 1:
        return None  # two people approve the call as it stands (runtime.decisions.interactions)
    spec = tool_spec(agent, held_call.server, held_call.tool) or {}
    return ArgumentsForm(data, schema=spec.get("schema"), current=held_call.arguments)


def _interaction_page(request, interaction: Interaction, *, forms=None, already=None, status=200):
    held_call = held_call_for(interaction=interaction)
    forms = forms or {}
    trust = (
        tool_trust(interaction.task.agent, held_call.server, held_call.tool) if held_call else None
    )
    context = {
        "nav": "inbox",
        "interaction": interaction,
        "task": interaction.task,
        "held_call": held_call,
        "arguments": pretty(held_call.arguments) if held_call else None,
        "detail": interaction.detail or {},
        "answer": pretty(interaction.answer) if interaction.answer is not None else None,
        "messages_shown": visible_messages(interaction.task),
        "can_decide": request.membership.can_decide,
        "is_open": interaction.state == Interaction.State.OPEN,
        "already": already,
        "approval_form": forms.get("approval") or ApprovalForm(),
        "answer_form": forms.get("answer") or AnswerForm(interaction=interaction),
        "edit_form": forms.get("edit") or _edit_form(interaction, held_call),
        "trust": trust,
        "stepped_up": stepped_up(request),
        "receipts": receipts_for(
            tenant=request.membership.tenant, effect_public_id=held_call.public_id
        )
        if held_call
        else [],
        "deliveries": deliveries_for_interaction(
            tenant=request.membership.tenant, interaction=interaction
        ),
        "ladder_steps": ladder_steps_for(tenant=request.membership.tenant, interaction=interaction),
        **approvers_context(request, interaction, held_call, form=forms.get("rule")),
    }
    return render(request, "approvals/interaction_detail.html", context, status=status)


@require_http_methods(["GET", "POST"])
@member_required
def interaction_detail(request, public_id: str):
    interaction = interaction_for_member(request, public_id)
    if request.method == "GET":
        return _interaction_page(request, interaction)
    require_decider(request.membership)
    decision = request.POST.get("decision", "")
    forms = {}
    arguments = None
    # The SHA-256 of the arguments the page showed: the decision binds exactly those.
    shown_hash = request.POST.get("shown_hash", "")[:64] or None
    rule_form = None
    if interaction.kind == Interaction.Kind.APPROVAL and decision == "approve_rule":
        # "Approve and allow similar calls": the rule's form is checked before the approval.
        rule_form = forms["rule"] = allow_similar_form(request, interaction, data=request.POST)
        if rule_form is None:
            messages.error(request, "Calls of this tool cannot be allowed by a rule.")
            return _interaction_page(request, interaction, status=400)
        if not rule_form.is_valid():
            return _interaction_page(request, interaction, forms=forms, status=400)
        problem = rule_precheck(request, interaction, rule_form)
        if problem:
            rule_form.add_error(None, problem)
            return _interaction_page(request, interaction, forms=forms, status=400)
        decision = "approve"
    if interaction.kind == Interaction.Kind.APPROVAL and decision in (
        "approve",
        "deny",
        "approve_edited",
    ):
        form = forms["approval"] = ApprovalForm(request.POST)
        if decision == "approve_edited":
            edit = _edit_form(interaction, held_call_for(interaction=interaction), request.POST)
            if edit is None:
                messages.error(request, "This tool's arguments cannot be edited.")
                return _interaction_page(request, interaction, status=400)
            forms["edit"] = edit
            if not edit.is_valid():
                return _interaction_page(request, interaction, forms=forms, status=400)
            arguments = edit.cleaned_data["arguments"]
        if form.is_valid():
            answer = {"approved": decision != "deny"}
            if form.cleaned_data["reason"].strip():
                answer["reason"] = form.cleaned_data["reason"].strip()
            done = "Approved." if answer["approved"] else "Denied."
    elif interaction.kind == Interaction.Kind.QUESTION and decision == "answer":
        form = forms["answer"] = AnswerForm(request.POST, interaction=interaction)
        if form.is_valid():
            answer = {"value": form.cleaned_data["value"]}
            done = "Answered."
    elif interaction.kind == Interaction.Kind.CONNECTION and decision == "decline":
        form = None
        answer = {"value": False}
        done = "Declined: the agent goes on without the connection."
    else:
        messages.error(request, "That is not a decision this interaction takes.")
        return _interaction_page(request, interaction, status=400)
    if form is not None and not form.is_valid():
        return _interaction_page(request, interaction, forms=forms, status=400)
    try:
        decided = interaction_answer(
            tenant=request.membership.tenant,
            interaction_id=interaction.public_id,
            answer=answer,
            by=request.user.subject,
            via="page",
            arguments=arguments,
            shown_hash=shown_hash,
            stepped_up=stepped_up(request),
            decider=Decider.of_member(request.membership, request.user),
        )
    except StepUpRequired:
        # risk: high: re-authenticate first; allauth replays this very decision afterwards.
        messages.info(
            request,
            "This tool is marked risk: high: confirm it is you, and your decision is then taken.",
        )
        return step_up_redirect(request)
    except AlreadyDecided as exc:
        return _interaction_page(request, exc.interaction, already=exc.interaction, status=409)
    except DeciderRefused as exc:
        messages.error(request, exc.message)
        return _interaction_page(request, interaction, status=403)
    except InvalidParams as exc:
        if exc.field == "arguments" and "edit" in forms:
            forms["edit"].add_error(None, exc.description)
            return _interaction_page(request, interaction, forms=forms, status=400)
        if form is None:
            messages.error(request, exc.description)
            return _interaction_page(request, interaction, status=400)
        form.add_error(None, exc.description)
        return _interaction_page(request, interaction, forms=forms, status=400)
    except TaskNotFound as exc:
        raise Http404("No such interaction.") from exc
    if decided.state == Interaction.State.OPEN:
        done = (
            f"Your approval is recorded ({approvals_progress(decided)}): "
            "another person must approve before the call is sent."
        )
    else:
        if (decided.answer or {}).get("edited"):
            done = "Approved with the edited arguments."
        if rule_form is not None:
            done = rule_after_approval(request, decided, rule_form) or done
    messages.success(request, done)
    return redirect("approvals:interaction", public_id=interaction.public_id)


# --- resolving an uncertain effect ---------------------------------------------------------


def _effect_page(request, effect: Effect, *, form=None, status=200):
    labels = dict(EffectResolveForm.RESOLUTIONS)
    context = {
        "nav": "inbox",
        "effect": effect,
        "task": effect.task,
        "arguments": pretty(effect.arguments),
        "outcome": pretty(effect.outcome) if effect.outcome is not None else None,
        "messages_shown": visible_messages(effect.task),
        "resolutions": [
            {"event": r, "label": labels.get(r.action.removeprefix("effect_"), r.action)}
            for r in effect_resolutions(effect=effect)
        ],
        "can_decide": request.membership.can_decide,
        "is_uncertain": effect.state == Effect.State.UNCERTAIN,
        "form": form or EffectResolveForm(),
    }
    return render(request, "approvals/effect_detail.html", context, status=status)


@require_http_methods(["GET", "POST"])
@member_required
def effect_detail(request, public_id: str):
    effect = effect_for_member(request, public_id)
    if request.method == "GET":
        return _effect_page(request, effect)
    require_decider(request.membership)
    form = EffectResolveForm(request.POST)
    if not form.is_valid():
        return _effect_page(request, effect, form=form, status=400)
    try:
        effect_resolve(
            tenant=request.membership.tenant,
            effect_id=effect.public_id,
            resolution=form.cleaned_data["resolution"],
            result=form.cleaned_data["result_value"],
            by=request.user.subject,
            via="page",
        )
    except NotAllowed as exc:
        effect.refresh_from_db()
        messages.error(request, exc.message)
        return _effect_page(request, effect, status=409)
    except InvalidParams as exc:
        form.add_error(None, exc.description)
        return _effect_page(request, effect, form=form, status=400)
    except TaskNotFound as exc:
        raise Http404("No such effect.") from exc
    messages.success(request, dict(EffectResolveForm.RESOLUTIONS)[form.cleaned_data["resolution"]])
    return redirect("approvals:effect", public_id=effect.public_id)


# --- the audit trail -----------------------------------------------------------------------


def _parse_keyset_cursor(raw: str) -> tuple[datetime, int, int] | None:
    try:
        ts, rank, pk = raw.rsplit("~", 2)
        when = parse_datetime(ts)
        rank, pk = int(rank), int(pk)
    except ValueError:
        return None
    # Only a position we could have written: an aware time, a source rank, a bigint id.
    if when is None or when.tzinfo is None or rank not in (0, 1) or not 0 < pk < 2**63:
        return None
    return when, rank, pk


def _format_keyset_cursor(cursor: tuple[datetime, int, int]) -> str:
    ts, rank, pk = cursor
    return f"{ts.isoformat()}~{rank}~{pk}"


@require_GET
@member_required
def audit(request):
    cursor = _parse_keyset_cursor(request.GET.get("before", ""))
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


# --- tasks ---------------------------------------------------------------------------------

TASKS_PAGE_SIZE = 50


@require_GET
@member_required
def tasks(request):
    state = request.GET.get("state", "")
    if state not in TaskState.values:
        state = ""
    paginator = Paginator(
        tasks_for_tenant(tenant=request.membership.tenant, state=state), TASKS_PAGE_SIZE
    )
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "approvals/tasks.html",
        {"nav": "tasks", "page": page, "state": state, "states": TaskState.choices},
    )


def _artifact_views(task) -> list[dict]:
    shown = []
    for artifact in task.artifacts or []:
        files = (task.artifact_ext.get(artifact.get("artifactId"), {}) or {}).get(ext.FILES, {})
        shown.append(
            {
                "id": artifact.get("artifactId", ""),
                "name": artifact.get("name") or artifact.get("artifactId", ""),
                "description": artifact.get("description", ""),
                "parts": [message_view({"parts": [p]}) for p in artifact.get("parts") or []],
                "version": files.get("version"),
                "size": files.get("size"),
            }
        )
    return shown


def _event_views(events) -> list[dict]:
    shown = []
    for event in events:
        payload = event.payload or {}
        text = ""
        if event.kind == "status":
            message = (payload.get("statusUpdate") or {}).get("status", {}).get("message")
            if message:
                text = " ".join(message_view(message)["texts"])
        else:
            artifact = (payload.get("artifactUpdate") or {}).get("artifact") or {}
            text = f"artifact {artifact.get('name') or artifact.get('artifactId', '')}"
        shown.append({"event": event, "text": text})
    return shown


@require_GET
@member_required
def task_detail(request, public_id: str):
    task = task_for_member(request, public_id)
    effects = task_effects(task=task)
    return render(
        request,
        "approvals/task_detail.html",
        {
            "nav": "tasks",
            "task": task,
            "events": _event_views(task_events(task=task)),
            "artifacts": _artifact_views(task),
            "messages_shown": visible_messages(task),
            "effects": [{"effect": e, "arguments": pretty(e.arguments)} for e in effects],
            "interactions": task_interactions(task=task),
            "push_deliveries": push_deliveries_for_task(tenant=task.tenant, task=task),
            "receipts": receipts_for(tenant=task.tenant, task_public_id=task.public_id),
            "streams_attached": streams_attached(task.pk),
        },
    )


def artifact_body(artifact: dict) -> tuple[bytes, str, str]:
    """An artifact as one downloadable file: (body, content type, file name).

    One text, data or raw part downloads as itself; anything else as the parts' JSON.
    """
    name = get_valid_filename(artifact.get("name") or artifact.get("artifactId") or "artifact")
    parts = artifact.get("parts") or []
    if len(parts) == 1:
        part = parts[0]
        filename = get_valid_filename(part.get("filename") or name)
        if "text" in part:
            return part["text"].encode(), part.get("mediaType") or "text/plain", filename
        if "data" in part:
            return (
                pretty(part["data"]).encode(),
                "application/json",
                filename if filename.endswith(".json") else f"{filename}.json",
            )
        if "raw" in part:
            try:
                body = base64.b64decode(part["raw"], validate=True)
            except (binascii.Error, ValueError, TypeError):
                body = b""
            return body, part.get("mediaType") or "application/octet-stream", filename
    return pretty(parts).encode(), "application/json", f"{name}.parts.json"


@require_GET
@member_required
def artifact_download(request, public_id: str, artifact_id: str):
    task = task_for_member(request, public_id)
    artifact = next((a for a in task.artifacts or [] if a.get("artifactId") == artifact_id), None)
    if artifact is None:
        raise Http404("No such artifact.")
    body, content_type, filename = artifact_body(artifact)
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


# --- bulk triage ---------------------------------------------------------------------------

BULK_MAX = 500


def _bulk_outcome(
    item_id, interaction, held, *, tenant, answer, by, fresh: bool, decider=None
) -> dict:
    """Decide one item on its own (its own transaction, audit entry and race)."""
    row = {"public_id": item_id, "prompt": interaction.prompt if interaction else ""}
    if interaction is None:
        return {**row, "outcome": "missing", "text": "No such interaction."}
    row["url"] = reverse("approvals:interaction", args=[interaction.public_id])
    if interaction.kind != Interaction.Kind.APPROVAL:
        return {
            **row,
            "outcome": "left_out",
            "text": f"Left out: a {interaction.kind} is answered on its own page.",
        }
    if interaction.state != Interaction.State.OPEN:
        who = interaction.answered_by or "someone"
        return {**row, "outcome": "already", "text": f"Already decided by {who}."}
    if held is not None and not policy_for(interaction.task.agent, held.server, held.tool).bulk:
        return {
            **row,
            "outcome": "left_out",
            "text": f"Left out: the policy for {held.server}/{held.tool} says bulk: false "
            "(decide it on its own page).",
        }
    refusal = bulk_refusal(interaction, decider)
    if refusal:
        return {**row, "outcome": "left_out", "text": f"Left out: {refusal}"}
    try:
        interaction_answer(
            tenant=tenant,
            interaction_id=interaction.public_id,
            answer=answer,
            by=by,
            via="bulk",
            stepped_up=fresh,
            decider=decider,
        )
    except StepUpRequired:
        return {
            **row,
            "outcome": "left_out",
            "text": "Left out: the tool is marked risk: high and needs a recent "
            "re-authentication (decide it on its own page).",
        }
    except AlreadyDecided as exc:
        who = exc.interaction.answered_by or "someone"
        return {**row, "outcome": "already", "text": f"Already decided by {who}."}
    except (InvalidParams, TaskNotFound) as exc:
        return {**row, "outcome": "error", "text": str(getattr(exc, "description", exc))}
    return {
        **row,
        "outcome": "decided",
        "text": "Approved." if answer["approved"] else "Denied.",
    }


@require_POST
@member_required
def inbox_bulk(request):
    """Approve or deny many open approvals with one reason, each decided on its own."""
    require_decider(request.membership)
    tenant = request.membership.tenant
    decision = request.POST.get("decision", "")
    reason = request.POST.get("reason", "").replace("\x00", "").strip()[:1000]
    if decision not in ("approve", "deny"):
        messages.error(request, "Choose approve or deny.")
        return redirect("approvals:inbox")
    if request.POST.get("all") == "1":
        # "Select all matching this filter": the filters ride along as hidden fields.
        filters = inbox_filters_from(request.POST, agents=agents_for_tenant(tenant=tenant))
        if filters.state != "open":
            messages.error(request, "Only open items can be decided.")
            return redirect("approvals:inbox")
        args = filters.selector_args(now=timezone.now())
        args.pop("state")
        ids = list(
            inbox_interactions(tenant=tenant, state="open", **args)
            .order_by("-created_at", "-pk")
            .values_list("public_id", flat=True)[: BULK_MAX + 1]
        )
    else:
        ids = list(dict.fromkeys(i for i in request.POST.getlist("ids") if i and "\x00" not in i))
    if not ids:
        messages.error(request, "Select at least one item.")
        return redirect("approvals:inbox")
    if len(ids) > BULK_MAX:
        messages.error(request, f"At most {BULK_MAX} items at once: narrow the filter.")
        return redirect("approvals:inbox")
    answer = {"approved": decision == "approve"}
    if reason:
        answer["reason"] = reason
    found = interactions_for_bulk(tenant=tenant, public_ids=ids)
    fresh = stepped_up(request)
    results = [
        _bulk_outcome(
            item_id,
            *found.get(item_id, (None, None)),
            tenant=tenant,
            answer=answer,
            by=request.user.subject,
            fresh=fresh,
            decider=Decider.of_member(request.membership, request.user),
        )
        for item_id in ids
    ]
    summary = {}
    for result in results:
        summary[result["outcome"]] = summary.get(result["outcome"], 0) + 1
    return render(
        request,
        "approvals/bulk_result.html",
        {
            "nav": "inbox",
            "decision": decision,
            "reason": reason,
            "results": results,
            "summary": summary,
        },
    )
