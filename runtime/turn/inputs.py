"""The caller's url parts (files/v1): fetched once by the worker before the model's first
step, stored as the task's input files, and shown to the model (runtime.files has the rules
for what may be fetched)."""

from connections.outbound import OutboundRefused
from runtime import files
from runtime.models import Task, TaskFile


def inputs_recorded(task: Task) -> bool:
    return any(e["type"] == "inputs" for e in task.transcript)


def input_files(task: Task) -> list[dict]:
    """The caller's url parts as the worker fetched them, as the model sees them."""
    entry = next((e for e in task.transcript if e["type"] == "inputs"), None)
    return list(entry.get("files", [])) if entry else []


def inputs_wanted(task: Task) -> list[dict]:
    """The url parts still to fetch: none once the inputs entry is in the transcript."""
    wanted = task.transcript[0].get("urls") or []
    if not wanted or inputs_recorded(task):
        return []
    return wanted


def inputs_fetch(wanted: list[dict]) -> tuple[list[files.FetchedPart], str]:
    """Fetch the parts in order (network I/O: call it outside any lock); stop at the first
    that cannot be fetched and say which part and why."""
    fetched: list[files.FetchedPart] = []
    for spec in wanted:
        try:
            fetched.append(files.fetch_part(spec))
        except OutboundRefused as exc:
            return fetched, (
                f"The file part {spec['index']} ({spec['url']}) could not be fetched: {exc}"
            )
    return fetched, ""


def inputs_store(task: Task, fetched: list[files.FetchedPart]) -> None:
    """Keep the fetched parts as the task's input files and record them in the transcript."""
    entries = []
    for part in fetched:
        size, sha256 = files.digest([part.content])
        stored = TaskFile.objects.create(
            tenant_id=task.tenant_id,
            task=task,
            role=TaskFile.Role.INPUT,
            filename=part.filename[:255],
            media_type=part.media_type[:255],
            size=size,
            sha256=sha256,
            content=part.content,
        )
        entry = {
            "index": part.index,
            "fileId": stored.public_id,
            "url": part.url,
            "filename": part.filename,
            "mediaType": part.media_type,
            "size": size,
            "sha256": sha256,
        }
        if files.is_text(part.media_type):
            text = part.content.decode("utf-8", errors="replace")
            entry["text"] = text[: files.INLINE_TEXT_CHARS]
            entry["truncated"] = len(text) > files.INLINE_TEXT_CHARS
        entries.append(entry)
    task.transcript.append({"type": "inputs", "files": entries})
