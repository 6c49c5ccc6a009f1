"""Decisions people can trust, in the core: every decision on a held
call stores a receipt; a call is sent only while its approval's arguments hash and policy
version still match; edit then approve; step-up for risk: high; the audit is append-only.

The services and the turn loop are called directly (tests/core.py); the pages and the REST
channel are in tests/approvals/test_trust_pages.py."""

import json

import pytest
from django.contrib.admin.sites import site
from django.test import RequestFactory

from a2a_endpoint.wire import event_wire, task_wire
from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.interaction_state import interactions_expire
from runtime.decisions.receipts import canonical_hash, receipt_record
from runtime.kernel import extensions as ext
from runtime.kernel.errors import InvalidParams, StepUpRequired, UnsupportedOperation
from runtime.kernel.task_models import AuditEvent, Task, TaskState
from runtime.policy.rules import policy_rule_for
from runtime.turn.calls import arguments_hash
from tenants.appendonly import AppendOnlyError
from tests.core import (
    DEPLOY_TOOL,
    decide,
    flow_answer,
    held_approval,
    in_band,
    open_interaction,
    reply,
    run,
    send,
    status_text,
)

pytestmark = pytest.mark.django_db

# The scripted model reports what it received from its last call, and whether (and to what)
# an operator edited the call's arguments.
REPORT = [
    {"if": {"result": "ok"}, "reply": "ok {{ last.result.build }} edited={{ last.edited }}"},
    {"if": {"result": "error"}, "reply": "error: {{ last.reason }}"},
]


def deploy_agent(make_agent, policy, slug="shipper", report=None):
    return make_agent(
        slug,
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {"build": "b-1", "environment": "staging"},
                }
            },
            *(report or REPORT),
        ],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": policy},
    )


# --- 1. receipts ------------------------------------------------------------------------------


def test_every_decision_on_a_held_call_stores_a_receipt_of_what_it_bound(agents, make_agent):
    agent = deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    effect = Effect.objects.get(public_id=approval.public_id)
    decide(approval, approved=True, reason="fine")
    receipt = Receipt.objects.get()
    assert receipt.decision == "approved"
    assert receipt.arguments_hash == receipt.sent_arguments_hash == effect.arguments_hash
    # The SHA-256 of the canonical arguments, the same bytes as the effect journal's hash.
    assert receipt.arguments_hash == canonical_hash({"environment": "staging", "build": "b-1"})
    assert canonical_hash({"b": 1, "a": "é"}) == arguments_hash({"a": "é", "b": 1})
    # The version of the entry that held the call: its key and the entry as written.
    held_by = policy_rule_for(agent, "deploy", "deploy_build", effect.arguments)
    assert receipt.policy_version == held_by.version
    assert held_by.version == canonical_hash(
        {"entry": "deploy/deploy_build", "rule": agent.tool_policy["deploy/deploy_build"]}
    )
    assert (receipt.policy_entry, receipt.policy_rule) == ("deploy/deploy_build", None)
    assert (receipt.decider, receipt.channel) == ("user:operator@acme.test", "page")
    assert (receipt.server, receipt.tool, receipt.effect_public_id) == (
        "deploy",
        "deploy_build",
        effect.public_id,
    )
    assert receipt.task_public_id == approval.task.public_id and not receipt.edited
    assert receipt.reason == "fine"
    assert run(approval.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 1


def test_denials_in_band_and_expiries_store_receipts_with_their_channel(agents, make_agent):
    deploy_agent(make_agent, {"action": "approve", "deciders": "either"})
    first = held_approval(agents.a, "shipper")
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=first.public_id,
        answer={"approved": False},
        by="program:ops",
        via="rest",
    )
    second = held_approval(agents.a, "shipper")
    reply(
        second.task,
        None,
        parts=[{"data": {"approved": True}}],
        extensions=[ext.INTERACTIONS],
        metadata=in_band(second, approved=True),
    )
    third = held_approval(agents.a, "shipper")
    Interaction.objects.filter(pk=third.pk).update(expires_at=third.created_at)
    assert interactions_expire() == 1
    rows = {r.effect_public_id: (r.decision, r.channel, r.decider) for r in Receipt.objects.all()}
    assert rows == {
        first.public_id: ("denied", "rest", "program:ops"),
        second.public_id: ("approved", "inband", agents.a.subject),
        third.public_id: ("expired", "expiry", "system:expiry"),
    }


def test_a_policy_change_between_approval_and_send_voids_it_and_the_call_is_not_sent(
    agents, make_agent
):
    agent = deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    decide(approval, approved=True)
    # An admin changes the tool's entry after the approval, before the turn sends the call.
    Agent.objects.filter(pk=agent.pk).update(
        tool_policy={"deploy/deploy_build": {"action": "approve", "bulk": False}}
    )
    task = run(approval.task)
    assert not DemoRecord.objects.exists()  # the call was not sent
    assert task.state == TaskState.AUTH_REQUIRED
    assert "void" in status_text(task) and "tool policy changed" in status_text(task)
    effect = Effect.objects.get(public_id=approval.public_id)
    assert effect.state == Effect.State.HELD
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN and approval.answer is None
    assert approval.detail["voided"] is True and "tool policy changed" in approval.detail["reason"]
    extension = task.status_ext[ext.INTERACTIONS]
    assert extension["interactionId"] == approval.public_id and extension["detail"]["voided"]
    void = Receipt.objects.get(decision="void")
    assert (void.channel, void.decider) == ("system", "system:receipts")
    assert AuditEvent.objects.filter(action="approval_voided", interaction=approval).exists()
    # Approved again under the new policy, it is sent once.
    decide(approval, approved=True)
    assert run(approval.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 1
    first, latest = Receipt.objects.filter(decision="approved").order_by("id")
    now = policy_rule_for(
        Agent.objects.get(pk=agent.pk), "deploy", "deploy_build", effect.arguments
    )
    assert latest.policy_version == now.version != first.policy_version


def test_a_policy_that_now_denies_the_tool_denies_the_approved_call(agents, make_agent):
    agent = deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    decide(approval, approved=True)
    Agent.objects.filter(pk=agent.pk).update(tool_policy={"deploy/deploy_build": "deny"})
    task = run(approval.task)
    assert not DemoRecord.objects.exists()
    assert task.state == TaskState.COMPLETED
    assert "error: denied by the tool policy" in status_text(task)
    assert Effect.objects.get().state == Effect.State.DENIED


def test_arguments_changed_after_the_approval_void_it(agents, make_agent):
    deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    decide(approval, approved=True)
    changed = {"build": "evil", "environment": "production"}
    Effect.objects.filter(public_id=approval.public_id).update(
        arguments=changed, arguments_hash=arguments_hash(changed)
    )
    task = run(approval.task)
    assert not DemoRecord.objects.exists()
    assert task.state == TaskState.AUTH_REQUIRED
    assert "arguments no longer match" in status_text(task)


def test_a_call_the_policy_allows_is_sent_without_a_receipt(agents, make_agent):
    deploy_agent(make_agent, "allow")
    assert run(send(agents.a, "shipper")).state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 1 and not Receipt.objects.exists()


def test_receipt_record_is_open_to_standing_rules(agents, make_agent):
    """trustb's standing rules record their decisions with channel rule and the rule's id."""
    agent = deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    effect = Effect.objects.get(public_id=approval.public_id)
    effect.task = approval.task
    receipt = receipt_record(
        effect=effect,
        agent=agent,
        decision="approved",
        decider="rule:rule_x",
        channel="rule",
        rule_id="rule_x",
    )
    assert (receipt.channel, receipt.rule_id, receipt.binds) == ("rule", "rule_x", True)


def test_a_rule_approved_call_whose_policy_changed_is_put_to_a_person(
    agents, make_agent, monkeypatch
):
    """A call a standing rule allowed (no interaction) whose policy changed before it was sent
    is held for a person, with the reason, instead."""
    agent = deploy_agent(make_agent, "allow")
    task = send(agents.a, "shipper")
    # The turn journals the allowed call; a rule's receipt binds it (as runtime.decisions.standing_rules would).
    original = Effect.objects.create
    made = []

    def journal(**fields):
        effect = original(**fields)
        made.append(effect)
        effect.task = Task.objects.get(pk=effect.task_id)
        receipt_record(
            effect=effect, agent=agent, decision="approved", decider="rule:r", channel="rule"
        )
        # The policy changes before the send: in the database, and for the run, which reads
        # it with each of its transactions (runtime.turn.batch.RunBatch.locked).
        changed = {"deploy/deploy_build": "approve"}
        Agent.objects.filter(pk=agent.pk).update(tool_policy=changed)
        fields["task"].agent.tool_policy = changed
        return effect

    monkeypatch.setattr(Effect.objects, "create", journal)
    task = run(task)
    monkeypatch.undo()
    assert not DemoRecord.objects.exists()
    assert task.state == TaskState.AUTH_REQUIRED
    approval = open_interaction(task)
    assert approval.public_id == made[0].public_id and approval.detail["voided"] is True
    decide(approval, approved=True)
    assert run(task).state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 1


# --- 2. edit then approve ---------------------------------------------------------------------


def test_edit_then_approve_sends_the_edited_arguments_and_tells_the_model(agents, make_agent):
    deploy_agent(make_agent, {"action": "approve", "editable": True})
    approval = held_approval(agents.a, "shipper")
    shown = Effect.objects.get(public_id=approval.public_id).arguments_hash
    edited = {"build": "b-2", "environment": "production"}
    decided = flow_answer(
        tenant=agents.a.tenant,
        interaction_id=approval.public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
        arguments=edited,
        shown_hash=shown,
    )
    assert decided.answer == {"approved": True, "edited": True}
    receipt = Receipt.objects.get()
    assert receipt.edited and receipt.arguments_hash == shown
    assert receipt.sent_arguments_hash == canonical_hash(edited) != shown
    task = run(approval.task)
    assert task.state == TaskState.COMPLETED
    assert DemoRecord.objects.get().data == edited  # the call was sent with the edit
    # The model is told that the arguments changed, and to what.
    assert status_text(task) == "ok b-2 edited=true"
    answer = next(e for e in task.transcript if e["type"] == "answer")
    assert answer["edited"] is True and answer["arguments"] == edited


def test_the_partner_sees_edited_true_and_never_the_arguments(agents, make_agent):
    # An agent that does not repeat the arguments: whatever the partner reads comes from us.
    deploy_agent(make_agent, {"action": "approve", "editable": True}, report=[{"reply": "done"}])
    approval = held_approval(agents.a, "shipper")
    edited = {"build": "secret-build-7", "environment": "production"}
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=approval.public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
        arguments=edited,
    )
    task = Task.objects.get(pk=approval.task_id)
    activated = frozenset({ext.INTERACTIONS})
    wire = task_wire(task, activated=activated)
    outcome = wire["metadata"][ext.INTERACTIONS]
    assert outcome == {
        "interactionId": approval.public_id,
        "kind": "approval",
        "outcome": "approved",
        "decidedBy": "operator",
        "decidedVia": "page",
        "edited": True,
    }
    task = run(task)
    events = [event_wire(e.payload, activated) for e in task.events.order_by("seq")]
    everything = json.dumps([events, task_wire(task, activated=activated)])
    assert "secret-build-7" not in everything and "operator@acme.test" not in everything
    assert '"edited": true' in json.dumps(events)


@pytest.mark.parametrize(
    "arguments, why",
    [
        ({"build": "b-2", "environment": "moon"}, "invalid arguments at environment"),
        ({"build": "b-2"}, "'environment' is a required property"),
        ({"build": "b-2", "environment": "staging", "extra": 1}, "Additional properties"),
    ],
)
def test_edited_arguments_that_fail_the_schema_are_refused_and_nothing_changes(
    agents, make_agent, arguments, why
):
    deploy_agent(make_agent, {"action": "approve", "editable": True})
    approval = held_approval(agents.a, "shipper")
    before = Effect.objects.get(public_id=approval.public_id).arguments
    with pytest.raises(InvalidParams, match=why):
        flow_answer(
            tenant=agents.a.tenant,
            interaction_id=approval.public_id,
            answer={"approved": True},
            by="user:operator@acme.test",
            via="page",
            arguments=arguments,
        )
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN
    assert Effect.objects.get(public_id=approval.public_id).arguments == before
    assert not Receipt.objects.exists()


def test_arguments_are_edited_only_where_the_policy_says_editable(agents, make_agent):
    deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    with pytest.raises(InvalidParams, match="editable: true"):
        flow_answer(
            tenant=agents.a.tenant,
            interaction_id=approval.public_id,
            answer={"approved": True},
            by="user:operator@acme.test",
            via="page",
            arguments={"build": "b-9", "environment": "staging"},
        )
    assert open_interaction(approval.task).pk == approval.pk


def test_a_decision_on_arguments_other_than_those_shown_is_refused(agents, make_agent):
    deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    with pytest.raises(InvalidParams, match="not the ones you were shown"):
        flow_answer(
            tenant=agents.a.tenant,
            interaction_id=approval.public_id,
            answer={"approved": True},
            by="user:operator@acme.test",
            via="page",
            shown_hash="0" * 64,
        )
    assert open_interaction(approval.task).pk == approval.pk


# --- 4. step-up -------------------------------------------------------------------------------


def test_a_high_risk_approval_without_step_up_is_refused_and_accepted_after(agents, make_agent):
    deploy_agent(make_agent, {"action": "approve", "risk": "high"})
    approval = held_approval(agents.a, "shipper")
    args = dict(
        tenant=agents.a.tenant,
        interaction_id=approval.public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
    )
    with pytest.raises(StepUpRequired, match="risk: high"):
        flow_answer(**args)
    assert open_interaction(approval.task).pk == approval.pk
    assert not Receipt.objects.exists() and not AuditEvent.objects.exists()
    flow_answer(**args, stepped_up=True)
    assert Receipt.objects.get().stepped_up is True
    assert run(approval.task).state == TaskState.COMPLETED


def test_a_high_risk_denial_needs_no_step_up(agents, make_agent):
    deploy_agent(make_agent, {"action": "approve", "risk": "high"})
    approval = held_approval(agents.a, "shipper")
    decide(approval, approved=False)
    assert Receipt.objects.get().decision == "denied"


def test_the_caller_cannot_approve_a_high_risk_call_in_band(agents, make_agent):
    deploy_agent(make_agent, {"action": "approve", "risk": "high", "deciders": "either"})
    approval = held_approval(agents.a, "shipper")
    with pytest.raises(UnsupportedOperation) as refused:
        reply(
            approval.task,
            None,
            parts=[{"data": {"approved": True}}],
            extensions=[ext.INTERACTIONS],
            metadata=in_band(approval, approved=True),
        )
    assert refused.value.reason == "STEP_UP_REQUIRED"
    assert open_interaction(approval.task).pk == approval.pk


# --- the audit log is append-only -------------------------------------------------------------


@pytest.mark.parametrize("model", [AuditEvent, Receipt])
def test_the_audit_log_and_receipts_have_no_update_or_delete_path(agents, make_agent, model):
    deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    decide(approval, approved=True)
    row = model.objects.get()
    with pytest.raises(AppendOnlyError):
        model.objects.filter(pk=row.pk).update(created_at=row.created_at)
    with pytest.raises(AppendOnlyError):
        model.objects.filter(pk=row.pk).delete()
    with pytest.raises(AppendOnlyError):
        model.objects.bulk_update([row], ["created_at"])
    with pytest.raises(AppendOnlyError):
        row.save()
    with pytest.raises(AppendOnlyError):
        row.delete()
    request = RequestFactory().get("/")
    request.user = agents.a.admin
    agents.a.admin.is_superuser = True
    admin = site._registry[model]
    assert not admin.has_change_permission(request, row)
    assert not admin.has_delete_permission(request, row)
    assert not admin.has_add_permission(request)
    assert model.objects.filter(pk=row.pk).exists()


def test_deleting_a_task_leaves_its_audit_rows_as_they_were(agents, make_agent):
    deploy_agent(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    decide(approval, approved=False)
    task_id = approval.task.public_id
    event = AuditEvent.objects.get()
    before = (event.task_id, event.interaction_id, event.action)
    Task.objects.filter(pk=approval.task_id).delete()
    event = AuditEvent.objects.get(pk=event.pk)
    assert (event.task_id, event.interaction_id, event.action) == before
    assert Receipt.objects.get().task_public_id == task_id


def test_only_deleting_a_whole_tenant_removes_its_audit_rows(agents, make_agent):
    deploy_agent(make_agent, "approve")
    decide(held_approval(agents.a, "shipper"), approved=False)
    agents.b.tenant.delete()  # another tenant's deletion touches nothing of this one
    assert AuditEvent.objects.count() == Receipt.objects.count() == 1
    agents.a.tenant.delete()
    assert not AuditEvent.objects.exists() and not Receipt.objects.exists()
