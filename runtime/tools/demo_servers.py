"""The demo tool servers: local and offline but behaving like real ones (they validate,
they can fail, and what they do is recorded, once per call)."""

import time

from runtime.agents.agent_models import DemoRecord
from runtime.agents.agent_store import demo_record_insert
from runtime.tools.protocol import CallContext, ToolError, ToolServer


def demo_record(*, effect_id: str, tenant, server: str, kind: str, data: dict) -> int:
    """The id of the demo servers' record of the call ``effect_id``, made unless it is there
    (a call sent again finds the first one, as a real server's idempotency key would).

    One statement, INSERT ... ON CONFLICT DO NOTHING (both backends), and a read only when
    the record was there: the get_or_create it replaces was a read, then a transaction of its
    own around the insert, on every deployment (a resumed deployer turn's wait on the tool,
    bench/decisions.py)."""
    record = DemoRecord(tenant=tenant, server=server, kind=kind, effect_id=effect_id, data=data)
    inserted = demo_record_insert(record)
    if inserted is not None:
        return inserted
    return DemoRecord.objects.filter(effect_id=effect_id).values_list("pk", flat=True).get()


class DeployServer:
    """``deploy / deploy_build``: records a deployment of a build to an environment."""

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> dict:
        if tool != "deploy_build":
            raise ToolError(f"deploy has no tool {tool!r}")
        # A real deployment takes a while; the demo can be told how long (reliability tests
        # kill a worker in the middle of one).
        duration = float(arguments.get("durationSeconds", 0) or 0)
        if duration > 0:
            time.sleep(min(duration, 60))
        record = demo_record(
            effect_id=ctx.effect_id,
            tenant=ctx.tenant,
            server="deploy",
            kind="deployment",
            data=dict(arguments),
        )
        return {
            "deploymentId": f"dep-{record}",
            "build": arguments.get("build"),
            "environment": arguments.get("environment"),
        }


class GithubServer:
    """``github / create_pull_request``: needs the tenant's github connection."""

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> dict:
        if tool != "create_pull_request":
            raise ToolError(f"github has no tool {tool!r}")
        from connections.selectors import connection_secret_for

        if not connection_secret_for(tenant=ctx.tenant, app_slug="github"):
            raise ToolError(
                "github is not connected for this tenant; ask for the connection first."
            )
        number = demo_record(
            effect_id=ctx.effect_id,
            tenant=ctx.tenant,
            server="github",
            kind="pull_request",
            data=dict(arguments),
        )
        return {
            "number": number,
            "url": f"https://github.example/{arguments.get('repo', 'repo')}/pull/{number}",
        }


SERVERS: dict[str, ToolServer] = {"deploy": DeployServer(), "github": GithubServer()}
