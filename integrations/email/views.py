"""The page of an e-mail's one-time link (``/integrations/email/<token>/<approve|deny>``).

GET shows the item (its summary, its arguments and their SHA-256) and asks to confirm:
opening a link decides nothing. The POST from that page decides once, through the flow
(integrations.email.links.email_link_use), binding the hash the page showed. The link is
the recipient's credential, so no sign-in is needed, except that a browser signed in as
another member is refused, and ``risk: high`` asks the recipient to sign in and
re-authenticate (django-allauth, as the decision page does: approvals.stepup).
"""

import json

from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from approvals.stepup import step_up_redirect, stepped_up
from integrations.email.links import (
    ACTIONS,
    LinkSpent,
    email_link_find,
    email_link_pending_find,
    email_link_refusal,
    email_link_use,
    link_changed_text,
    link_decider,
)
from notifications.content import item_url, person
from runtime.decisions.answers import text_problem
from runtime.decisions.facts import decision_facts
from runtime.decisions.flow import Decision
from runtime.decisions.summaries import held_call_view
from runtime.kernel.errors import (
    AlreadyDecided,
    ChannelRefused,
    DeciderRefused,
    InvalidParams,
    ItemChanged,
    NotAllowed,
    StepUpRequired,
    TaskNotFound,
)

REASON_MAX = 1000
# The session's record of the link being taken through sign-in or re-authentication.
PENDING_LINK = "integrations_email_link"


def _page(request, link, action, *, refusal="", done="", error="", status=200):
    user = request.user
    mine = user.is_authenticated and user.pk == link.membership.user_id
    interaction = link.interaction
    decider = link_decider(link, stepped_up=mine and stepped_up(request))
    facts = decision_facts(interaction=interaction, decider=decider, with_receipts=False)
    # The values a policy redacts are shown to the recipient signed in only: a link can be
    # forwarded.
    view = held_call_view(interaction, reveal=mine)
    context = {
        "link": link,
        "action": action,
        "interaction": interaction,
        "facts": facts,
        "view": view,
        "arguments": json.dumps(view["arguments"], indent=2, sort_keys=True, ensure_ascii=False)
        if view
        else "",
        "revealed": mine,
        "refusal": refusal,
        "done": done,
        "error": error,
        "url": item_url(interaction),
        "sign_in_first": action == "approve" and facts.step_up_needed,
    }
    return render(request, "integrations/email/link.html", context, status=status)


def _refusal(request, link, action) -> tuple[str, int]:
    refusal = email_link_refusal(link, user=request.user)
    if refusal:
        other = request.user.is_authenticated and request.user.pk != link.membership.user_id
        return refusal, 403 if other else 410
    decider = link_decider(link)
    facts = decision_facts(interaction=link.interaction, decider=decider, with_receipts=False)
    if facts.refusal:
        return facts.refusal, 403
    if action == "approve" and facts.approve_refusal:
        return facts.approve_refusal, 403
    if action == "approve" and facts.approved_already:
        return "You approved this already: another person must approve it.", 409
    return "", 200


@require_http_methods(["GET", "POST"])
def email_link_page(request, token: str, action: str):
    if action not in ACTIONS:
        raise Http404("No such link.")
    link = email_link_find(token)
    if link is None:
        return render(request, "integrations/email/link_unknown.html", status=404)
    return _link_page(request, link, action)


@require_http_methods(["GET", "POST"])
def email_link_pending(request):
    """The link this browser opened, on its way back from signing in or re-authenticating
    (``risk: high``): found through the session, so that the token is in no ``next=``."""
    pending = request.session.get(PENDING_LINK)
    link = None
    if isinstance(pending, dict) and pending.get("action") in ACTIONS:
        link = email_link_pending_find(pending.get("link"))
    if link is None:
        return render(request, "integrations/email/link_unknown.html", status=404)
    return _link_page(request, link, pending["action"])


def _link_page(request, link, action):
    refusal, status = _refusal(request, link, action)
    if refusal:
        return _page(request, link, action, refusal=refusal, status=status)
    if request.method == "GET":
        return _page(request, link, action)
    return _decide(request, link, action)


def _decide(request, link, action):
    user = request.user
    mine = user.is_authenticated and user.pk == link.membership.user_id
    approving = action == "approve"
    reason = (request.POST.get("reason") or "").strip()
    problem = text_problem(reason)
    if len(reason) > REASON_MAX or problem:
        error = (
            f"The reason {problem}."
            if problem
            else f"A reason has at most {REASON_MAX} characters."
        )
        return _page(request, link, action, error=error, status=400)
    shown = (request.POST.get("shown_hash") or "").strip()[:64] or None
    decision = Decision(approved=approving, reason=reason, shown_hash=shown if approving else None)
    try:
        decided = email_link_use(
            link=link,
            action=action,
            decision=decision,
            stepped_up=mine and stepped_up(request),
        )
    except StepUpRequired:
        # risk: high: the recipient signs in (the page again), or re-authenticates, and
        # allauth replays this very post. The link comes back through the session, never
        # through ``next=``: the token is the recipient's credential, and a URL is written
        # to access logs, browser history and Referer headers.
        request.session[PENDING_LINK] = {"link": link.pk, "action": action}
        pending = reverse("integrations:email_link_pending")
        if not mine:
            return redirect_to_login(pending)
        return step_up_redirect(request, resume_at=pending)
    except LinkSpent as exc:
        return _page(request, link, action, refusal=str(exc), status=410)
    except ItemChanged as exc:
        return _page(request, link, action, refusal=link_changed_text(exc.interaction), status=410)
    except AlreadyDecided as exc:
        who = person(exc.interaction.answered_by)
        return _page(
            request,
            link,
            action,
            refusal=f"Someone decided first: {who} via {exc.interaction.answered_via}. "
            "Your decision was not applied.",
            status=409,
        )
    except (DeciderRefused, ChannelRefused, NotAllowed) as exc:
        return _page(request, link, action, refusal=exc.message, status=403)
    except InvalidParams as exc:
        return _page(request, link, action, error=exc.description, status=400)
    except TaskNotFound as exc:
        raise Http404("No such item.") from exc
    request.session.pop(PENDING_LINK, None)
    interaction = decided.interaction
    if decided.recorded:
        done = (
            f"Your approval is in ({len(interaction.approvals)} of "
            f"{interaction.approvals_required}): another person must approve before the call "
            "is sent."
        )
    else:
        done = "Approved: the call is sent." if approving else "Denied: the agent is told why."
    return _page(request, link, action, done=done)
