"""A tenant's tasks: the list by state, a task's page (states over time, messages, plan,
artifacts, effects, interactions, push deliveries, receipts, streams) and its artifacts'
downloads."""

import base64
import binascii

from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils.text import get_valid_filename
from django.views.decorators.http import require_GET

from approvals.access import task_for_member
from approvals.presenting import (
    message_view,
    pretty,
    task_cursor_format,
    task_cursor_parse,
    visible_messages,
)
from approvals.task_rows_html import task_rows_html
from runtime.decisions.decision_selectors import task_effects, task_interactions
from runtime.decisions.receipts import receipts_for
from runtime.decisions.summaries import effect_call_view
from runtime.kernel import extensions as ext
from runtime.kernel.presence import streams_attached
from runtime.kernel.push.push_selectors import push_deliveries_for_task
from runtime.kernel.task_models import TaskState
from runtime.kernel.task_selectors import task_events, tenant_tasks_page
from tenants.access import member_required

TASKS_PAGE_SIZE = 50


@require_GET
@member_required
def tasks(request):
    """The tenant's tasks, latest status change first, a keyset page at a time: "Older"
    carries ``?before=`` the last row's place, "Newer" ``?after=`` the first row's (no page
    numbers: counting the tenant's tasks cost more than reading a page)."""
    state = request.GET.get("state", "")
    if state not in TaskState.values:
        state = ""
    # A cursor that does not read starts at the newest, like the inbox's.
    before = task_cursor_parse(request.GET.get("before", ""))
    after = None if before else task_cursor_parse(request.GET.get("after", ""))
    page = tenant_tasks_page(
        tenant=request.membership.tenant,
        state=state,
        before=before,
        after=after,
        page_size=TASKS_PAGE_SIZE,
    )
    filters = QueryDict(mutable=True)
    if state:
        filters["state"] = state

    def link(name: str, cursor) -> str | None:
        if cursor is None:
            return None
        linked = filters.copy()
        linked[name] = task_cursor_format(cursor)
        return f"?{linked.urlencode()}"

    return render(
        request,
        "approvals/tasks.html",
        {
            "nav": "tasks",
            "rows_html": task_rows_html(page.rows),
            "has_rows": bool(page.rows),
            "newer_url": link("after", page.newer),
            "older_url": link("before", page.older),
            "paged": before is not None or after is not None,
            "newest_url": f"?{filters.urlencode()}" if filters else "?",
            "state": state,
            "states": TaskState.choices,
        },
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
    """The task's states over time; a run of the same status update (a turn's "working"
    after each step) is one row saying how many times it came, first to last."""
    shown: list[dict] = []
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
        last = shown[-1] if shown else None
        if (
            last is not None
            and event.kind == "status"
            and last["event"].kind == "status"
            and last["event"].state == event.state
            and last["text"] == text
        ):
            last["repeats"] += 1
            last["last"] = event
            continue
        shown.append({"event": event, "text": text, "repeats": 1, "last": event})
    return shown


@require_GET
@member_required
def task_detail(request, public_id: str):
    task = task_for_member(request, public_id)
    effects = task_effects(task=task)
    interactions = task_interactions(task=task)
    by_id = {i.public_id: i for i in interactions}
    calls = [
        (e, effect_call_view(e, agent=task.agent, interaction=by_id.get(e.public_id)))
        for e in effects
    ]
    return render(
        request,
        "approvals/task_detail.html",
        {
            "nav": "tasks",
            "task": task,
            "events": _event_views(task_events(task=task)),
            "artifacts": _artifact_views(task),
            "messages_shown": visible_messages(task),
            # Redacted as on every list: the decision page alone shows a redacted value.
            "effects": [
                {"effect": e, "arguments": pretty(view["arguments"]), "summary": view["summary"]}
                for e, view in calls
            ],
            "interactions": interactions,
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
