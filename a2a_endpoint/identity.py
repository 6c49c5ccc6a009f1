"""Who is calling: the agent a request is addressed to and the caller's subject."""

from a2a_endpoint import errors, files
from a2a_endpoint.asyncdb import db
from runtime.models import ANONYMOUS, Agent, is_anonymous_subject
from tenants.tokens import TokenError, aauthenticate_bearer


class Caller:
    def __init__(self, agent: Agent, subject: str, activated: frozenset, base_url: str = ""):
        self.agent = agent
        self.tenant = agent.tenant
        self.subject = subject
        self.activated = activated
        # Where this caller reached us: the start of the file download links we hand out.
        self.files_base = files.files_base(base_url, agent.tenant.slug, agent.slug)

    @property
    def scope(self) -> dict:
        """tenant, agent, subject: whose tasks the caller reaches, as the services take them."""
        return {"tenant": self.tenant, "agent": self.agent, "subject": self.subject}


def _load_agent(tenant_slug: str, agent_slug: str) -> Agent | None:
    return (
        Agent.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, tenant__active=True, slug=agent_slug)
        .first()
    )


async def identify(request, tenant_slug: str, agent_slug: str) -> tuple[Agent, str]:
    """The agent and the caller's subject, or raise the exact error a stranger would get."""
    agent = await db(_load_agent, tenant_slug, agent_slug)
    header = request.headers.get("Authorization")
    if header is None:
        if agent is not None and agent.public:
            # A role, not an owner: the core gives each task it starts a subject of its own.
            return agent, ANONYMOUS
        # Without credentials a caller learns nothing, not even whether the agent exists.
        raise errors.unauthenticated(TokenError.REASONS["missing"], "missing")
    try:
        identity = await aauthenticate_bearer(header, kind="partner")
    except TokenError as exc:
        raise errors.unauthenticated(str(exc), exc.reason) from None
    if is_anonymous_subject(identity.subject):
        # Anonymous subjects are made by the core for callers without a token; a token made
        # before that rule (ApiToken.clean) must not reach anonymous callers' tasks.
        raise errors.unauthenticated(
            "This token's subject is reserved for anonymous callers.", "reserved_subject"
        )
    if (
        agent is None
        or identity.tenant.pk != agent.tenant_id
        or not identity.token.may_call(agent.slug)
    ):
        raise errors.agent_not_found()
    return agent, identity.subject
