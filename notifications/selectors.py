"""Reads of notifications that pages share; every one names the tenant."""

from notifications.models import Channel, Delivery, LadderStep, Preference


def channels_for_tenant(*, tenant) -> list[Channel]:
    return list(Channel.objects.filter(tenant=tenant).order_by("name"))


def channel_for_tenant(*, tenant, public_id: str) -> Channel | None:
    return Channel.objects.filter(tenant=tenant, public_id=public_id).first()


def deliveries_for_interaction(*, tenant, interaction) -> list[Delivery]:
    """An interaction's notifications with their attempts, oldest first."""
    return list(
        Delivery.objects.filter(tenant=tenant, interaction=interaction)
        .select_related("channel")
        .prefetch_related("attempt_rows")
        .order_by("created_at", "id")
    )


def recent_tests(*, tenant, limit: int = 10) -> list[Delivery]:
    return list(
        Delivery.objects.filter(tenant=tenant, event=Delivery.Event.TEST)
        .select_related("channel")
        .prefetch_related("attempt_rows")
        .order_by("-created_at", "-id")[:limit]
    )


def ladder_positions(*, tenant, interaction_ids: list[int]) -> dict[int, LadderStep]:
    """The last ladder step each interaction reached (by interaction pk)."""
    latest: dict[int, LadderStep] = {}
    for step in LadderStep.objects.filter(tenant=tenant, interaction_id__in=interaction_ids):
        if step.interaction_id not in latest or step.step > latest[step.interaction_id].step:
            latest[step.interaction_id] = step
    return latest


def ladder_steps_for(*, tenant, interaction) -> list[LadderStep]:
    return list(LadderStep.objects.filter(tenant=tenant, interaction=interaction))


def preference_for(*, membership) -> Preference | None:
    return Preference.objects.filter(membership=membership).first()
