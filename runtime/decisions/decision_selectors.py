"""Reads of interactions, held calls, effects and standing rules that the endpoint, the pages
and the REST API share; every one takes the tenant (or an object of it)."""

import contextlib
from collections.abc import Iterator
from datetime import datetime

from django.db.models import F, Q
from django.utils import timezone

from runtime.decisions.answers import text_problem
from runtime.decisions.decision_models import Effect, Interaction, StandingRule
from runtime.kernel.errors import TaskNotFound
from runtime.kernel.store import decision_interaction_read, decision_task_lock
from runtime.kernel.task_models import (
    AuditEvent,
    Task,
)


def interactions_for_tenant(
    *, tenant, state: str | None = None, kind: str | None = None, agent_slug: str | None = None
):
    """The tenant's interactions (a queryset, for the REST API's keyset pagination), each
    with its task's id and context id and its agent's slug as columns (``task_public_id``,
    ``task_context_id``, ``agent_slug``): a Task and an Agent instance for each row of a
    page cost more than its query."""
    rows = Interaction.objects.filter(tenant=tenant)
    if state:
        rows = rows.filter(state=state)
    if kind:
        rows = rows.filter(kind=kind)
    if agent_slug:
        rows = rows.filter(task__agent__slug=agent_slug)
    return rows.only(*_INTERACTION_LIST_FIELDS).annotate(
        task_public_id=F("task__public_id"),
        task_context_id=F("task__wire_context_id"),
        agent_slug=F("task__agent__slug"),
    )


def interactions_keyset_page(
    rows, *, after: tuple[datetime, int] | None, before: tuple[datetime, int] | None, size: int
) -> tuple[list[Interaction], bool]:
    """A keyset page of ``rows``, newest first: (the page, whether more lie that way).

    ``after`` (time, id) pages towards older rows, ``before`` back towards newer ones.
    The redundant bound on the time keeps it an index condition; the OR only filters ties.
    """
    if before is not None:
        ts, pk = before
        rows = rows.filter(created_at__gte=ts).filter(
            Q(created_at__gt=ts) | Q(created_at=ts, pk__gt=pk)
        )
        page = list(rows.order_by("created_at", "pk")[: size + 1])
        return list(reversed(page[:size])), len(page) > size
    if after is not None:
        ts, pk = after
        rows = rows.filter(created_at__lte=ts).filter(
            Q(created_at__lt=ts) | Q(created_at=ts, pk__lt=pk)
        )
    page = list(rows.order_by("-created_at", "-pk")[: size + 1])
    return page[:size], len(page) > size


def interaction_for_tenant(*, tenant, public_id: str) -> Interaction | None:
    return (
        Interaction.objects.filter(tenant=tenant, public_id=public_id)
        .select_related("task", "task__agent")
        .first()
    )


def held_call_for(*, interaction: Interaction) -> Effect | None:
    """The tool call an approval holds (interactions/v1: its id is the effect's id)."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    return Effect.objects.filter(
        tenant_id=interaction.tenant_id,
        task_id=interaction.task_id,
        public_id=interaction.public_id,
    ).first()


def held_call_of(interaction: Interaction) -> Effect | None:
    """``held_call_for``, read once per interaction object: a decision's step-up check, edit
    and receipt share the row, and so does the answer that shows the decided interaction
    (the row as the decision left it, an edit's arguments included)."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    if _HELD_CALL not in interaction.__dict__:
        effect = held_call_for(interaction=interaction)
        if effect is not None and Interaction.task.is_cached(interaction):
            effect.task = interaction.task  # the decision's (locked) task: no second read
        interaction.__dict__[_HELD_CALL] = effect
    return interaction.__dict__[_HELD_CALL]


def held_call_known(interaction: Interaction, effect: Effect | None) -> None:
    """Give ``held_call_of`` the held call read along with the interaction (one statement)."""
    interaction.__dict__[_HELD_CALL] = effect


_HELD_CALL = "_held_call"


def approval_of_effect(*, effect: Effect) -> Interaction | None:
    """The approval that held ``effect``, if a person was asked (its id is the effect's)."""
    return Interaction.objects.filter(
        tenant_id=effect.tenant_id, task_id=effect.task_id, public_id=effect.public_id
    ).first()


def effect_for_tenant(*, tenant, public_id: str) -> Effect | None:
    return (
        Effect.objects.filter(tenant=tenant, public_id=public_id)
        .select_related("task", "task__agent")
        .first()
    )


def effect_resolutions(*, effect: Effect) -> list[AuditEvent]:
    """Who resolved an uncertain effect, and how (the audit keeps it; the effect row does not)."""
    return list(
        AuditEvent.objects.filter(
            tenant_id=effect.tenant_id,
            task_id=effect.task_id,
            action__startswith="effect_",
            detail__effectId=effect.public_id,
        ).order_by("-created_at", "-pk")
    )


def task_effects(*, task: Task) -> list[Effect]:
    return list(Effect.objects.filter(tenant_id=task.tenant_id, task=task).order_by("step"))


def task_interactions(*, task: Task) -> list[Interaction]:
    return list(
        Interaction.objects.filter(tenant_id=task.tenant_id, task=task).order_by("created_at")
    )


def interactions_for_bulk(*, tenant, public_ids: list[str]) -> dict[str, Interaction]:
    """The tenant's interactions by public id, with their task and agent: one query, whatever
    the number (bulk triage lists each; the decision flow decides each on its own)."""
    rows = Interaction.objects.filter(tenant=tenant, public_id__in=public_ids).select_related(
        "task", "task__agent"
    )
    return {row.public_id: row for row in rows}


def held_call_hashes(*, tenant, public_ids: list[str]) -> dict[str, str]:
    """The arguments hash of the held call of each approval (by its public id, the effect's
    own): one query, whatever the number."""
    rows = Effect.objects.filter(tenant=tenant, public_id__in=public_ids).values_list(
        "public_id", "arguments_hash"
    )
    return dict(rows)


def rules_for_tenant(*, tenant, active_only: bool = False, limit: int = 500):
    """The tenant's standing rules, newest first (active ones only when asked)."""
    rows = StandingRule.objects.filter(tenant=tenant).select_related("agent", "created_from")
    if active_only:
        now = timezone.now()
        rows = rows.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )
    return list(rows.order_by("-created_at", "-pk")[:limit])


def rule_for_tenant(*, tenant, public_id: str):
    return (
        StandingRule.objects.filter(tenant=tenant, public_id=public_id)
        .select_related("agent")
        .first()
    )


# The columns a list of interactions shows; a task's JSON (transcript, history) is never read.
_INTERACTION_LIST_FIELDS = (
    "public_id",
    "tenant",
    "kind",
    "prompt",
    "detail",
    "request",
    "subject",
    "deciders",
    "approvers",
    "approvals_required",
    "approvals",
    "widened_to",
    "state",
    "answer",
    "answered_by",
    "answered_via",
    "answered_at",
    "expires_at",
    "created_at",
    "group_id",
    "group_position",
)


@contextlib.contextmanager
def interaction_locked(*, tenant, interaction_id: str) -> Iterator[tuple[Task, Interaction]]:
    """The task of the tenant's interaction, locked, and the interaction read under that lock
    (with its held call, and the task's agent loaded): a decision's reads, in the caller's
    transaction; TaskNotFound for another tenant's id as for a missing one."""
    # An id PostgreSQL cannot compare (a NUL, a lone surrogate: a DataError, an encoding
    # error) names nothing, whichever channel passed it on.
    if not isinstance(interaction_id, str) or text_problem(interaction_id):
        raise TaskNotFound("No such interaction.")
    # Lock the task first (the same order as in-band answers), found through the interaction
    # (only the task's row is locked), then read the interaction under that lock and claim it.
    task = decision_task_lock(tenant=tenant, interaction_id=interaction_id)
    read = decision_interaction_read(task=task, interaction_id=interaction_id) if task else None
    if task is None or read is None:
        raise TaskNotFound("No such interaction.", interactionId=interaction_id)
    interaction, effect = read
    held_call_known(interaction, effect)
    yield task, interaction
