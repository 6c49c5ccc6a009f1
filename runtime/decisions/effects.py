"""Uncertain effects (effects/v1): an operator says what became of a call whose outcome was lost."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from runtime.decisions.decision_models import Effect
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import InvalidParams, NotAllowed, TaskNotFound
from runtime.kernel.shapes import agent_message
from runtime.kernel.task_models import Task, TaskState
from runtime.kernel.task_state import task_end, task_status_set, turn_enqueue

EFFECT_RESOLUTIONS = ("happened", "not_happened", "fail")


def effect_resolve(
    *, tenant, effect_id: str, resolution: str, by: str, result: Any = None, via: str = "page"
) -> Effect:
    """An operator says what became of a call whose outcome was lost.

    ``happened``: it ran, and ``result`` is what it returned; ``not_happened``: send it again;
    ``fail``: fail the task. Exactly one resolution wins; the turn resumes once.
    """
    if resolution not in EFFECT_RESOLUTIONS:
        raise InvalidParams("resolution", f"must be one of {list(EFFECT_RESOLUTIONS)}")
    with transaction.atomic(durable=True):
        effect = Effect.objects.filter(tenant=tenant, public_id=effect_id).first()
        if effect is None:
            raise TaskNotFound("No such effect.", effectId=effect_id)
        task = Task.objects.select_for_update().get(pk=effect.task_id)
        effect.refresh_from_db()
        if effect.state != Effect.State.UNCERTAIN:
            raise NotAllowed(
                f"This effect is {effect.get_state_display()}; only an uncertain effect can be resolved."
            )
        now = timezone.now()
        if resolution == "happened":
            Effect.objects.filter(pk=effect.pk).update(
                state=Effect.State.SUCCEEDED,
                outcome={"result": result, "resolvedBy": by},
                closed_at=now,
            )
        elif resolution == "not_happened":
            Effect.objects.filter(pk=effect.pk).update(state=Effect.State.APPROVED, sent_at=None)
        else:
            Effect.objects.filter(pk=effect.pk).update(
                state=Effect.State.FAILED,
                outcome={"error": "failed by an operator", "resolvedBy": by},
                closed_at=now,
            )
        effect.refresh_from_db()
        audit_record(
            tenant_id=effect.tenant_id,
            actor=by,
            action=f"effect_{resolution}",
            via=via,
            task=task,
            detail={
                "effectId": effect.public_id,
                "server": effect.server,
                "tool": effect.tool,
                "result": result,
            },
        )
        if resolution == "fail":
            task_end(
                task,
                TaskState.FAILED,
                agent_message(
                    task, f"{effect.server} / {effect.tool} failed: an operator failed the task."
                ),
            )
        else:
            # Back to plain WORKING (no `uncertain` any more); the turn continues.
            task_status_set(task, TaskState.WORKING)
            turn_enqueue(task)
    return effect
