"""An operator's stop: cancel a task from its page or over REST, with a reason.

Both channels parse their input and call ``runtime.turn.cancel.task_stop``, which closes the
task's open interactions and held calls, ends it CANCELED with the reason (the partner reads
it on GetTask) and writes the audit row. Viewers and partner tokens are refused.
"""

from django import forms
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.decorators import api_view, parser_classes, permission_classes
from rest_framework.parsers import JSONParser
from rest_framework.response import Response

from approvals import api_examples
from approvals.api import IsOperator
from approvals.api_serializers import ErrorSerializer, wire_time
from runtime.kernel.errors import InvalidParams, TaskNotCancelable, TaskNotFound
from runtime.turn.cancel import REASON_MAX, task_stop
from tenants.access import member_required, require_decider


class StopForm(forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        strip=True,
        help_text="The caller is shown it, and the audit keeps it.",
        error_messages={"required": "Say why the task is stopped: the caller is shown it."},
    )


@require_POST
@member_required
def task_stop_page(request, public_id: str):
    """The task page's Cancel: stop the task, with a reason."""
    require_decider(request.membership)
    form = StopForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, f"Not canceled: {error}")
        return redirect("approvals:task", public_id=public_id)
    try:
        task = task_stop(
            tenant=request.membership.tenant,
            task_id=public_id,
            by=request.user.subject,
            via="page",
            reason=form.cleaned_data["reason"],
        )
    except TaskNotFound as exc:
        raise Http404("No such task.") from exc
    except (TaskNotCancelable, InvalidParams) as exc:
        messages.error(request, f"Not canceled: {exc.message}")
        return redirect("approvals:task", public_id=public_id)
    messages.success(request, "The task was canceled; the caller sees the reason.")
    return redirect("approvals:task", public_id=task.public_id)


class StopSerializer(serializers.Serializer):
    reason = serializers.CharField(
        max_length=REASON_MAX, help_text="Why the task is stopped; the caller is shown it."
    )


class StoppedSerializer(serializers.Serializer):
    id = serializers.CharField()
    agent = serializers.CharField()
    caller = serializers.CharField()
    state = serializers.CharField()
    message = serializers.CharField(help_text="The task's status message, as the caller reads it.")
    updatedAt = serializers.DateTimeField()


@extend_schema(
    operation_id="tasks_cancel",
    request=StopSerializer,
    responses={
        200: StoppedSerializer,
        400: ErrorSerializer,
        403: ErrorSerializer,
        404: ErrorSerializer,
        409: OpenApiResponse(ErrorSerializer, description="The task has ended already."),
    },
    examples=api_examples.TASK_CANCEL,
)
@api_view(["POST"])
@parser_classes([JSONParser])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def task_cancel_api(request, public_id: str):
    """Stop a task: its open interactions and held calls close, and it ends CANCELED with the
    reason, which its caller reads."""
    body = StopSerializer(data=request.data if isinstance(request.data, dict) else {})
    body.is_valid(raise_exception=True)
    # The core's faults (missing: 404, ended: 409, a blank reason: 400) are answered by
    # approvals.api_errors.
    task = task_stop(
        tenant=request.operator.tenant,
        task_id=public_id,
        by=request.operator.subject,
        via="rest",
        reason=body.validated_data["reason"],
    )
    parts = (task.status_message or {}).get("parts") or []
    return Response(
        {
            "id": task.public_id,
            "agent": task.agent.slug,
            "caller": task.subject,
            "state": task.state,
            "message": "\n".join(p["text"] for p in parts if "text" in p),
            "updatedAt": wire_time(task.status_timestamp),
        }
    )
