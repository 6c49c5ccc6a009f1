"""Writing agents from AGENT.md specs."""

from runtime.agentfile import AgentSpec
from runtime.models import Agent


def agent_upsert(*, tenant, spec: AgentSpec) -> tuple[Agent, str]:
    """Create or update an agent from its spec; return it and 'created', 'updated' or 'unchanged'."""
    fields = spec.as_fields()
    agent = Agent.objects.filter(tenant=tenant, slug=spec.slug).first()
    if agent is None:
        return Agent.objects.create(tenant=tenant, slug=spec.slug, **fields), "created"
    changed = [name for name, value in fields.items() if getattr(agent, name) != value]
    if not changed:
        return agent, "unchanged"
    for name in changed:
        setattr(agent, name, fields[name])
    agent.save(update_fields=[*changed, "updated_at"])
    return agent, "updated"
