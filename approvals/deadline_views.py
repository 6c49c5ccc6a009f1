"""The item page's Extend button: an operator who may decide an open item gives it more
time (30 minutes, 1 hour, 4 hours, within INTERACTION_EXTEND_MAX_SECONDS over its life),
through the same service as ``POST /api/v1/interactions/<id>/extend``: audited, the channels
and the caller told."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from approvals import decision_views
from approvals.access import interaction_for_member
from approvals.extend_form import ExtendForm
from runtime.decisions.deadline_moves import interaction_extend
from runtime.decisions.facts import decision_facts
from runtime.decisions.flow import PAGE
from runtime.kernel.errors import AlreadyDecided, DeciderRefused, InvalidParams, TaskNotFound
from tenants.access import member_required, require_decider


@require_POST
@member_required
def interaction_extend_page(request, public_id: str):
    interaction = interaction_for_member(request, public_id)
    require_decider(request.membership)
    decider = decision_views.decider_of(request)
    form = ExtendForm(request.POST, interaction=interaction)

    def page(status: int):
        facts = decision_facts(interaction=interaction, decider=decider)
        return decision_views.decision_page(request, facts, extend_form=form, status=status)

    if not form.is_valid():
        return page(400)
    try:
        extended = interaction_extend(
            tenant=request.membership.tenant,
            interaction_id=interaction.public_id,
            by=form.cleaned_data["by"],
            decider=decider,
            channel=PAGE,
        )
    except AlreadyDecided as exc:
        won = decision_facts(interaction=exc.interaction, decider=decider)
        return decision_views.decision_page(request, won, already=exc.interaction, status=409)
    except DeciderRefused as exc:
        messages.error(request, f"Not extended: {exc.message}")
        return page(403)
    except InvalidParams as exc:
        form.add_error("by", exc.description)
        return page(400)
    except TaskNotFound as exc:
        raise Http404("No such interaction.") from exc
    label = dict(form.choices).get(form.cleaned_data["by"], form.cleaned_data["by"])
    messages.success(
        request,
        f"Extended by {label}: it now expires at "
        f"{extended.expires_at:%Y-%m-%d %H:%M} UTC. The caller was told.",
    )
    return redirect("approvals:interaction", public_id=interaction.public_id)
