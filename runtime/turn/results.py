"""A tool's result as the model is sent it: whole up to the agent's limit
(``loop.limits.tool_result_bytes``, 64 KiB by default), else its beginning, with a note that
it was cut; the whole result is kept with the task as a file (TaskFile, role ``tool_result``),
which operators can read and the caller never gets (it is not one of its artifacts)."""

import json

from runtime.agents.limits import turn_limits
from runtime.kernel.files import digest
from runtime.kernel.task_models import Task, TaskFile


def result_bytes(result) -> bytes:
    """The result's JSON as stored and measured: UTF-8, sorted keys, no spaces."""
    return json.dumps(result, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def result_capped(*, task: Task, effect, result) -> tuple[object, dict]:
    """(what the model is sent, what the effect's outcome records). A result over the limit
    is kept whole as a task file (one INSERT, in the step's transaction), and both the model
    and the journal get its first bytes and the file's id."""
    limit = turn_limits(task.agent)["tool_result_bytes"]
    whole = result_bytes(result)
    if len(whole) <= limit:
        return result, {"result": result}
    size, sha256 = digest([whole])
    stored = TaskFile.objects.create(
        tenant_id=task.tenant_id,
        task=task,
        role=TaskFile.Role.TOOL_RESULT,
        filename=f"{effect.server}-{effect.tool}-{effect.public_id}.json"[:255],
        media_type="application/json",
        size=size,
        sha256=sha256,
        content=whole,
    )
    shown = {
        "cut": True,
        "note": (
            f"The result is {size} bytes, over this agent's limit of {limit} "
            "(loop.limits.tool_result_bytes): only its first bytes are shown, as text in "
            f"partial. The whole result is kept with the task as file {stored.public_id}."
        ),
        "bytes": size,
        "fileId": stored.public_id,
        # Cut on a character, not inside one.
        "partial": whole[:limit].decode("utf-8", errors="ignore"),
    }
    return shown, {"result": shown, "resultFile": stored.public_id, "resultBytes": size}
