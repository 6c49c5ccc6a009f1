"""Reads of a tenant's agents."""

from runtime.agents.agent_models import Agent


def agents_for_tenant(*, tenant) -> list[Agent]:
    return list(Agent.objects.filter(tenant=tenant).order_by("slug").only("pk", "slug", "name"))
