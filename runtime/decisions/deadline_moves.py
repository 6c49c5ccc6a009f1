"""An operator extends an open item's deadline (the REST API, the page): who may decide it
may extend it, by a duration, bounded over its life (runtime.decisions.deadlines); the
interactions' one writer moves it, audits it, tells the channels (``interaction.extended``)
and the caller (a status update with its new deadline)."""

from django.db import transaction
from django.utils import timezone

from runtime.decisions.approvers import Decider, decider_refusal
from runtime.decisions.deadlines import deadline_of, extension_end
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import interaction_locked
from runtime.decisions.interaction_state import interaction_deadline_move
from runtime.kernel.errors import AlreadyDecided, DeciderRefused


def interaction_extend(
    *, tenant, interaction_id: str, by, decider: Decider, channel: str
) -> Interaction:
    """Extend the tenant's open interaction by ``by`` (a duration such as 30m) for
    ``decider`` through ``channel``. Raises TaskNotFound (another tenant's id as a missing
    one), AlreadyDecided, DeciderRefused (who may not decide it may not extend it; a caller
    never extends) and InvalidParams (a duration too long, not a duration)."""
    with transaction.atomic(durable=True):
        with interaction_locked(tenant=tenant, interaction_id=interaction_id) as (task, item):
            if item.state != Interaction.State.OPEN:
                raise AlreadyDecided(item)
            refusal = (
                "The caller cannot extend a deadline."
                if decider.kind == Decider.CALLER
                else decider_refusal(item, decider)
            )
            if refusal:
                raise DeciderRefused(refusal, interactionId=item.public_id)
            seconds, end = extension_end(item, by, now=timezone.now())
            added = int(deadline_of(item).get("extended") or 0) + seconds
            interaction_deadline_move(
                task=task,
                interaction=item,
                expires_at=end,
                moved={"extended": added, "by": str(by).strip()},
                by=decider.subject,
                via=channel,
                action="extended",
            )
    return item
