"""The 0.3 (and 0.2.5) shapes of what the 1.0 wire writes: tasks, messages, parts, stream
events and push bodies. Pure functions of the 1.0 ProtoJSON dicts (a2a_endpoint.wire), shared
by the 0.3 dialect of the endpoint (a2a_endpoint.dialect03) and by the push bodies of configs
registered in 0.3 (a2a_endpoint.push_bodies); they import nothing of the endpoint.

The 0.x hosts (the Wildo host speaks 0.2.5) set the rule of this dialect: a pause for a person is
``input-required`` whatever its kind (an approval, a connection), since the dialect's callers
know no other interrupted state; interactions/v1, for callers that activated it, still says
``kind: approval`` on the status message. 1.0 callers see TASK_STATE_AUTH_REQUIRED as ever.
"""

from typing import Any

ROLES_IN = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
ROLES_OUT = {v: k for k, v in ROLES_IN.items()}
TERMINAL = {"completed", "canceled", "failed", "rejected"}
# A 0.3 status-update event is ``final`` when the stream closes after it: a terminal state or
# input-required, which in this dialect includes an approval pause (for a 0.x host's stream,
# the terminal frame).
FINAL_STATES = TERMINAL | {"input-required"}


def state_out(state: str) -> str:
    """TASK_STATE_INPUT_REQUIRED -> input-required; AUTH_REQUIRED is input-required too (0.x
    hosts know no other interrupted state); UNSPECIFIED is 0.3's unknown."""
    name = state.removeprefix("TASK_STATE_").lower().replace("_", "-")
    if name == "auth-required":
        return "input-required"
    return "unknown" if name == "unspecified" else name


def part_out(part: dict) -> dict:
    metadata = part.get("metadata")
    if "text" in part:
        out: dict[str, Any] = {"kind": "text", "text": part["text"]}
    elif "data" in part:
        data = part["data"]
        if not isinstance(data, dict):
            # 0.3's DataPart holds an object: wrapped as the a2a-sdk's compat layer does.
            data = {"value": data}
            metadata = {**(metadata or {}), "data_part_compat": True}
        out = {"kind": "data", "data": data}
    elif "raw" in part or "url" in part:
        file = {"bytes": part["raw"]} if "raw" in part else {"uri": part["url"]}
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {"kind": "file", "file": file}
    else:
        out = {"kind": "data", "data": {}}
    if metadata is not None:
        out["metadata"] = metadata
    return out


def message_out(message: dict) -> dict:
    out: dict[str, Any] = {"kind": "message"}
    out.update({k: v for k, v in message.items() if k not in ("role", "parts")})
    out["role"] = ROLES_OUT.get(message.get("role", ""), "agent")
    out["parts"] = [part_out(p) for p in message.get("parts", [])]
    return out


def status_out(status: dict) -> dict:
    out: dict[str, Any] = {"state": state_out(status["state"])}
    if status.get("message"):
        out["message"] = message_out(status["message"])
    if status.get("timestamp"):
        out["timestamp"] = status["timestamp"]
    return out


def artifact_out(artifact: dict) -> dict:
    return {**artifact, "parts": [part_out(p) for p in artifact.get("parts", [])]}


def task_out(task: dict) -> dict:
    out = {
        "kind": "task",
        "id": task["id"],
        "contextId": task["contextId"],
        "status": status_out(task["status"]),
    }
    if "artifacts" in task:
        out["artifacts"] = [artifact_out(a) for a in task["artifacts"]]
    if "history" in task:
        out["history"] = [message_out(m) for m in task["history"]]
    if "metadata" in task:
        out["metadata"] = task["metadata"]
    return out


def event_out(event: dict) -> dict:
    """A 1.0 StreamResponse (the ``result`` of one SSE event) as the 0.3 event: a Task, a
    Message, or a ``status-update`` (with ``final``) or ``artifact-update``."""
    if "task" in event:
        return task_out(event["task"])
    if "message" in event:
        return message_out(event["message"])
    if "statusUpdate" in event:
        update = event["statusUpdate"]
        status = status_out(update["status"])
        out = {
            "kind": "status-update",
            "taskId": update["taskId"],
            "contextId": update["contextId"],
            "status": status,
            "final": status["state"] in FINAL_STATES,
        }
        if "metadata" in update:
            out["metadata"] = update["metadata"]
        return out
    if "artifactUpdate" in event:
        update = event["artifactUpdate"]
        out = {
            "kind": "artifact-update",
            "taskId": update["taskId"],
            "contextId": update["contextId"],
            "artifact": artifact_out(update["artifact"]),
        }
        for key in ("append", "lastChunk", "metadata"):
            if key in update:
                out[key] = update[key]
        return out
    raise ValueError(f"not a StreamResponse: {sorted(event)}")


def push_body_out(event: dict, state: str) -> dict:
    """A push body for a config registered in 0.3: the Task as of the event, the body the
    a2a-sdk's 0.3 servers POST (0.3 left the body open; its examples send the Task). A
    status event gives the Task its status (and the event's metadata); an artifact event,
    the artifact and ``state``, the task's state when the artifact was stored."""
    if "statusUpdate" in event:
        update = event["statusUpdate"]
        out = {
            "kind": "task",
            "id": update["taskId"],
            "contextId": update["contextId"],
            "status": status_out(update["status"]),
        }
        if "metadata" in update:
            out["metadata"] = update["metadata"]
        return out
    if "artifactUpdate" in event:
        update = event["artifactUpdate"]
        return {
            "kind": "task",
            "id": update["taskId"],
            "contextId": update["contextId"],
            "status": {"state": state_out(state)},
            "artifacts": [artifact_out(update["artifact"])],
        }
    return event_out(event)
