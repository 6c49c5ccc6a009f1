"""One answer for a group, from the a2a-sdk client: a hosted model (the
local OpenAI-compatible stub, real HTTP) asks for two deploys in one reply that the caller
may decide (``deciders: either``); the partner answers both held calls with one message, a
data part mapping each interaction id to its answer, and the turn goes on once. An answer
naming a call that is not the group's refuses the whole message (-32602) and decides
nothing."""

import uuid

import pytest
from a2a.types import TaskState
from a2a.utils.errors import InvalidParamsError

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from tenants.models import Tenant
from tests.groups import KEY, planner, two_deploys
from tests.live import LiveStack
from tests.llm_stub import LLMStub
from tests.sdk_client import Partner, as_dict, status_text, user_message

pytestmark = [pytest.mark.django_db(transaction=True)]

PLANNER = "/a2a/demo/planner"


@pytest.fixture
def stub():
    server = LLMStub().start()
    yield server
    server.stop()


@pytest.fixture
def stack(tmp_path, settings, stub):
    """A live Countersign whose workers ask the stub (the session's stack does not)."""
    queue = f"interop-group-{uuid.uuid4().hex[:8]}"
    stack = LiveStack(
        tmp_path,
        extra_env={"CELERY_QUEUE": queue, "OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": KEY},
    )
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    try:
        yield stack.start()
    finally:
        stack.quiesce()
        stack.stop()


def test_a_group_of_two_held_calls_is_answered_in_one_message(stack, stub, demo):
    tenant = Tenant.objects.get(slug=demo["tenant"])
    planner(tenant, policy={"deploy/deploy_build": {"action": "approve", "deciders": "either"}})
    partner = Partner(stack.url, demo["token"])
    try:
        two_deploys(stub, then="Staging deployed, production not.")
        paused = partner.send(
            PLANNER, user_message("deploy b-1 everywhere"), extensions=[ext.INTERACTIONS]
        )
        paused = partner.wait_for(PLANNER, paused.id, extensions=[ext.INTERACTIONS])
        assert paused.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
        group = as_dict(paused.status)["message"]["metadata"][ext.INTERACTIONS]
        first, second = [i["interactionId"] for i in group["interactions"]]

        # An id that is not the group's beside a right one: nothing is decided.
        wrong = {"answers": {first: {"approved": True}, "eff_not_ours": {"approved": True}}}
        with pytest.raises(InvalidParamsError) as refused:
            partner.send(
                PLANNER,
                user_message(task_id=paused.id, context_id=paused.context_id, data=wrong),
                extensions=[ext.INTERACTIONS],
            )
        assert "does not name an open interaction" in str(refused.value)
        assert set(Interaction.objects.values_list("state", flat=True)) == {"open"}

        answers = {"answers": {first: {"approved": True}, second: {"approved": False}}}
        partner.send(
            PLANNER,
            user_message(task_id=paused.id, context_id=paused.context_id, data=answers),
            extensions=[ext.INTERACTIONS],
        )
        done = partner.wait_for(
            PLANNER, paused.id, states={TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED}
        )
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert status_text(done) == "Staging deployed, production not."
        calls = {i.public_id: i for i in Interaction.objects.filter(task__public_id=paused.id)}
        assert (calls[first].answer["approved"], calls[second].answer["approved"]) == (True, False)
        assert {i.answered_via for i in calls.values()} == {"inband"}
        assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [first]
        assert len(stub.requests) == 2  # the turn went on once, for both calls
    finally:
        partner.close()
