"""Who calls a gateway: the gateway a request is addressed to and the bearer token's subject,
as the A2A endpoint reads them (a2a_endpoint.identity's cached lookups). Anything short of a
valid token of the gateway's tenant that names the gateway is one 401, whatever was wrong:
a caller without one learns nothing, not even whether the gateway exists."""

from dataclasses import dataclass

from a2a_endpoint.asyncdb import db
from a2a_endpoint.identity import agent_cache, agent_load, cached_lookup
from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import is_anonymous_subject
from tenants.tokens import (
    TokenError,
    bearer_check,
    parse_bearer,
    token_cache,
    token_load,
    token_touch,
    token_touch_due,
)


@dataclass(frozen=True)
class GatewayCaller:
    gateway: Agent
    subject: str
    token_pk: int

    @property
    def owner(self) -> tuple[str, str]:
        """Whose MCP session a session is: the gateway's path and the token (the mcp
        package's session manager answers another owner's request as an unknown session)."""
        return f"{self.gateway.tenant.slug}/{self.gateway.slug}", f"token:{self.token_pk}"


async def gateway_caller(
    header: str | None, tenant_slug: str, gateway_slug: str
) -> GatewayCaller | None:
    """The caller, or None (401)."""
    if not header:
        return None
    try:
        prefix, plaintext = parse_bearer(header)
        token = await cached_lookup(token_cache, prefix, token_load, prefix)
        identity = bearer_check(plaintext, token, kind="partner")
    except TokenError:
        return None
    if is_anonymous_subject(identity.subject):
        return None
    agent = await cached_lookup(
        agent_cache, (tenant_slug, gateway_slug), agent_load, tenant_slug, gateway_slug
    )
    if agent is None or agent.tenant_id != identity.tenant.pk or not agent.tenant.active:
        # Read again: a cached row may predate the gateway's making.
        agent = await db(_fresh_agent, tenant_slug, gateway_slug)
    if (
        agent is None
        or not agent.is_gateway
        or agent.tenant_id != identity.tenant.pk
        or not agent.tenant.active
        or not identity.token.may_call(agent.slug)
    ):
        return None
    if token_touch_due(identity.token):
        await db(token_touch, identity.token)
    return GatewayCaller(gateway=agent, subject=identity.subject, token_pk=identity.token.pk)


def _fresh_agent(tenant_slug: str, gateway_slug: str) -> Agent | None:
    return (
        Agent.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, slug=gateway_slug)
        .first()
    )
