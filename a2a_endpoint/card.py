"""Agent cards (A2A §4.4, §8), built from the agent and checked against the SDK's AgentCard."""

import hashlib
import json

from a2a import types as a2a
from django.conf import settings
from google.protobuf import json_format

from a2a_endpoint import dialect03
from runtime.agents.agent_models import Agent
from runtime.kernel import extensions as ext


def endpoint_url(request, agent: Agent) -> str:
    base = settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}"
    return f"{base}/a2a/{agent.tenant.slug}/{agent.slug}"


def agent_card(request, agent: Agent, *, legacy: bool = False) -> dict:
    """The agent's card: A2A 1.0, listing the 0.3 interface of the same URL beside the 1.0 one.

    ``legacy`` adds the top-level fields a 0.3 / 0.2.5 client reads (``url``,
    ``preferredTransport``...). They are not valid in a 1.0 card (its schema allows no other
    properties), so they are served only to callers that ask for 0.x (views.card)."""
    base = settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}"
    card = {
        "name": agent.name,
        "description": agent.description,
        "version": agent.version,
        "provider": {"organization": agent.tenant.name, "url": base},
        # JSON-RPC first (preferred), then the HTTP+JSON binding on the same URL
        # (a2a_endpoint.rest: /message:send, /tasks/{id}, ... after it).
        "supportedInterfaces": [
            {
                "url": endpoint_url(request, agent),
                "protocolBinding": binding,
                "protocolVersion": "1.0",
            }
            for binding in ("JSONRPC", "HTTP+JSON")
        ],
        "capabilities": {
            # SSE streams (a2a_endpoint.streams); updates also reach callers by push
            # (runtime.kernel.push.push_delivery).
            "streaming": True,
            "pushNotifications": True,
            "extendedAgentCard": False,
            "extensions": [
                {"uri": uri, "description": ext.DESCRIPTIONS[uri], "required": False}
                for uri in ext.IMPLEMENTED
            ],
        },
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "A Countersign API token issued by the tenant's admin.",
                }
            }
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [
            {
                k: v
                for k, v in skill.items()
                if k in ("id", "name", "description", "tags", "examples") and v is not None
            }
            for skill in agent.skills
        ],
    }
    if not agent.public:
        card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
    # Checked against the SDK's type (a card it cannot read is our bug), but served as built:
    # ProtoJSON would drop `required: false`, which the profile asks to be explicit.
    json_format.ParseDict(card, a2a.AgentCard())
    # The same endpoint serves the 0.3 dialect (a2a_endpoint.dialect03): its interface, and for
    # 0.x callers the fields 0.3 clients read, are added after the 1.0 check.
    return dialect03.card_fields(
        card, endpoint_url(request, agent), public=agent.public, legacy=legacy
    )


def card_etag(card: dict) -> str:
    return '"' + hashlib.sha256(json.dumps(card, sort_keys=True).encode()).hexdigest()[:32] + '"'
