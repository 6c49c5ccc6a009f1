"""E-mail's one-time decision links: minted per recipient and item when an approval e-mail is
sent, checked when opened, spent when the decision is posted.

A link is bound to its recipient (a member) and its item, works once (its Approve and Deny
share it), and expires with the item; only the SHA-256 of its token is stored. Opening it
never decides (mail scanners follow links): its page shows the item and asks to confirm, and
the POST from that page decides, through the one decision flow with channel ``email``,
binding the SHA-256 of the arguments the page showed. ``risk: high`` asks the recipient to
sign in and re-authenticate first, as on the decision page. A link names the opening of the
item it was mailed for: once the approval is voided and the item opens again, it decides
nothing and says so (the void's e-mail brings new links).
"""

import hashlib
import secrets
from dataclasses import replace

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from integrations.email.models import EmailLink
from notifications.content import base_url, person
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction
from runtime.decisions.flow import EMAIL, Decided, Decision, decision_take
from runtime.kernel.errors import InvalidParams, ItemChanged, StepUpRequired

ACTIONS = ("approve", "deny")


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def email_link_mint(*, interaction: Interaction, membership, email: str) -> dict:
    """A new link for ``membership`` (mailed at ``email``) to decide ``interaction``: its
    Approve and Deny URLs. The token itself is in them only."""
    token = secrets.token_urlsafe(32)
    EmailLink.objects.create(
        tenant_id=interaction.tenant_id,
        interaction=interaction,
        membership=membership,
        email=email,
        token_hash=_hash(token),
        expires_at=interaction.expires_at,
        opening=interaction.opening,
    )
    return {
        action: base_url() + reverse("integrations:email_link", args=[token, action])
        for action in ACTIONS
    }


def email_link_find(token: str) -> EmailLink | None:
    if not token or len(token) > 100:
        return None
    return (
        EmailLink.objects.select_related("tenant", "membership__user", "interaction__task__agent")
        .filter(token_hash=_hash(token))
        .first()
    )


def email_link_pending_find(pk) -> EmailLink | None:
    """The link a browser's session holds while its recipient signs in (by its row id,
    which only a browser that presented the token put there)."""
    if not isinstance(pk, int):
        return None
    return (
        EmailLink.objects.select_related("tenant", "membership__user", "interaction__task__agent")
        .filter(pk=pk)
        .first()
    )


def email_link_refusal(link: EmailLink, *, user=None, now=None) -> str | None:
    """Why the link cannot decide (now, for this browser's signed-in ``user``), or None."""
    now = now or timezone.now()
    interaction = link.interaction
    if link.used_at is not None:
        return (
            f"This link was used already ({link.used_for or 'decided'}, "
            f"{link.used_at:%Y-%m-%d %H:%M} UTC): each link works once."
        )
    if not link.tenant.active or not link.membership.user.is_active:
        return "This link no longer works: its account or organisation is not active."
    if user is not None and user.is_authenticated and user.pk != link.membership.user_id:
        return (
            "This link was sent to someone else: you are signed in as another member. "
            "Use the link in your own e-mail, or decide on the item's page."
        )
    if link.opening != interaction.opening:
        return link_changed_text(interaction)
    if interaction.state != Interaction.State.OPEN:
        if interaction.state == Interaction.State.EXPIRED:
            return "This item expired without a decision; the link expired with it."
        if interaction.state == Interaction.State.CANCELED:
            return "This item was closed: its task was canceled."
        return (
            f"This item was decided already, by {person(interaction.answered_by)} "
            f"via {interaction.answered_via}."
        )
    if now >= link.expires_at or now >= interaction.expires_at:
        return "This link has expired with the item."
    return None


def link_changed_text(interaction: Interaction) -> str:
    why = (interaction.detail or {}).get("reason") or "its tool policy changed"
    return (
        "This item changed since this e-mail was sent: the approval given before is void "
        f"({why}) and it needs a new decision, on what it is now. This link no longer "
        "decides it: use the links of the e-mail sent since, or decide on its page."
    )


def link_decider(link: EmailLink, *, stepped_up: bool = False) -> Decider:
    return Decider.of_member(
        link.membership, link.membership.user, stepped_up=stepped_up, channel_user=link.email
    )


def email_link_use(
    *, link: EmailLink, action: str, decision: Decision, stepped_up: bool = False
) -> Decided:
    """Spend the link on ``decision`` (its ``action``: approve or deny) and take it through
    the flow. The link is claimed first (a conditional update), so that two posts of one link
    decide once; a refusal the person can mend (re-authenticate, reload the arguments) gives
    it back. Raises LinkSpent, and what decision_take raises."""
    now = timezone.now()
    with transaction.atomic():
        claimed = EmailLink.objects.filter(pk=link.pk, used_at__isnull=True).update(
            used_at=now, used_for=action
        )
    if claimed != 1:
        raise LinkSpent("This link was used already: each link works once.")
    try:
        return decision_take(
            tenant=link.tenant,
            interaction_id=link.interaction.public_id,
            decider=link_decider(link, stepped_up=stepped_up),
            decision=replace(decision, opening=link.opening),
            channel=EMAIL,
        )
    except (StepUpRequired, InvalidParams, ItemChanged):
        # Nothing was decided: the link is given back (an item changed since refuses it
        # for good, and its page then says why rather than "used").
        with transaction.atomic():
            EmailLink.objects.filter(pk=link.pk, used_at=now).update(used_at=None, used_for="")
        raise


class LinkSpent(Exception):
    """The link was used (by another post of it) between the page and this decision."""
