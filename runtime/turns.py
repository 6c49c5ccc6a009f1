"""The turn loop: runs one turn of an agent in a Celery worker, step by step, durably.

Every step is committed before the next begins, so a turn survives its worker: the task row
holds the transcript (what the model saw and did), a lease names the worker running it, and
a periodic sweep gives a turn whose lease ran out to another worker, which continues where
the transcript ends. The model is asked again from the same transcript and gives the same
next step (runtime.llm). Tool calls are journalled as effects before they are sent.
"""

import hashlib
import json
import logging
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from config.logging import log_context
from connections.outbound import OutboundRefused
from runtime import extensions as ext
from runtime import files
from runtime.llm import (
    AdvancePlan,
    Ask,
    CallTool,
    EmitArtifact,
    Fail,
    Reply,
    SetPlan,
    TurnView,
    Wait,
    model_for,
)
from runtime.models import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    Effect,
    Interaction,
    Task,
    TaskEvent,
    TaskFile,
    TaskState,
    new_key,
)
from runtime.services import (
    _emit,
    _set_status,
    _start_next_in_context,
    agent_message,
    new_run_id,
    turn_may_start,
)
from runtime.tools import (
    BUILTIN_SERVER,
    REQUEST_CONNECTION,
    REQUEST_CONNECTION_SCHEMA,
    CallContext,
    ToolError,
    policy_for,
    server_for,
    tool_spec,
    validate_arguments,
)

logger = logging.getLogger(__name__)
MAX_STEPS = 200
PLAN_LIMIT = 20

TASK_FIELDS = [
    "state",
    "status_message",
    "status_ext",
    "status_timestamp",
    "history",
    "artifacts",
    "artifact_ext",
    "transcript",
    "event_seq",
    "lease_owner",
    "lease_expires_at",
    "plan",
    "steps",
    "reply_message",
]


def lease_seconds() -> int:
    return getattr(settings, "TURN_LEASE_SECONDS", 60)


def arguments_hash(arguments: dict) -> str:
    return hashlib.sha256(
        json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def with_plan(task: Task, status_ext: dict) -> dict:
    """Every status update of a turn with a plan carries it (progress/v1)."""
    if not task.plan:
        return status_ext
    return {**status_ext, ext.PROGRESS: {"steps": task.plan}}


class LeaseLost(Exception):
    """Another worker took the turn over, or it was canceled: stop quietly."""


def turn_claim(*, task_pk: int, worker_id: str) -> Task | None:
    """Take the turn's lease if it is free (or expired); start a new run phase."""
    task = Task.objects.select_related("context").filter(pk=task_pk).first()
    if (
        task is None
        or task.state not in (TaskState.SUBMITTED, TaskState.WORKING)
        or not turn_may_start(task)
    ):
        return None
    now = timezone.now()
    run_id = new_run_id()
    claimed = (
        Task.objects.filter(pk=task_pk, state__in=[TaskState.SUBMITTED, TaskState.WORKING])
        .filter(
            Q(lease_expires_at__isnull=True)
            | Q(lease_expires_at__lt=now)
            | Q(lease_owner=worker_id)
        )
        .update(
            lease_owner=worker_id,
            lease_expires_at=now + timedelta(seconds=lease_seconds()),
            attempts=F("attempts") + 1,
            run_id=run_id,
        )
    )
    if claimed != 1:
        return None
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task_pk)
        previous = task.runs[-1]["runId"] if task.runs else None
        answered = [e for e in task.transcript if e["type"] == "answer"]
        task.runs.append(
            {
                "runId": run_id,
                "resumedFrom": previous,
                "interactionId": answered[-1]["interactionId"] if answered and previous else None,
                "startedAt": now.isoformat(),
                "worker": worker_id,
            }
        )
        fields = ["runs"]
        if task.state == TaskState.SUBMITTED:
            _set_status(task, TaskState.WORKING)
            fields += [
                "state",
                "status_message",
                "status_ext",
                "status_timestamp",
                "history",
                "event_seq",
            ]
        task.save(update_fields=fields)
    return task


class TurnRunner:
    def __init__(self, task: Task, worker_id: str):
        self.task_pk = task.pk
        self.worker_id = worker_id
        self.agent = task.agent
        self.model = model_for(self.agent)

    # --- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        for _ in range(MAX_STEPS):
            task = Task.objects.select_related("tenant", "agent").get(pk=self.task_pk)
            if task.lease_owner != self.worker_id or task.state != TaskState.WORKING:
                return
            with log_context(
                task_id=task.public_id,
                tenant=task.tenant.slug,
                subject=task.subject,
                trace_id=task.trace_id,
            ):
                if not self.step(task):
                    return
        with transaction.atomic():
            task = self.locked()
            self.finish(task, TaskState.FAILED, "The turn took too many steps and was stopped.")

    def locked(self) -> Task:
        # of=("self",): lock the task row only. Locking the joined tenant row too serialised
        # every turn of a tenant and deadlocked with the foreign-key checks of new tasks
        # (bench/waiters.py, 1000 callers on PostgreSQL).
        task = (
            Task.objects.select_for_update(of=("self",))
            .select_related("tenant", "agent")
            .get(pk=self.task_pk)
        )
        if task.lease_owner != self.worker_id or task.state != TaskState.WORKING:
            raise LeaseLost()
        task.lease_expires_at = timezone.now() + timedelta(seconds=lease_seconds())
        return task

    def save(self, task: Task) -> None:
        task.save(update_fields=TASK_FIELDS)

    def step(self, task: Task) -> bool:
        """Do one step; return False when the turn paused, finished or was taken away."""
        try:
            if not self.fetch_inputs(task):
                return False
            pending = self.pending_call(task)
            if pending is not None:
                return self.continue_call(task, pending)
            view = TurnView(
                text=task.transcript[0].get("text", ""),
                message_id=task.transcript[0].get("messageId", ""),
                data=task.transcript[0].get("data", []),
                skill_id=task.skill_id,
                transcript=task.transcript,
                connected_apps=self.connected_apps(task),
                files=self.input_files(task),
            )
            # Asking the model is outside any lock: a hosted model's call is network I/O.
            action = self.model.next_action(view)
            return self.apply(task, action)
        except LeaseLost:
            logger.info("turn stopped: lease lost or task no longer working")
            return False

    # --- the caller's url parts (files/v1) ------------------------------------------------

    @staticmethod
    def input_files(task: Task) -> list[dict]:
        entry = next((e for e in task.transcript if e["type"] == "inputs"), None)
        return list(entry.get("files", [])) if entry else []

    def fetch_inputs(self, task: Task) -> bool:
        """Fetch the caller's url parts once, before the model's first step; a part that cannot
        be fetched fails the turn, saying which part and why. Returns False when it failed."""
        wanted = task.transcript[0].get("urls") or []
        if not wanted or any(e["type"] == "inputs" for e in task.transcript):
            return True
        fetched: list[files.FetchedPart] = []
        failure = ""
        # Network I/O, so outside any lock; the lease stays ours for the fetch's timeout.
        for spec in wanted:
            try:
                fetched.append(files.fetch_part(spec))
            except OutboundRefused as exc:
                failure = (
                    f"The file part {spec['index']} ({spec['url']}) could not be fetched: {exc}"
                )
                break
        with transaction.atomic():
            task = self.locked()
            if any(e["type"] == "inputs" for e in task.transcript):
                return True
            if failure:
                task.transcript.append({"type": "inputs", "error": failure})
                self.finish(task, TaskState.FAILED, failure)
                logger.info("turn failed: %s", failure)
                return False
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
            self.save(task)
        return True

    @staticmethod
    def connected_apps(task: Task) -> frozenset[str]:
        from connections.selectors import connected_app_slugs

        return frozenset(connected_app_slugs(tenant=task.tenant))

    def record(self, task: Task, action: dict, cursor: int | None = None) -> int:
        position = len(task.transcript)
        task.transcript.append(
            {"type": "action", "step": position, "action": action, "cursor": cursor}
        )
        task.steps += 1
        return position

    def apply(self, task: Task, action) -> bool:
        expected = len(task.transcript)
        if isinstance(action, Wait):
            self.wait(action.seconds)
        with transaction.atomic():
            task = self.locked()
            if len(task.transcript) != expected:
                return True  # something else advanced the turn; look again
            if isinstance(action, Reply):
                self.record(
                    task,
                    {"kind": "reply", "text": action.text, "direct": action.direct},
                    action.cursor,
                )
                message = agent_message(task, action.text, with_task=not action.direct)
                if action.direct:
                    task.reply_message = message
                self.finish(task, TaskState.COMPLETED, message=message)
                return False
            if isinstance(action, Fail):
                self.record(
                    task,
                    {"kind": "reject" if action.reject else "fail", "text": action.text},
                    action.cursor,
                )
                self.finish(
                    task, TaskState.REJECTED if action.reject else TaskState.FAILED, action.text
                )
                return False
            if isinstance(action, Ask):
                position = self.record(
                    task,
                    {"kind": "ask", "questionId": action.question_id, "prompt": action.prompt},
                    action.cursor,
                )
                detail = {}
                if action.choices:
                    detail = {"choices": list(action.choices), "allowCustom": action.allow_custom}
                self.open_interaction(
                    task,
                    kind=Interaction.Kind.QUESTION,
                    public_id=new_key("q_", 12),
                    prompt=action.prompt,
                    detail=detail,
                    request={"questionId": action.question_id, "step": position, **detail},
                    state=TaskState.INPUT_REQUIRED,
                )
                return False
            if isinstance(action, EmitArtifact):
                self.record(
                    task, {"kind": "artifact", "artifactId": action.artifact_id}, action.cursor
                )
                try:
                    self.add_artifact(task, action)
                except ValueError as exc:
                    self.finish(
                        task, TaskState.FAILED, f"The agent made an artifact it cannot serve: {exc}"
                    )
                    return False
                self.save(task)
                return True
            if isinstance(action, SetPlan):
                self.record(task, {"kind": "plan"}, action.cursor)
                task.plan = [
                    {
                        "label": str(s.get("label", ""))[:200],
                        "state": s.get("state", "pending"),
                        "note": s.get("note", ""),
                    }
                    for s in list(action.steps)[:PLAN_LIMIT]
                ]
                _set_status(
                    task, TaskState.WORKING, status_ext={ext.PROGRESS: {"steps": task.plan}}
                )
                self.save(task)
                return True
            if isinstance(action, AdvancePlan):
                self.record(
                    task,
                    {"kind": "progress", "step": action.step, "state": action.state},
                    action.cursor,
                )
                if 0 <= action.step < len(task.plan):
                    task.plan[action.step] = {
                        **task.plan[action.step],
                        "state": action.state,
                        "note": action.note[:500],
                    }
                    _set_status(
                        task, TaskState.WORKING, status_ext={ext.PROGRESS: {"steps": task.plan}}
                    )
                self.save(task)
                return True
            if isinstance(action, Wait):
                self.record(task, {"kind": "wait", "seconds": action.seconds}, action.cursor)
                self.save(task)
                return True
            if isinstance(action, CallTool):
                return self.start_call(task, action)
        raise TypeError(f"unknown action {action!r}")

    def wait(self, seconds: float) -> None:
        """Sleep for a scripted pause, keeping the lease alive."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(remaining, max(1.0, lease_seconds() / 3)))
            renewed = Task.objects.filter(
                pk=self.task_pk, lease_owner=self.worker_id, state=TaskState.WORKING
            ).update(lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds()))
            if renewed != 1:
                raise LeaseLost()

    @contextmanager
    def lease_kept(self):
        """Renew the lease from a second thread while a tool call is out.

        A call may take longer than the lease; without this the sweep would hand the turn to
        another worker, which would find the call sent but not closed and call it uncertain
        while it is still running here.
        """
        stop = threading.Event()

        def beat():
            try:
                while not stop.wait(max(0.5, lease_seconds() / 3)):
                    Task.objects.filter(pk=self.task_pk, lease_owner=self.worker_id).update(
                        lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds())
                    )
            finally:
                connection.close()  # this thread's own connection

        heart = threading.Thread(target=beat, name=f"lease-{self.task_pk}", daemon=True)
        heart.start()
        try:
            yield
        finally:
            stop.set()
            heart.join()

    # --- outcomes -------------------------------------------------------------------------

    def finish(self, task: Task, state: str, text: str = "", message: dict | None = None) -> None:
        message = message or agent_message(task, text)
        status_ext = {
            ext.TELEMETRY: {
                "steps": task.steps,
                "tokens": task.tokens,
                "costUsd": float(task.cost_usd),
                "traceId": task.trace_id,
            }
        }
        task.lease_owner = ""
        task.lease_expires_at = None
        _set_status(task, state, message, status_ext=with_plan(task, status_ext))
        self.save(task)
        _start_next_in_context(task)
        logger.info("turn finished: %s", state)

    def open_interaction(
        self, task: Task, *, kind, public_id, prompt, detail, request, state, deciders="either"
    ) -> Interaction:
        interaction = Interaction.objects.create(
            public_id=public_id,
            tenant_id=task.tenant_id,
            task=task,
            kind=kind,
            prompt=prompt,
            detail=detail,
            request=request,
            subject=task.subject,
            deciders=deciders,
            expires_at=timezone.now() + timedelta(seconds=task.agent.interaction_ttl_seconds),
        )
        extension = {
            ext.INTERACTIONS: {
                "interactionId": public_id,
                "kind": kind,
                "prompt": prompt,
                "detail": detail,
            }
        }
        task.lease_owner = ""
        task.lease_expires_at = None
        _set_status(task, state, agent_message(task, prompt), status_ext=with_plan(task, extension))
        self.save(task)
        logger.info("turn paused: %s %s", kind, public_id)
        return interaction

    @staticmethod
    def next_version(task: Task, artifact_id: str) -> int:
        """files/v1: a new version of the same artifact, in this turn or an earlier turn of
        the context, has the next version number."""
        earlier = Task.objects.filter(context_id=task.context_id, turn__lt=task.turn).values_list(
            "artifact_ext", flat=True
        )
        versions = [
            (found.get(artifact_id) or {}).get(ext.FILES, {}).get("version", 0)
            for found in [*earlier, task.artifact_ext]
        ]
        return max(versions, default=0) + 1

    def add_artifact(self, task: Task, action: EmitArtifact) -> None:
        version = self.next_version(task, action.artifact_id)
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
            # A part that points elsewhere is not ours to measure (runtime.files).
            "size": size if hosted else None,
            "sha256": sha256 if hosted else None,
            "path": f"outputs/{action.name}",
        }
        task.artifact_ext[action.artifact_id] = {ext.FILES: files_ext}
        if previous is None:
            task.artifacts.append(artifact)
        else:
            task.artifacts[previous] = artifact
        _emit(
            task,
            TaskEvent.Kind.ARTIFACT,
            {
                "artifactUpdate": {
                    "taskId": task.public_id,
                    "contextId": task.wire_context_id,
                    "artifact": artifact,
                }
            },
            {ext.FILES: files_ext},
        )

    # --- tool calls -----------------------------------------------------------------------

    def pending_call(self, task: Task) -> dict | None:
        """The last action, when it is a tool call still waiting for its result."""
        actions = [e for e in task.transcript if e["type"] == "action"]
        if not actions or actions[-1]["action"]["kind"] != "call":
            return None
        step = actions[-1]["step"]
        if any(e["type"] == "tool_result" and e["step"] == step for e in task.transcript):
            return None
        return actions[-1]

    def tool_result(
        self, task: Task, step: int, *, ok: bool, result=None, error: str = "", reason: str = ""
    ) -> None:
        entry = {"type": "tool_result", "step": step, "ok": ok}
        if ok:
            entry["result"] = result
        else:
            entry["error"] = error
            if reason:
                entry["reason"] = reason
        task.transcript.append(entry)

    def start_call(self, task: Task, action: CallTool) -> bool:
        """Record the call; check it; then hold, deny or send it (caller holds the lock)."""
        call = {
            "kind": "call",
            "server": action.server,
            "tool": action.tool,
            "arguments": action.arguments,
        }
        step = self.record(task, call, action.cursor)
        if (
            action.server == BUILTIN_SERVER
            and action.tool == REQUEST_CONNECTION
            and task.agent.connections_enabled
        ):
            error = validate_arguments(REQUEST_CONNECTION_SCHEMA, action.arguments)
            if error:
                self.tool_result(task, step, ok=False, error=error)
                self.save(task)
                return True
            app = str(action.arguments["app"])[:80]
            reason = str(action.arguments.get("reason", ""))[:280]
            prompt = f"Connect {app}: {reason}" if reason else f"Connect {app}"
            self.open_interaction(
                task,
                kind=Interaction.Kind.CONNECTION,
                public_id=new_key("con_", 12),
                prompt=prompt,
                detail={"app": app, "reason": reason},
                request={"step": step},
                state=TaskState.AUTH_REQUIRED,
            )
            return False
        spec = tool_spec(task.agent, action.server, action.tool)
        if spec is None or server_for(action.server) is None:
            self.tool_result(
                task, step, ok=False, error=f"unknown tool {action.server} / {action.tool}"
            )
            self.save(task)
            return True
        # Arguments are checked before the policy: invalid ones never reach a person.
        error = validate_arguments(spec.get("schema"), action.arguments)
        if error:
            self.tool_result(task, step, ok=False, error=error)
            self.save(task)
            return True
        policy = policy_for(task.agent, action.server, action.tool)
        effect = Effect.objects.create(
            public_id=new_key("eff_", 12),
            tenant_id=task.tenant_id,
            task=task,
            step=step,
            server=action.server,
            tool=action.tool,
            arguments=action.arguments,
            arguments_hash=arguments_hash(action.arguments),
            idempotent=bool(spec.get("idempotent", False)),
            state=Effect.State.APPROVED
            if policy.action == "allow"
            else Effect.State.DENIED
            if policy.action == "deny"
            else Effect.State.HELD,
            approved_by="policy" if policy.action == "allow" else "",
        )
        if policy.action == "deny":
            effect.outcome = {"error": "tool.denied", "reason": "denied by the tool policy"}
            effect.closed_at = timezone.now()
            effect.save(update_fields=["outcome", "closed_at"])
            self.tool_result(
                task, step, ok=False, error="tool.denied", reason="denied by the tool policy"
            )
            self.save(task)
            return True
        if policy.action == "approve":
            prompt = f"Approve {action.server} / {action.tool}?"
            self.open_interaction(
                task,
                kind=Interaction.Kind.APPROVAL,
                public_id=effect.public_id,  # interactions/v1: for a held call, the effect id
                prompt=prompt,
                detail={
                    "server": action.server,
                    "tool": action.tool,
                    "reason": spec.get("reason", "The tool policy holds this call for a person."),
                },
                request={"step": step},
                state=TaskState.AUTH_REQUIRED,
                deciders=policy.deciders,
            )
            return False
        self.save(task)
        return True  # allowed: the next step sends it (continue_call)

    def continue_call(self, task: Task, pending: dict) -> bool:
        step = pending["step"]
        call = pending["action"]
        if call["server"] == BUILTIN_SERVER and call["tool"] == REQUEST_CONNECTION:
            return self.continue_connection(task, step)
        effect = Effect.objects.filter(task=task, step=step).first()
        if effect is None:
            with transaction.atomic():
                task = self.locked()
                self.tool_result(
                    task, step, ok=False, error="the call was lost before it was journalled"
                )
                self.save(task)
            return True
        if effect.state == Effect.State.HELD:
            return self.decide_held(task, effect)
        if effect.state == Effect.State.APPROVED:
            return self.send(effect)
        if effect.state == Effect.State.SENDING:
            # We find the call sent but not closed: its worker died mid-call. An idempotent
            # tool is simply sent again; otherwise a person must say what happened.
            if effect.idempotent:
                return self.send(effect, resend=True)
            return self.mark_uncertain(effect)
        if effect.state == Effect.State.UNCERTAIN:
            return False  # waiting for an operator's resolution
        with transaction.atomic():
            task = self.locked()
            if effect.state == Effect.State.SUCCEEDED:
                # The model sees what the tool returned, as after a normal send, not the
                # journal's envelope (an operator's "happened" stores {result, resolvedBy}).
                result = (effect.outcome or {}).get("result")
                self.tool_result(task, step, ok=True, result=result)
            else:
                outcome = effect.outcome or {}
                self.tool_result(
                    task,
                    step,
                    ok=False,
                    error=outcome.get("error", "failed"),
                    reason=outcome.get("reason", ""),
                )
            self.save(task)
        return True

    def decide_held(self, task: Task, effect: Effect) -> bool:
        interaction = Interaction.objects.filter(public_id=effect.public_id).first()
        if interaction is None or interaction.state == Interaction.State.OPEN:
            return False  # still waiting for a person
        with transaction.atomic():
            task = self.locked()
            answer = interaction.answer or {}
            if answer.get("approved") is True:
                Effect.objects.filter(pk=effect.pk, state=Effect.State.HELD).update(
                    state=Effect.State.APPROVED, approved_by=interaction.answered_by
                )
                self.save(task)
                return True
            reason = answer.get("reason") or (
                "expired" if interaction.state == Interaction.State.EXPIRED else "denied"
            )
            Effect.objects.filter(pk=effect.pk, state=Effect.State.HELD).update(
                state=Effect.State.DENIED,
                outcome={"error": "tool.denied", "reason": reason, "by": interaction.answered_by},
                closed_at=timezone.now(),
            )
            self.tool_result(task, effect.step, ok=False, error="tool.denied", reason=reason)
            self.save(task)
        return True

    def send(self, effect: Effect, resend: bool = False) -> bool:
        # The journal says "sending" and is committed before the call leaves, so a crash
        # after this point is seen as an uncertain outcome, never as "not sent".
        with transaction.atomic():
            task = self.locked()
            from_state = Effect.State.SENDING if resend else Effect.State.APPROVED
            moved = Effect.objects.filter(pk=effect.pk, state=from_state).update(
                state=Effect.State.SENDING, sent_at=timezone.now()
            )
            if moved != 1:
                return True
        effect.refresh_from_db()
        if arguments_hash(effect.arguments) != effect.arguments_hash:
            outcome, ok = {"error": "the stored arguments do not match their hash; not sent"}, False
        else:
            server = server_for(effect.server)
            try:
                with self.lease_kept():
                    result = server.call(
                        effect.tool,
                        effect.arguments,
                        CallContext(
                            tenant=task.tenant, effect_id=effect.public_id, subject=task.subject
                        ),
                    )
                outcome, ok = {"result": result}, True
            except ToolError as exc:
                outcome, ok = {"error": str(exc)}, False
        with transaction.atomic():
            Effect.objects.filter(pk=effect.pk, state=Effect.State.SENDING).update(
                state=Effect.State.SUCCEEDED if ok else Effect.State.FAILED,
                outcome=outcome,
                closed_at=timezone.now(),
            )
            task = self.locked()
            if ok:
                self.tool_result(task, effect.step, ok=True, result=outcome["result"])
            else:
                self.tool_result(task, effect.step, ok=False, error=outcome["error"])
            self.save(task)
        return True

    def mark_uncertain(self, effect: Effect) -> bool:
        with transaction.atomic():
            task = self.locked()
            Effect.objects.filter(pk=effect.pk, state=Effect.State.SENDING).update(
                state=Effect.State.UNCERTAIN
            )
            # profile v2: the task stays WORKING, with `uncertain` under effects/v1.
            task.lease_owner = ""
            task.lease_expires_at = None  # the sweep leaves turns with an uncertain effect alone
            _set_status(
                task,
                TaskState.WORKING,
                agent_message(
                    task,
                    f"The outcome of {effect.server} / {effect.tool} was lost; an operator is checking.",
                ),
                status_ext=with_plan(task, {ext.EFFECTS: {"uncertain": effect.public_id}}),
            )
            self.save(task)
        logger.warning("effect %s is uncertain", effect.public_id)
        return False

    def continue_connection(self, task: Task, step: int) -> bool:
        interaction = (
            Interaction.objects.filter(
                task=task, kind=Interaction.Kind.CONNECTION, request__step=step
            )
            .order_by("-created_at")
            .first()
        )
        if interaction is None or interaction.state == Interaction.State.OPEN:
            return False
        with transaction.atomic():
            task = self.locked()
            app = interaction.detail.get("app", "")
            connected = (interaction.answer or {}).get("connected") is True
            self.tool_result(
                task, step, ok=connected, result=f"Connected: {app}", error=f"Not connected: {app}"
            )
            self.save(task)
        return True


def turn_run(*, task_pk: int, worker_id: str) -> None:
    """Claim and run (or resume) a turn until it pauses, finishes or loses its lease."""
    task = turn_claim(task_pk=task_pk, worker_id=worker_id)
    if task is None:
        return
    TurnRunner(task, worker_id).run()


__all__ = ["turn_run", "turn_claim", "TERMINAL_STATES", "INTERRUPTED_STATES"]
