"""Artifacts a turn makes (files/v1): their parts, hosted bytes, versions and files entry."""

from runtime.kernel import extensions as ext
from runtime.kernel import files
from runtime.kernel.shapes import artifact_payload
from runtime.kernel.task_models import Task, TaskEvent, TaskFile
from runtime.kernel.task_state import event_emit
from runtime.llm.actions import EmitArtifact


def artifact_version_next(task: Task, artifact_id: str) -> int:
    """files/v1: a new version of the same artifact, in this turn or an earlier turn of the
    context, has the next version number."""
    earlier = Task.objects.filter(context_id=task.context_id, turn__lt=task.turn).values_list(
        "artifact_ext", flat=True
    )
    versions = [
        (found.get(artifact_id) or {}).get(ext.FILES, {}).get("version", 0)
        for found in [*earlier, task.artifact_ext]
    ]
    return max(versions, default=0) + 1


def artifact_add(task: Task, action: EmitArtifact) -> None:
    """Add (or replace) the artifact on the task and emit its event; the caller saves the task.
    Raises ValueError for a part that cannot be served (bad base64)."""
    version = artifact_version_next(task, action.artifact_id)
    parts, blobs, hosted = [], [], True
    for part in action.parts:
        content = files.part_bytes(part)  # raises ValueError on bad base64
        if content is None:
            hosted = False
            parts.append(dict(part))
            continue
        blobs.append(content)
        if "raw" not in part:
            parts.append(dict(part))
            continue
        # "url file parts out" (profile v2): the bytes stay here, and the caller gets a
        # signed, expiring link to them (a2a_endpoint.files) in place of the raw part.
        size, sha256 = files.digest([content])
        stored = TaskFile.objects.create(
            tenant_id=task.tenant_id,
            task=task,
            role=TaskFile.Role.ARTIFACT,
            artifact_id=action.artifact_id[:200],
            version=version,
            filename=str(part.get("filename", ""))[:255],
            media_type=str(part.get("mediaType", ""))[:255],
            size=size,
            sha256=sha256,
            content=content,
        )
        parts.append(
            {
                "url": files.FILE_REF_PREFIX + stored.public_id,
                **{k: v for k, v in part.items() if k != "raw"},
            }
        )
    artifact = {"artifactId": action.artifact_id, "name": action.name, "parts": parts}
    if action.description:
        artifact["description"] = action.description
    previous = next(
        (i for i, a in enumerate(task.artifacts) if a["artifactId"] == action.artifact_id), None
    )
    size, sha256 = files.digest(blobs)
    kinds = {k for p in action.parts for k in ("text", "data", "raw", "url") if k in p}
    files_ext = {
        "kind": "file" if kinds & {"raw", "url"} else "data" if "data" in kinds else "text",
        "version": version,
        # A part that points elsewhere is not ours to measure (runtime.kernel.files).
        "size": size if hosted else None,
        "sha256": sha256 if hosted else None,
        "path": f"outputs/{action.name}",
    }
    task.artifact_ext[action.artifact_id] = {ext.FILES: files_ext}
    if previous is None:
        task.artifacts.append(artifact)
    else:
        task.artifacts[previous] = artifact
    event_emit(
        task, TaskEvent.Kind.ARTIFACT, artifact_payload(task, artifact), {ext.FILES: files_ext}
    )
