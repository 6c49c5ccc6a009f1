"""The transcript: what the model saw and did in a turn, kept on the task row. These helpers
read and append entries in memory; the runner saves them with its step."""

from runtime.llm.actions import TurnView
from runtime.models import Task
from runtime.turn.inputs import input_files

# The fields of the task row a turn's step writes besides its status (runtime.task_state):
# lease_expires_at because every step renews the lease.
TURN_FIELDS = (
    "artifacts",
    "artifact_ext",
    "transcript",
    "lease_owner",
    "lease_expires_at",
    "plan",
    "steps",
    "reply_message",
)


def action_record(task: Task, action: dict, cursor: int | None = None) -> int:
    """Append the model's action; return its step (its position in the transcript)."""
    position = len(task.transcript)
    task.transcript.append({"type": "action", "step": position, "action": action, "cursor": cursor})
    task.steps += 1
    return position


def tool_result_record(
    task: Task, step: int, *, ok: bool, result=None, error: str = "", reason: str = ""
) -> None:
    entry = {"type": "tool_result", "step": step, "ok": ok}
    if ok:
        entry["result"] = result
    else:
        entry["error"] = error
        if reason:
            entry["reason"] = reason
    task.transcript.append(entry)


def pending_call(task: Task) -> dict | None:
    """The last action, when it is a tool call still waiting for its result."""
    actions = [e for e in task.transcript if e["type"] == "action"]
    if not actions or actions[-1]["action"]["kind"] != "call":
        return None
    step = actions[-1]["step"]
    if any(e["type"] == "tool_result" and e["step"] == step for e in task.transcript):
        return None
    return actions[-1]


def turn_view(task: Task, *, connected_apps: frozenset[str]) -> TurnView:
    """What the model sees of the turn."""
    first = task.transcript[0]
    return TurnView(
        text=first.get("text", ""),
        message_id=first.get("messageId", ""),
        data=first.get("data", []),
        skill_id=task.skill_id,
        transcript=task.transcript,
        connected_apps=connected_apps,
        files=input_files(task),
        agent=task.agent,
        task_id=task.public_id,
        plan=list(task.plan or []),
    )
