"""Access helpers of the operator pages: other tenants' ids answer 404, like missing ones."""

from django.http import Http404

from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.decision_selectors import effect_for_tenant, interaction_for_tenant
from runtime.kernel.task_models import Task
from runtime.kernel.task_selectors import task_for_tenant


def interaction_for_member(request, public_id: str) -> Interaction:
    interaction = interaction_for_tenant(tenant=request.membership.tenant, public_id=public_id)
    if interaction is None:
        raise Http404("No such interaction.")
    return interaction


def effect_for_member(request, public_id: str) -> Effect:
    effect = effect_for_tenant(tenant=request.membership.tenant, public_id=public_id)
    if effect is None:
        raise Http404("No such effect.")
    return effect


def task_for_member(request, public_id: str) -> Task:
    task = task_for_tenant(tenant=request.membership.tenant, public_id=public_id)
    if task is None:
        raise Http404("No such task.")
    return task
