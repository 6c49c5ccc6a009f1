"""A group of held calls decided in a real browser: a hosted model (the
local OpenAI-compatible stub, real HTTP) asks for two deploys in one reply; the operator sees
one inbox item listing both, decides one call alone and then the rest with the group's form,
and, for a second reply, both at once; each task goes on once, with every call's outcome."""

import uuid

import pytest

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
from tenants.models import Tenant
from tests.e2e.test_operator_flows import Partner, log_in
from tests.groups import KEY, planner, two_deploys
from tests.live import LiveStack
from tests.llm_stub import LLMStub

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stub():
    server = LLMStub().start()
    yield server
    server.stop()


@pytest.fixture
def stack(tmp_path, settings, stub):
    """A live Countersign whose workers ask the stub (the session's stack does not)."""
    queue = f"e2e-groups-{uuid.uuid4().hex[:8]}"
    stack = LiveStack(
        tmp_path,
        extra_env={"CELERY_QUEUE": queue, "OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": KEY},
    )
    # The operator's decisions (made by the live web process) reach this stack's worker.
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    try:
        yield stack.start()
    finally:
        stack.quiesce()
        stack.stop()


def test_an_operator_decides_a_group_call_by_call_and_at_once(
    stack, stub, demo, browser, artifacts
):
    planner(Tenant.objects.get(slug="demo"))
    partner = Partner(stack, demo)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    log_in(page, stack, demo)

    # One reply, two held deploys: one item in the inbox, listing both.
    two_deploys(stub, then="Staging deployed; production was denied.")
    task_id = partner.start("planner", "deploy b-1 to staging and production")
    item = page.locator('#inbox-list a[id^="item-eff_"]').first
    item.wait_for(timeout=20000)
    assert page.locator("#inbox-list .inbox-item").count() == 1
    group = page.locator("#inbox-list .inbox-group li")
    assert group.count() == 2
    assert "staging" in group.nth(0).inner_text() and "production" in group.nth(1).inner_text()
    page.screenshot(path=str(artifacts / "group-inbox.png"), full_page=True)

    # Its page shows both calls with their arguments; the first is approved on its own.
    item.click()
    page.locator("#group-calls").wait_for()
    calls = page.locator("#group-calls .group-call")
    assert calls.count() == 2
    assert '"environment": "production"' in calls.nth(1).inner_text()
    page.screenshot(path=str(artifacts / "group-detail.png"), full_page=True)
    page.get_by_role("button", name="Approve", exact=True).click()
    # The operator moves on to the group's call left: its form now takes that one.
    page.get_by_role("button", name="Deny all 1").wait_for()
    assert "Next: call 2 of 2 of the same reply" in page.locator("main").inner_text()
    first, second = Interaction.objects.filter(task__public_id=task_id).order_by("group_position")
    assert first.state == "answered" and second.state == "open"
    assert partner.task("planner", task_id)["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    page.get_by_label("Reason for all of them (optional)").fill("not production today")
    page.get_by_role("button", name="Deny all 1").click()
    page.get_by_text("Denied 1 call of the group.").wait_for()
    done = partner.wait_for_state("planner", task_id, "TASK_STATE_COMPLETED")
    assert (
        done["status"]["message"]["parts"][0]["text"] == "Staging deployed; production was denied."
    )
    assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [first.public_id]

    # A second reply of two: approved at once.
    two_deploys(stub, then="Both deployed.")
    task_id = partner.start("planner", "deploy b-1 again")
    page.goto(f"{stack.url}/inbox/")
    page.locator('#inbox-list a[id^="item-eff_"]').first.wait_for(timeout=20000)
    page.locator('#inbox-list a[id^="item-eff_"]').first.click()
    page.get_by_role("button", name="Approve all 2").click()
    page.get_by_text("Approved 2 calls of the group").wait_for()
    page.screenshot(path=str(artifacts / "group-approved.png"), full_page=True)
    partner.wait_for_state("planner", task_id, "TASK_STATE_COMPLETED")
    calls = Interaction.objects.filter(task__public_id=task_id)
    assert {(c.state, c.answered_via) for c in calls} == {("answered", "page")}
    assert DemoRecord.objects.filter(effect_id__in=[c.public_id for c in calls]).count() == 2
    context.close()
