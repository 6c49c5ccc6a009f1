"""An open interaction's deadline, read (runtime.decisions.interaction_state writes it): how
long it stays open and what then becomes of it, how far an operator may extend it, and where
an escalation on expiry moves it.

The deadline is the expire step of the interaction's ladder (runtime.policy.ladders, the
policy rule's ``expires`` among them) and its outcome the step's ``on_expiry`` (or the rule's
own): ``deny`` (the default), ``escalate`` (once: to its roles, admins unless it says, with
a new deadline as long as the first unless it says ``expires``) or ``approve`` (only where
the rule sets ``risk: low`` and the tenant allows it). What the interaction keeps of it,
under ``request``: ``onExpiry`` (the outcome), ``lowRisk``, and ``deadline`` once it moved
(``round``: how many times, so that a moved deadline warns again; ``extended``: the seconds
operators added; ``escalated``; ``first``: the first deadline's length in seconds).
"""

from datetime import datetime, timedelta

from django.conf import settings

from runtime.decisions.decision_models import Interaction
from runtime.kernel.errors import InvalidParams
from runtime.policy.ladders import duration_seconds, expiry_of


def interaction_expiry(task, kind: str, detail: dict, request: dict) -> tuple[int, dict | None]:
    """The agent's expiry for a new interaction, and its outcome: a held call's may be its
    own (runtime.policy.ladders: the expire step of its policy rule's ladder, or of an
    AGENT.md ladder for its tool, else interactionTtlSeconds)."""
    held = kind == Interaction.Kind.APPROVAL and detail.get("server")
    tool = f"{detail['server']}/{detail.get('tool', '')}" if held else ""
    steps = request.get("ladder") if held else None
    seconds, outcome = expiry_of(task.agent, tool=tool, steps=steps)
    return seconds, outcome if held else None


def deadline_of(interaction: Interaction) -> dict:
    """What the interaction keeps of its deadline's moves (see the module)."""
    found = (interaction.request or {}).get("deadline")
    return found if isinstance(found, dict) else {}


def extension_end(interaction: Interaction, by, *, now: datetime) -> tuple[int, datetime]:
    """(seconds, the new deadline) of extending the open ``interaction`` by ``by`` (a
    duration such as 30m): at most INTERACTION_EXTEND_MAX_SECONDS in all over its life, and
    never an item whose deadline has passed. Raises InvalidParams saying why not."""
    try:
        seconds = duration_seconds(by)
    except ValueError as exc:
        raise InvalidParams("by", str(exc)) from None
    if seconds <= 0:
        raise InvalidParams("by", "must be longer than nothing")
    if interaction.expires_at <= now:
        raise InvalidParams("by", "its deadline has passed: it is expiring now")
    limit = settings.INTERACTION_EXTEND_MAX_SECONDS
    added = int(deadline_of(interaction).get("extended") or 0)
    if added + seconds > limit:
        left = max(limit - added, 0)
        raise InvalidParams(
            "by",
            f"an item's deadline is extended by at most {limit // 60} minutes in all "
            f"({left // 60} left)",
        )
    return seconds, interaction.expires_at + timedelta(seconds=seconds)


def escalation_end(interaction: Interaction, outcome: dict, *, now: datetime) -> datetime:
    """Where an escalation on expiry moves the deadline: ``expires`` after ``now``, or as
    long again as the first deadline was."""
    if outcome.get("expires"):
        return now + timedelta(seconds=duration_seconds(outcome["expires"]))
    first = deadline_of(interaction).get("first")
    if not isinstance(first, int) or first <= 0:
        first = round((interaction.expires_at - interaction.created_at).total_seconds())
    return now + timedelta(seconds=max(first, 1))


def expiry_outcome_now(interaction: Interaction, *, tenant_allows: bool) -> str:
    """What the expiry of ``interaction`` does now: ``deny``, ``escalate`` (not twice) or
    ``approve`` (with risk: low, where the tenant allows it; else deny)."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return "deny"
    request = interaction.request or {}
    action = (request.get("onExpiry") or {}).get("action", "deny")
    if action == "escalate" and not deadline_of(interaction).get("escalated"):
        return "escalate"
    if action == "approve" and request.get("lowRisk") and tenant_allows:
        return "approve"
    return "deny"


# What the page and Slack offer to extend an item by (each within what is left of
# INTERACTION_EXTEND_MAX_SECONDS): the REST API takes any duration.
EXTEND_CHOICES = (("30m", "30 minutes"), ("1h", "1 hour"), ("4h", "4 hours"))


def extension_left(interaction: Interaction) -> int:
    """How many seconds operators may still add to the interaction's deadline."""
    added = int(deadline_of(interaction).get("extended") or 0)
    return max(settings.INTERACTION_EXTEND_MAX_SECONDS - added, 0)


def extend_choices(interaction: Interaction) -> list[tuple[str, str]]:
    """EXTEND_CHOICES that still fit the interaction's bound (none: extended as far as it
    may be)."""
    left = extension_left(interaction)
    return [(by, label) for by, label in EXTEND_CHOICES if duration_seconds(by) <= left]
