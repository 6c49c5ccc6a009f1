"""The decision pages: an interaction's (approve, deny, edit then approve, allow similar calls,
answer, decline) and an uncertain effect's resolution.

A decision is parsed (approvals/decision_form.py), taken by the one decision flow
(runtime.decisions.flow.decision_take) and rendered; what the page shows is gathered by
runtime.decisions.facts.decision_facts, as for every surface.
"""

import functools

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from approvals.access import effect_for_member, interaction_for_member
from approvals.decision_form import DecisionPost, decided_text, edit_form, rule_form
from approvals.elicitation_form import ElicitationForm, elicitation_of
from approvals.extend_form import ExtendForm
from approvals.forms import AnswerForm, ApprovalForm, EffectResolveForm
from approvals.group_views import (
    GROUP_CHOICES,
    group_context,
    group_decided_text,
    group_decision_post,
)
from approvals.inbox_views import carried_query, inbox_next, inbox_url
from approvals.presenting import pretty, visible_messages
from approvals.stepup import step_up_redirect, stepped_up
from notifications.selectors import deliveries_for_interaction, ladder_steps_for
from runtime.decisions.approvers import Decider
from runtime.decisions.call_summaries import call_summary_of
from runtime.decisions.decision_models import Effect
from runtime.decisions.decision_selectors import approval_of_effect, effect_resolutions
from runtime.decisions.effects import effect_resolve
from runtime.decisions.facts import DecisionFacts, decision_facts
from runtime.decisions.flow import PAGE, decision_take
from runtime.decisions.summaries import effect_call_view, held_call_summary, held_call_view
from runtime.kernel.errors import (
    AlreadyDecided,
    ChannelRefused,
    DeciderRefused,
    InvalidParams,
    NotAllowed,
    RuleRefused,
    StepUpRequired,
    TaskNotFound,
)
from tenants.access import member_required, require_decider


def decider_of(request) -> Decider:
    """The signed-in member deciding on a page, and whether they stepped up just now."""
    return Decider.of_member(request.membership, request.user, stepped_up=stepped_up(request))


@require_http_methods(["GET", "POST"])
@member_required
def interaction_detail(request, public_id: str):
    interaction = interaction_for_member(request, public_id)
    decider = decider_of(request)
    # What the page shows, read when it is shown (or a form needs it): a decision itself
    # reads the policy once, in the flow, under the task's lock.
    facts = functools.cache(lambda: decision_facts(interaction=interaction, decider=decider))
    if request.method == "GET":
        return decision_page(request, facts())
    require_decider(request.membership)
    if request.POST.get("decision") in GROUP_CHOICES:
        return _group_decided(request, facts(), decider)
    posted = DecisionPost(
        request.POST,
        interaction=interaction,
        facts=facts,
        is_admin=request.membership.role == "admin",
    )
    if posted.decision is None:
        if posted.problem:
            messages.error(request, posted.problem)
        return decision_page(request, facts(), posted=posted, status=400)
    try:
        decided = decision_take(
            tenant=request.membership.tenant,
            interaction_id=interaction.public_id,
            decider=decider,
            decision=posted.decision,
            channel=PAGE,
        )
    except StepUpRequired:
        # risk: high: re-authenticate first; allauth replays this very decision afterwards.
        messages.info(
            request,
            "This tool is marked risk: high: confirm it is you, and your decision is then taken.",
        )
        return step_up_redirect(request)
    except AlreadyDecided as exc:
        won = decision_facts(interaction=exc.interaction, decider=decider)
        return decision_page(request, won, already=exc.interaction, status=409)
    except (DeciderRefused, ChannelRefused, NotAllowed) as exc:
        messages.error(request, exc.message)
        return decision_page(request, facts(), status=403)
    except (InvalidParams, RuleRefused) as exc:
        if not posted.refused(exc):
            messages.error(request, exc.message)
        return decision_page(request, facts(), posted=posted, status=400)
    except TaskNotFound as exc:
        raise Http404("No such interaction.") from exc
    if decided.rule_refused is not None:
        # The approval stands (its own transaction); only the rule was not made.
        messages.error(request, f"Approved, but no rule was made: {decided.rule_refused.message}")
    return _moved_on(request, decided, posted.decision)


def _group_decided(request, facts: DecisionFacts, decider: Decider):
    """The group's form on a call's page: every open call of its group decided at once."""
    interaction = facts.interaction
    if not interaction.group_id:
        messages.error(request, "This call was held on its own: decide it with its own buttons.")
        return decision_page(request, facts, status=400)
    try:
        decided = group_decision_post(request.POST, interaction=interaction, decider=decider)
    except StepUpRequired:
        messages.info(
            request,
            "A call of this group is marked risk: high: confirm it is you, and your decision "
            "is then taken.",
        )
        return step_up_redirect(request)
    except AlreadyDecided as exc:
        messages.error(
            request,
            f"Not applied: call {exc.interaction.group_position + 1} of the group was decided by "
            f"{exc.interaction.answered_by or 'someone'} meanwhile. Look at the group again.",
        )
        # The page as it stands now: the group's calls, the one decided meanwhile included.
        fresh = interaction_for_member(request, interaction.public_id)
        return decision_page(
            request, decision_facts(interaction=fresh, decider=decider), status=409
        )
    except (DeciderRefused, ChannelRefused, NotAllowed) as exc:
        messages.error(request, f"Not applied to any call of the group: {exc.message}")
        return decision_page(request, facts, status=403)
    except InvalidParams as exc:
        messages.error(request, f"Not applied to any call of the group: {exc.description}")
        return decision_page(request, facts, status=400)
    except TaskNotFound as exc:
        raise Http404("No such interaction.") from exc
    done = group_decided_text(decided, approved=request.POST.get("decision") == "approve_group")
    following = inbox_next(request, after=interaction)
    if following is None:
        messages.success(request, f"{done} Nothing else is waiting.")
        return redirect(inbox_url(carried_query(request.GET)))
    messages.success(request, f"{done} Next: {following['prompt']}")
    return redirect(following["url"])


def _moved_on(request, decided, decision):
    """After a decision the person moves on to the next open item of the list they came
    from (the page's query carries its filters), told what they decided and on what; when
    nothing else waits, back to the inbox."""
    interaction = decided.interaction
    what = interaction.prompt.removesuffix("?")
    summary = held_call_summary(interaction)
    done = f"{decided_text(decided, decision)} ({what}{': ' + summary if summary else ''})"
    following = inbox_next(request, after=interaction)
    if following is None:
        messages.success(request, f"{done} Nothing else is waiting.")
        return redirect(inbox_url(carried_query(request.GET)))
    messages.success(request, f"{done} Next: {following['prompt']}")
    return redirect(following["url"])


def decision_page(
    request,
    facts: DecisionFacts,
    *,
    posted: DecisionPost | None = None,
    already=None,
    extend_form: ExtendForm | None = None,
    status=200,
):
    interaction, held = facts.interaction, facts.held_call
    tenant = request.membership.tenant
    forms = posted.forms if posted else {}
    is_admin = request.membership.role == "admin"
    may_decide_call = facts.may_decide and held is not None
    query = carried_query(request.GET)
    elicitation = elicitation_of(interaction)  # a tool server's form, not free text
    call = held_call_view(interaction, reveal=True, arguments=held.arguments) if held else None
    context = {
        "nav": "inbox",
        "back_url": inbox_url(query),
        "summary": call["summary"] if call else "",
        "impact": call["impact"] if call else "",
        # A model's summary of the held call, where the tenant has them (shown labelled).
        "model_summary": call_summary_of(interaction, tenant=tenant) if held else None,
        "interaction": interaction,
        "task": interaction.task,
        "facts": facts,
        "held_call": held,
        "arguments": pretty(held.arguments) if held else None,
        "detail": interaction.detail or {},
        "answer": pretty(interaction.answer) if interaction.answer is not None else None,
        "messages_shown": visible_messages(interaction.task),
        "can_decide": request.membership.can_decide,
        "is_open": facts.is_open,
        "already": already,
        "approval_form": forms.get("approval") or ApprovalForm(),
        "answer_form": None
        if elicitation
        else forms.get("answer") or AnswerForm(interaction=interaction),
        "elicitation_form": (forms.get("answer") or ElicitationForm(interaction=interaction))
        if elicitation
        else None,
        "edit_form": forms.get("edit") or edit_form(facts),
        "rule_form": (forms.get("rule") or rule_form(facts, is_admin=is_admin))
        if may_decide_call and facts.may_approve
        else None,
        "rule_why_not": facts.rule_refusal if may_decide_call else "",
        "trust": facts,
        "stepped_up": not facts.step_up_needed,
        "receipts": facts.receipts,
        "approvers_named": facts.approvers_named,
        "widened_to": interaction.widened_to or [],
        "progress": facts.progress,
        # Who may decide an open item may give it more time (approvals.deadline_views).
        "extend_form": (extend_form or ExtendForm(interaction=interaction))
        if facts.is_open and facts.may_decide and not elicitation
        else None,
        "approvals_so_far": interaction.approvals or [],
        "decide_refusal": facts.refusal,
        "approved_already": facts.approved_already,
        "deliveries": deliveries_for_interaction(tenant=tenant, interaction=interaction),
        "ladder_steps": ladder_steps_for(tenant=tenant, interaction=interaction),
        # The calls held with this one, when its model reply held several (a group).
        "group": group_context(interaction=interaction, decider=decider_of(request))
        if interaction.group_id
        else None,
    }
    return render(request, "approvals/interaction_detail.html", context, status=status)


# --- resolving an uncertain effect ---------------------------------------------------------


def _effect_page(request, effect: Effect, *, form=None, status=200):
    labels = dict(EffectResolveForm.RESOLUTIONS)
    # Redacted: only an approval's own page shows a redacted value.
    call = effect_call_view(
        effect, agent=effect.task.agent, interaction=approval_of_effect(effect=effect)
    )
    context = {
        "nav": "inbox",
        "effect": effect,
        "task": effect.task,
        "summary": call["summary"],
        "impact": call["impact"],
        "arguments": pretty(call["arguments"]),
        "outcome": pretty(effect.outcome) if effect.outcome is not None else None,
        "messages_shown": visible_messages(effect.task),
        "resolutions": [
            {"event": r, "label": labels.get(r.action.removeprefix("effect_"), r.action)}
            for r in effect_resolutions(effect=effect)
        ],
        "can_decide": request.membership.can_decide,
        "is_uncertain": effect.state == Effect.State.UNCERTAIN,
        "form": form or EffectResolveForm(),
    }
    return render(request, "approvals/effect_detail.html", context, status=status)


@require_http_methods(["GET", "POST"])
@member_required
def effect_detail(request, public_id: str):
    effect = effect_for_member(request, public_id)
    if request.method == "GET":
        return _effect_page(request, effect)
    require_decider(request.membership)
    form = EffectResolveForm(request.POST)
    if not form.is_valid():
        return _effect_page(request, effect, form=form, status=400)
    try:
        effect_resolve(
            tenant=request.membership.tenant,
            effect_id=effect.public_id,
            resolution=form.cleaned_data["resolution"],
            result=form.cleaned_data["result_value"],
            by=request.user.subject,
            via="page",
        )
    except NotAllowed as exc:
        effect.refresh_from_db()
        messages.error(request, exc.message)
        return _effect_page(request, effect, status=409)
    except InvalidParams as exc:
        form.add_error(None, exc.description)
        return _effect_page(request, effect, form=form, status=400)
    except TaskNotFound as exc:
        raise Http404("No such effect.") from exc
    messages.success(request, dict(EffectResolveForm.RESOLUTIONS)[form.cleaned_data["resolution"]])
    return redirect("approvals:effect", public_id=effect.public_id)
