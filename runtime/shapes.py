"""The A2A shapes the core itself produces: timestamps, agent messages, status and artifact
updates. The endpoint (a2a_endpoint.wire) renders whole tasks; these are what the core
stores in task events and histories."""

import uuid
from datetime import UTC
from typing import Any

from runtime.models import Task


def now_iso(ts) -> str:
    """RFC 3339 UTC with milliseconds and Z (A2A §5.6.1)."""
    # isoformat truncates to milliseconds, as the wire does, in less time than strftime (a
    # ListTasks page formats a hundred); its "+00:00" becomes the Z.
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
