"""The caller's url parts (files/v1): fetched once by the worker before the model's first
step, stored as the task's input files, and shown to the model (runtime.kernel.files has the rules
for what may be fetched). A part that cannot be fetched fails that part, not the turn: the
model sees it with its ``error`` and decides what to tell the caller."""

import logging

from connections.outbound import OutboundRefused
from runtime.kernel import files
from runtime.kernel.task_models import Task, TaskFile

logger = logging.getLogger(__name__)


def inputs_recorded(task: Task) -> bool:
    return any(e["type"] == "inputs" for e in task.transcript)


def input_files(task: Task) -> list[dict]:
    """The caller's url parts as the worker fetched them, as the model sees them: a part that
    could not be fetched has an ``error`` instead of its content."""
    entry = next((e for e in task.transcript if e["type"] == "inputs"), None)
    return list(entry.get("files", [])) if entry else []


def inputs_wanted(task: Task) -> list[dict]:
    """The url parts still to fetch: none once the inputs entry is in the transcript."""
    wanted = task.transcript[0].get("urls") or []
    if not wanted or inputs_recorded(task):
        return []
    return wanted


def inputs_fetch(wanted: list[dict]) -> list[files.FetchedPart | files.FailedPart]:
    """Fetch every part in order (network I/O: call it outside any lock); a part that cannot
    be fetched comes back as a FailedPart saying why."""
    out: list[files.FetchedPart | files.FailedPart] = []
    for spec in wanted:
        try:
            out.append(files.fetch_part(spec))
        except OutboundRefused as exc:
            out.append(files.FailedPart.of(spec, str(exc)))
        except Exception as exc:
            # Whatever a fetch raises is that part's failure: one bad part must not crash
            # the turn (the lease would run out and the turn be retried into the same error).
            logger.exception("url part %s could not be fetched", spec.get("index"))
            out.append(files.FailedPart.of(spec, f"the fetch failed ({type(exc).__name__})"))
    return out


def inputs_store(task: Task, fetched: list[files.FetchedPart | files.FailedPart]) -> None:
    """Keep the fetched parts as the task's input files and record every part, fetched or
    failed, in the transcript."""
    entries = []
    for part in fetched:
        if isinstance(part, files.FailedPart):
            entry = {"index": part.index, "url": part.url, "filename": part.filename}
            entry.update({"mediaType": part.media_type, "error": part.error})
            entries.append(entry)
            continue
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
