"""A decision taken in Slack: who clicked, mapped to a member, and the one decision flow.

The Slack user is the member whose login e-mail is the address Slack confirms for them
(``users.info``: ``profile.email`` with ``is_email_confirmed``; the app needs the
``users:read.email`` scope), read again at every decision; what Slack said is cached for
SLACK_USER_CACHE_SECONDS (integrations.SlackUser). The decision is the flow's, channel
``slack``, the Slack user id on its receipt and audit row: eligibility, the two-person rule
(each person once, whichever Slack accounts they click from), rules and receipts are all
its. A Slack user never steps up (``risk: high`` is approved in the browser). Whoever the
flow refuses is told so, in a message only they see, and nothing is decided.
"""

import logging
import re
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from integrations.slack.api import SlackFailed, slack_call
from integrations.slack.models import SlackApp, SlackUser
from integrations.slack.mrkdwn import slack_escape
from notifications.content import item_url, person
from runtime.decisions.approvers import Decider
from runtime.decisions.deadline_moves import interaction_extend
from runtime.decisions.deadlines import EXTEND_CHOICES
from runtime.decisions.decision_models import Interaction
from runtime.decisions.flow import SLACK, AllowSimilar, Decision, decision_take
from runtime.kernel.errors import (
    AlreadyDecided,
    ChannelRefused,
    DeciderRefused,
    InvalidParams,
    ItemChanged,
    NotAllowed,
    RuleRefused,
    StepUpRequired,
    TaskNotFound,
    UnsupportedOperation,
)
from tenants.models import Membership

logger = logging.getLogger(__name__)

SLACK_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,39}$")
# What a click on an id that names nothing hears (a forged or mangled payload, another
# tenant's item): the same words whether the endpoint or the decision found it out.
NO_SUCH_ITEM = "Nothing was decided: Countersign has no such item."


def slack_email(*, app: SlackApp, user_id: str, now=None) -> str:
    """The confirmed e-mail address Slack gives for the user ("" for none: a bot, a
    deactivated account, an address not confirmed, the scope missing). Raises SlackFailed."""
    now = now or timezone.now()
    fresh = now - timedelta(seconds=settings.SLACK_USER_CACHE_SECONDS)
    cached = SlackUser.objects.filter(tenant_id=app.tenant_id, slack_user_id=user_id).first()
    if cached is not None and cached.checked_at > fresh:
        return cached.email
    user = slack_call(app, "users_info", user=user_id).get("user") or {}
    email = str((user.get("profile") or {}).get("email") or "").strip()
    if user.get("deleted") or user.get("is_bot") or user.get("is_email_confirmed") is not True:
        email = ""
    try:
        SlackUser.objects.update_or_create(
            tenant_id=app.tenant_id,
            slack_user_id=user_id,
            defaults={"email": email[:254], "checked_at": now},
        )
    except IntegrityError:
        pass  # two clicks of a new user at once: the other one kept what Slack said
    return email


def slack_member(*, app: SlackApp, user_id: str) -> tuple[Membership | None, str]:
    """The tenant's member a Slack user is, or None and why not. Raises SlackFailed."""
    tenant = app.tenant
    if not SLACK_USER_ID.match(user_id or ""):
        return None, "Slack did not say who clicked."
    email = slack_email(app=app, user_id=user_id)
    if not email:
        return None, (
            "Slack gives no confirmed e-mail address for your account, so Countersign cannot "
            "tell which member you are."
        )
    membership = (
        Membership.objects.filter(
            tenant=tenant, user__email__iexact=email, user__is_active=True, tenant__active=True
        )
        .select_related("user")
        .first()
    )
    if membership is None:
        return None, (
            f"no member of {tenant.name} in Countersign has the e-mail address of your Slack "
            f"account ({email})."
        )
    return membership, ""


def decision_of(data: dict) -> Decision:
    """A decision as the interactivity endpoint read it (JSON, through the broker)."""
    similar = data.get("allowSimilar")
    return Decision(
        approved=data.get("approved"),
        value=data.get("value"),
        reason=str(data.get("reason") or ""),
        shown_hash=data.get("shownHash") or None,
        opening=data.get("opening"),
        allow_similar=AllowSimilar(
            duration=similar["duration"],
            caller_only=similar["callerOnly"],
            conditions=similar["conditions"],
        )
        if similar
        else None,
    )


def already_text(interaction: Interaction) -> str:
    if interaction.state == Interaction.State.EXPIRED:
        return "it expired without a decision."
    if interaction.state == Interaction.State.CANCELED:
        return "its task was canceled."
    by = person(interaction.answered_by)
    return f"it was decided already, by {by} via {interaction.answered_via}."


def slack_decision_take(
    *, app: SlackApp, user_id: str, interaction_id: str, decision: Decision
) -> str:
    """Take a Slack user's decision through the flow; what to tell them, in Slack's mrkdwn
    and escaped ("" when the message's update says it all). Raises SlackFailed (Slack
    could not say who clicked)."""
    membership, why = slack_member(app=app, user_id=user_id)
    if membership is None:
        return slack_escape(f"Nothing was decided: {why}")
    decider = Decider.of_member(membership, channel_user=user_id)
    try:
        decided = decision_take(
            tenant=app.tenant,
            interaction_id=interaction_id,
            decider=decider,
            decision=decision,
            channel=SLACK,
        )
    except AlreadyDecided as exc:
        return slack_escape(f"Nothing changed: {already_text(exc.interaction)}")
    except ItemChanged as exc:
        return slack_escape(
            f"Nothing was decided: {exc.message} Decide on its message as it is now, or in "
            f"Countersign: {item_url(exc.interaction)}"
        )
    except StepUpRequired as exc:
        url = item_url(Interaction.objects.get(tenant=app.tenant, public_id=interaction_id))
        return slack_escape(f"Nothing was decided: {exc.message} Approve it in the browser: {url}")
    except TaskNotFound:
        return NO_SUCH_ITEM
    except (
        DeciderRefused,
        ChannelRefused,
        NotAllowed,
        UnsupportedOperation,
        InvalidParams,
        RuleRefused,
    ) as exc:
        return slack_escape(f"Nothing was decided: {exc.message}")
    interaction = decided.interaction
    if decided.recorded:
        return slack_escape(
            f"Your approval is in ({len(interaction.approvals)} of "
            f"{interaction.approvals_required}): another person must approve before the call "
            "is sent."
        )
    if decided.rule is not None:
        until = decided.rule.expires_at
        return slack_escape(
            "Approved. A standing rule now allows similar calls"
            + (f" until {until:%Y-%m-%d %H:%M} UTC." if until else ".")
        )
    if decided.rule_refused is not None:
        return slack_escape(f"Approved, but no rule was made: {decided.rule_refused.message}")
    return ""


def slack_tell(*, app: SlackApp, channel_id: str, user_id: str, text: str) -> None:
    """A message only ``user_id`` sees, in the channel they clicked in (best effort: the
    decision, or its refusal, stands whether or not Slack shows it)."""
    if not text or not channel_id or not user_id:
        return
    try:
        slack_call(app, "chat_postEphemeral", channel=channel_id, user=user_id, text=text)
    except SlackFailed:
        logger.warning("could not tell Slack user %s in %s", user_id, channel_id, exc_info=True)


def slack_extend_take(*, app: SlackApp, user_id: str, interaction_id: str, by: str) -> str:
    """Extend an item's deadline for the Slack user who picked it in the message's Extend
    menu, through the same service as the REST route and the page (who may decide it may
    extend it; bounded; audited; the caller told, and the message updated by the
    ``extended`` follow-up); what to tell them, escaped. Raises SlackFailed."""
    membership, why = slack_member(app=app, user_id=user_id)
    if membership is None:
        return slack_escape(f"Nothing was extended: {why}")
    try:
        extended = interaction_extend(
            tenant=app.tenant,
            interaction_id=interaction_id,
            by=by,
            decider=Decider.of_member(membership, channel_user=user_id),
            channel=SLACK,
        )
    except AlreadyDecided as exc:
        return slack_escape(f"Nothing was extended: {already_text(exc.interaction)}")
    except TaskNotFound:
        return "Nothing was extended: Countersign has no such item."
    except (DeciderRefused, InvalidParams) as exc:
        return slack_escape(f"Nothing was extended: {exc.message}")
    return slack_escape(
        f"Extended by {dict(EXTEND_CHOICES).get(by, by)}: it now expires at {extended.expires_at:%Y-%m-%d %H:%M} UTC. "
        "The caller was told."
    )


def slack_click_take(*, tenant_id: int, click: dict) -> None:
    """A click (or a modal's submission) the endpoint read: decide (or extend), and tell the
    clicker."""
    app = SlackApp.objects.select_related("tenant").filter(tenant_id=tenant_id).first()
    if app is None:
        return  # the app was removed since: nothing decides
    if click.get("extend"):
        text = slack_extend_take(
            app=app, user_id=click["user"], interaction_id=click["interaction"], by=click["extend"]
        )
        slack_tell(app=app, channel_id=click["channel"], user_id=click["user"], text=text)
        return
    text = slack_decision_take(
        app=app,
        user_id=click["user"],
        interaction_id=click["interaction"],
        decision=decision_of(click["decision"]),
    )
    slack_tell(app=app, channel_id=click["channel"], user_id=click["user"], text=text)


def slack_app_tell(*, tenant_id: int, channel_id: str, user_id: str, text: str) -> None:
    app = SlackApp.objects.filter(tenant_id=tenant_id).first()
    if app is not None:
        slack_tell(app=app, channel_id=channel_id, user_id=user_id, text=text)
