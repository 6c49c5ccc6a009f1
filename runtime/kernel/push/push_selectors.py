"""Reads for operator pages."""

from django.db.models import Prefetch

from runtime.kernel.push.push_models import PushAttempt, PushDelivery, PushSettings


def push_deliveries_for_task(*, tenant, task) -> list[PushDelivery]:
    """A task's push deliveries, in event order, with their attempts (the task page)."""
    return list(
        PushDelivery.objects.filter(tenant=tenant, config__task=task)
        .select_related("config")
        .prefetch_related(Prefetch("tries", queryset=PushAttempt.objects.order_by("at", "id")))
        .order_by("config_id", "seq")
    )


def push_settings_for(*, tenant) -> PushSettings:
    """The tenant's push settings (allowed hosts, signing secrets), made on first use."""
    found, _ = PushSettings.objects.get_or_create(tenant=tenant)
    return found
