"""The A2A shapes the core itself produces: timestamps, agent messages, status and artifact
updates. The endpoint (a2a_endpoint.wire) renders whole tasks; these are what the core
stores in task events and histories."""

import uuid
from datetime import UTC
from typing import Any

from runtime.kernel.task_models import Task


def now_iso(ts) -> str:
    """RFC 3339 UTC with milliseconds and Z (A2A §5.6.1)."""
    # isoformat writes four digits of year as RFC 3339 asks (strftime's %Y fewer below 1000,
    # and ListTasks' page query writes four: a2a_endpoint.asyncdb), truncates to milliseconds,
    # and takes less time than strftime; its "+00:00" becomes the Z.
    return ts.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def agent_message(task: Task, text: str, *, with_task: bool = True) -> dict:
    message = {
        "messageId": str(uuid.uuid4()),
        "contextId": task.wire_context_id,
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    }
    if with_task:
        message["taskId"] = task.public_id
    return message


def status_payload(task: Task) -> dict:
    status: dict[str, Any] = {"state": task.state, "timestamp": now_iso(task.status_timestamp)}
    if task.status_message:
        status["message"] = task.status_message
    return {
        "statusUpdate": {
            "taskId": task.public_id,
            "contextId": task.wire_context_id,
            "status": status,
        }
    }


def artifact_payload(task: Task, artifact: dict) -> dict:
    return {
        "artifactUpdate": {
            "taskId": task.public_id,
            "contextId": task.wire_context_id,
            "artifact": artifact,
        }
    }


def decider_public(by: str, via: str) -> str:
    """Who decided, as a partner may read it (interactions/v1 ``decidedBy``): the kind of
    decider, never an operator's e-mail or a program's name. The caller's subject is recorded
    as ``approvedBy`` server side; what goes back on the wire says only the role."""
    if via == "inband":
        return "caller"
    if via == "rule" or by.startswith("rule:"):
        return "rule"
    if by.startswith("system:"):
        return by  # system:expiry, system:cancel, ...: names no person
    return "operator"
