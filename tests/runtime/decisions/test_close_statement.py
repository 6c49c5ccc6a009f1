"""A decision's close writes its claim of the interaction, the turn's status change, the
receipt and the audit row in one statement (runtime.decisions.interaction_state.interaction_close,
runtime.kernel.task_state.batched). The claim is still a claim: if the interaction is no
longer open when that statement runs, the decision is refused (AlreadyDecided), nothing it
wrote stays and nobody is told."""

import pytest

from runtime.decisions import interaction_state
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.kernel.errors import AlreadyDecided
from runtime.kernel.signals import interaction_changed
from runtime.kernel.task_models import AuditEvent, Task, TaskEvent, TaskState
from tests.core import decide, open_interaction, start

pytestmark = pytest.mark.django_db(transaction=True)


def held(agents) -> Interaction:
    task = start(agents.a, "deployer", "deploy build 2026.10.06-1 to staging")
    assert task.state == TaskState.AUTH_REQUIRED
    return open_interaction(task)


def test_a_decision_is_told_with_its_audit_rows_key(agents):
    interaction = held(agents)
    told = []

    def hear(sender, *, interaction, event, audit, **kwargs):
        told.append((event, audit.pk, AuditEvent.objects.filter(pk=audit.pk).exists()))

    interaction_changed.connect(hear, dispatch_uid="test-close-statement")
    try:
        decide(interaction, approved=True)
    finally:
        interaction_changed.disconnect(dispatch_uid="test-close-statement")

    assert [(event, bool(pk), there) for event, pk, there in told] == [("decided", True, True)]
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.ANSWERED
    assert Receipt.objects.filter(interaction_public_id=interaction.public_id).count() == 1


def test_a_claim_lost_before_the_statement_runs_leaves_nothing(agents, monkeypatch):
    interaction = held(agents)
    task = Task.objects.get(pk=interaction.task_id)
    events_before = TaskEvent.objects.filter(task=task).count()
    audit_before = AuditEvent.objects.filter(task=task).count()
    receipt = interaction_state.decision_receipt

    def raced(**kwargs):
        # Someone closes the interaction between the read under the task's lock and the
        # close's statement (a writer that took no lock: none should, and the claim holds).
        Interaction.objects.filter(pk=interaction.pk).update(
            state=Interaction.State.ANSWERED, answered_by="someone:else"
        )
        return receipt(**kwargs)

    monkeypatch.setattr(interaction_state, "decision_receipt", raced)
    told = []
    interaction_changed.connect(lambda **kw: told.append(kw), weak=False, dispatch_uid="t-lost")
    try:
        with pytest.raises(AlreadyDecided):
            decide(interaction, approved=True)
    finally:
        interaction_changed.disconnect(dispatch_uid="t-lost")

    assert told == []
    task.refresh_from_db()
    assert task.state == TaskState.AUTH_REQUIRED
    assert TaskEvent.objects.filter(task=task).count() == events_before
    assert AuditEvent.objects.filter(task=task).count() == audit_before
    assert not Receipt.objects.filter(interaction_public_id=interaction.public_id).exists()
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN  # the racing write was undone with it
