"""The caller sees the decision's progress (a2a-sdk client, streaming): an approval in two
stages says "0 of 2" as it opens and "1 of 2 approvals; waiting for the finance stage" after
the first approval, as a status update on the open stream, under interactions/v1 and as a
text part of the status message."""

import pytest
from a2a.types import TaskState

from runtime.agents.agent_models import Agent
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from tenants.models import Tenant
from tests.core import flow_answer
from tests.sdk_client import as_dict, user_message

pytestmark = pytest.mark.django_db(transaction=True)

DEPLOY = "deploy build 2026.10.06-1 to staging"
TWO_STAGES = {
    "action": "approve",
    "stages": [
        {"title": "operations", "approvers": ["operator"], "required": 1},
        {"title": "finance", "approvers": ["admin"], "required": 1},
    ],
}


def test_a_streaming_caller_sees_1_of_2_after_the_first_approval(partner, agents, demo):
    tenant = Tenant.objects.get(slug=demo["tenant"])
    deployer = Agent.objects.get(tenant=tenant, slug="deployer")
    deployer.tool_policy = {**(deployer.tool_policy or {}), "deploy/deploy_build": TWO_STAGES}
    deployer.save(update_fields=["tool_policy"])
    pauses: list[dict] = []
    deciders = [
        Decider(subject="user:operator@demo.test", role="operator"),
        Decider(subject="user:admin@demo.test", role="admin"),
    ]

    def on_event(event):
        if not (
            event.HasField("status_update")
            and event.status_update.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
        ):
            return
        pauses.append(as_dict(event.status_update.status)["message"])
        interaction = Interaction.objects.get(
            task__public_id=event.status_update.task_id, state=Interaction.State.OPEN
        )
        decider = deciders[len(pauses) - 1]
        flow_answer(
            tenant=tenant,
            interaction_id=interaction.public_id,
            answer={"approved": True},
            by=decider.subject,
            via="page",
            decider=decider,
        )

    events = partner.stream(
        agents["deployer"], user_message(DEPLOY), extensions=[ext.INTERACTIONS], on_event=on_event
    )
    last = events[-1].status_update.status
    assert last.state == TaskState.TASK_STATE_COMPLETED
    opened, recorded = pauses
    first = opened["metadata"][ext.INTERACTIONS]["progress"]
    assert (first["approvals"], first["required"], first["stage"], first["stages"]) == (0, 2, 1, 2)
    assert first["stageTitle"] == "operations" and first["expiresAt"].endswith("Z")
    after = recorded["metadata"][ext.INTERACTIONS]["progress"]
    assert (after["approvals"], after["required"], after["stage"]) == (1, 2, 2)
    assert after["stageTitle"] == "finance"
    # A person's line, also for a caller who reads the text alone; the prompt stays first.
    assert recorded["parts"][0]["text"] == "Approve deploy / deploy_build?"
    line = recorded["parts"][1]["text"]
    assert line.startswith("1 of 2 approvals; waiting for the finance stage; expires ")
    assert line == after["text"] and line.endswith(" UTC")
    # Who approved is never the caller's to read.
    assert "operator@demo.test" not in str(recorded)
