"""Who is calling: the agent a request is addressed to and the caller's subject.

Both lookups are cached per process (tenants.lookup_cache): a request whose agent and token
were read less than a second ago makes no query to learn who is calling. A saved or deleted
agent, token or tenant clears the caches of this process at once (a2a_endpoint.apps,
tenants.apps), other processes drop the old rows within LOOKUP_CACHE_SECONDS.
"""

import asyncio
import functools
from collections.abc import Callable

from a2a_endpoint import errors, files
from a2a_endpoint.asyncdb import db
from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import ANONYMOUS, is_anonymous_subject
from tenants.lookup_cache import MISSING, LookupCache
from tenants.tokens import (
    TokenError,
    bearer_check,
    parse_bearer,
    token_cache,
    token_load,
    token_touch,
    token_touch_due,
)

# (tenant slug, agent slug) -> the tenant's Agent (its tenant selected) or None. The rows
# are shared by the requests of this process: read them, never change them.
agent_cache = LookupCache()


class Caller:
    def __init__(
        self,
        agent: Agent,
        subject: str,
        activated: frozenset,
        base_url: str | Callable[[], str] = "",
        address: str = "",
    ):
        self.agent = agent
        self.tenant = agent.tenant
        self.subject = subject
        self.activated = activated
        # The peer's address (the proxy's, behind one): what tells anonymous callers apart
        # where they must be (the stream limit, a2a_endpoint.streams).
        self.address = address
        # The A2A version the caller speaks: "1.0", or "0.3" (a2a_endpoint.dialect03).
        self.dialect = "1.0"
        self._base_url = base_url

    @functools.cached_property
    def files_base(self) -> str:
        """Where this caller reached us: the start of the file download links we hand out.
        Worked out when a link is made (most answers have none): ``base_url`` may be a
        callable for that."""
        base_url = self._base_url() if callable(self._base_url) else self._base_url
        return files.files_base(base_url, self.agent.tenant.slug, self.agent.slug)

    def files_base_lazy(self) -> str:
        """files_base, for the wire's writers (a2a_endpoint.wire.task_wire): called only when
        an answer has a file to link, so that most answers never work out the caller's host."""
        return self.files_base

    @property
    def limit_key(self) -> tuple:
        """Whose share of a per-caller limit this caller takes: its subject, or for callers
        without a token (one subject for all of them) its address as well."""
        if self.subject == ANONYMOUS:
            return (self.tenant.pk, self.subject, self.address)
        return (self.tenant.pk, self.subject)

    @property
    def scope(self) -> dict:
        """tenant, agent, subject: whose tasks the caller reaches, as the services take them."""
        return {"tenant": self.tenant, "agent": self.agent, "subject": self.subject}


# Loads in flight, by cache key: when an entry expires under load, one request reads the row
# again and the others wait for that read (not one query each).
_loading: dict = {}


async def cached_lookup(cache: LookupCache, key, load, *args):
    """``load(*args)`` as ``cache`` keeps it under ``key``: read once for every request that
    wants it while it is read (the MCP gateway's lookups too, mcp_gateway.identity)."""
    value = cache.get(key)
    if value is not MISSING:
        return value
    loop = asyncio.get_running_loop()
    pending = _loading.get((cache, key))
    if pending is None or pending.get_loop() is not loop:
        pending = asyncio.ensure_future(db(load, *args))
        _loading[(cache, key)] = pending
        pending.add_done_callback(
            lambda done: _loading.pop((cache, key)) if _loading.get((cache, key)) is done else None
        )
    # shield: a caller that goes away does not cancel the read the others wait for.
    return await asyncio.shield(pending)


def agent_load(tenant_slug: str, agent_slug: str) -> Agent | None:
    def query():
        return (
            Agent.objects.select_related("tenant")
            .filter(tenant__slug=tenant_slug, slug=agent_slug)
            .first()
        )

    return agent_cache.load((tenant_slug, agent_slug), query)


async def identify(
    request, tenant_slug: str, agent_slug: str, *, fresh: bool = False
) -> tuple[Agent, str]:
    """The agent and the caller's subject, or raise the exact error a stranger would get;
    ``fresh`` reads both from the database (and refreshes the caches)."""
    try:
        return await _identify(request, tenant_slug, agent_slug, fresh=fresh)
    except errors.RpcError:
        if fresh:
            raise
        # A refusal is checked against the database: a cached row may predate the change
        # that lets this caller in (a tenant, agent or token made again a moment ago).
        return await _identify(request, tenant_slug, agent_slug, fresh=True)


async def _identify(request, tenant_slug: str, agent_slug: str, *, fresh: bool):
    if fresh:
        agent = await db(agent_load, tenant_slug, agent_slug)
    else:
        agent = await cached_lookup(
            agent_cache, (tenant_slug, agent_slug), agent_load, tenant_slug, agent_slug
        )
    header = request.headers.get("Authorization")
    if header is None:
        if agent is not None and agent.public:
            if not agent.tenant.active:
                raise errors.tenant_inactive(agent.tenant.slug)
            # A role, not an owner: the core gives each task it starts a subject of its own.
            return agent, ANONYMOUS
        # Without credentials a caller learns nothing, not even whether the agent exists.
        raise errors.unauthenticated(TokenError.REASONS["missing"], "missing")
    token = None
    try:
        prefix, plaintext = parse_bearer(header)
        if fresh:
            token = await db(token_load, prefix)
        else:
            token = await cached_lookup(token_cache, prefix, token_load, prefix)
        identity = bearer_check(plaintext, token, kind="partner")
    except TokenError as exc:
        # A genuine token of a deactivated tenant, calling that tenant's agent: say why (the
        # tenant row came with the agent's and the token's reads; no query is added).
        if (
            exc.reason == "inactive"
            and token is not None
            and agent is not None
            and token.tenant_id == agent.tenant_id
        ):
            raise errors.tenant_inactive(agent.tenant.slug) from None
        raise errors.unauthenticated(str(exc), exc.reason) from None
    if token_touch_due(identity.token):
        await db(token_touch, identity.token)
    if is_anonymous_subject(identity.subject):
        # Anonymous subjects are made by the core for callers without a token; a token made
        # before that rule (ApiToken.clean) must not reach anonymous callers' tasks.
        raise errors.unauthenticated(
            "This token's subject is reserved for anonymous callers.", "reserved_subject"
        )
    if (
        agent is None
        # An MCP gateway is no A2A agent: it is served at /mcp/ (mcp_gateway).
        or agent.is_gateway
        or identity.tenant.pk != agent.tenant_id
        or not identity.token.may_call(agent.slug)
    ):
        raise errors.agent_not_found()
    if not agent.tenant.active:
        # The agent's row was read after the tenant's deactivation, the token's before.
        raise errors.tenant_inactive(agent.tenant.slug)
    return agent, identity.subject
