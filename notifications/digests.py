"""Digests: a member who chose one (their Preference: every N minutes) gets the items an
e-mail channel would have mailed them held (DigestItem), and one e-mail listing those that
still wait, every N minutes (beat)."""

import json
import logging
from datetime import datetime, timedelta

from django.core.mail import EmailMessage
from django.utils import timezone

from notifications.content import one_line
from notifications.models import Delivery, DigestItem, Preference
from runtime.decisions.decision_models import Interaction

logger = logging.getLogger(__name__)


def digest_line(content: dict) -> str:
    """An item in a digest: its title (with the summary), its link, and the arguments unless
    the channel omits them, within the 500 characters a line keeps."""
    line = f"{content['title']} {content['url']}"
    if content.get("impact"):
        line += f"\n  approving: {content['impact']}"
    if "arguments" in content:
        arguments = json.dumps(content["arguments"], sort_keys=True, ensure_ascii=False)
        line += f"\n  arguments: {arguments}"
    return line if len(line) <= 500 else line[:499] + "…"


def digest_hold(*, delivery: Delivery, user, content: dict) -> None:
    """Hold the item of ``delivery`` for ``user``'s next digest (once per item and event)."""
    DigestItem.objects.get_or_create(
        tenant_id=delivery.tenant_id,
        user=user,
        interaction=delivery.interaction,
        event=delivery.event,
        line=digest_line(content),
    )


def digests_send(*, now: datetime | None = None) -> int:
    """Mail each member who chose a digest what is held for them, every N minutes (beat)."""
    now = now or timezone.now()
    sent = 0
    pending = (
        DigestItem.objects.filter(sent_at__isnull=True)
        .values_list("tenant_id", "user_id")
        .distinct()
    )
    for tenant_id, user_id in list(pending):
        preference = (
            Preference.objects.filter(membership__tenant_id=tenant_id, membership__user_id=user_id)
            .select_related("membership__user", "membership__tenant")
            .first()
        )
        if preference is None or not preference.email_enabled:
            DigestItem.objects.filter(
                tenant_id=tenant_id, user_id=user_id, sent_at__isnull=True
            ).update(sent_at=now)
            continue
        minutes = preference.digest_minutes or 0
        if (
            preference.last_digest_at
            and preference.last_digest_at + timedelta(minutes=minutes) > now
        ):
            continue
        items = list(
            DigestItem.objects.filter(tenant_id=tenant_id, user_id=user_id, sent_at__isnull=True)
            .select_related("interaction")
            .order_by("created_at")
        )
        # Only what still waits is listed: an item decided, expired or voided since it was
        # held for the digest needs nobody, and is counted on one line.
        waiting = [i for i in items if i.interaction.state == Interaction.State.OPEN]
        if not waiting:
            DigestItem.objects.filter(pk__in=[i.pk for i in items]).update(sent_at=now)
            continue
        tenant = preference.membership.tenant
        lines = [f"{len(waiting)} item(s) in {one_line(tenant.name)} wait for a decision:", ""]
        lines += [f"- {item.line}" for item in waiting]
        closed = len({i.interaction_id for i in items}) - len({i.interaction_id for i in waiting})
        if closed:
            lines += ["", f"{closed} more were decided or closed before this digest."]
        body = "\n".join(lines)
        try:
            EmailMessage(
                f"Countersign digest: {len(waiting)} item(s) waiting",
                body,
                to=[preference.membership.user.email],
            ).send()
        except Exception:  # noqa: BLE001 - tried again at the next beat
            logger.warning("digest mail failed for user %s", user_id, exc_info=True)
            continue
        DigestItem.objects.filter(pk__in=[i.pk for i in items]).update(sent_at=now)
        Preference.objects.filter(pk=preference.pk).update(last_digest_at=now)
        sent += 1
    return sent
