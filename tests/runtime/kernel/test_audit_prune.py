"""Audit retention: rows past a tenant's retention are removed by the pruner only, which
records where the chain now starts, so that ``audit verify`` still holds; every other
delete is refused as before, and a chain broken where it would be pruned is not pruned."""

import re
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from connections.models import App, ConnectionAuditEvent
from runtime.kernel.audit_chain import audit_chain_verify, links_made
from runtime.kernel.audit_hash import content_digest, link_hash
from runtime.kernel.audit_prune import AuditPruneRefused, audit_prune, audit_prune_due
from runtime.kernel.store import audit_chain_advance
from runtime.kernel.task_models import AuditEvent
from tenants.appendonly import AppendOnlyError, retention_pruning
from tenants.models import Tenant

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[3]


def write_at(tenant, when, n: int, action: str = "noted") -> None:
    """Rows written at ``when``, linked as runtime.kernel.audit links them."""
    for i in range(n):
        event = AuditEvent(
            tenant_id=tenant.pk,
            actor="user:a@acme.test",
            action=action,
            detail={"i": i},
            created_at=when,
        )
        event.content_hash = content_digest(event)
        if connection.vendor != "postgresql":
            event.chain_seq, event.prev_hash, event.chain_hash = audit_chain_advance(
                tenant_id=tenant.pk, content_hash=event.content_hash, link=link_hash
            )
        event.save()
    links_made()


def verify(slug: str) -> str:
    out = StringIO()
    call_command("audit", "verify", "--tenant", slug, stdout=out)
    return out.getvalue()


def retention(tenant, days) -> Tenant:
    Tenant.objects.filter(pk=tenant.pk).update(audit_retention_days=days)
    return Tenant.objects.get(pk=tenant.pk)


def test_pruning_removes_the_old_rows_and_the_chain_still_verifies(world):
    now = timezone.now()
    tenant = retention(world.a.tenant, 180)
    write_at(tenant, now - timedelta(days=400), 3)
    write_at(tenant, now - timedelta(days=10), 2)
    write_at(world.b.tenant, now - timedelta(days=400), 2)
    third = AuditEvent.objects.get(tenant=tenant, chain_seq=3)

    assert audit_prune(tenant=tenant, now=now) == 3
    links_made()

    assert not AuditEvent.objects.filter(tenant=tenant, chain_seq__lte=3).exists()
    tenant.refresh_from_db()
    assert (tenant.audit_pruned_seq, tenant.audit_pruned_hash) == (3, third.chain_hash)
    pruned = AuditEvent.objects.get(tenant=tenant, action="audit.pruned")
    assert pruned.actor == "system:retention" and pruned.chain_seq == 6
    assert pruned.detail["rows"] == 3 and pruned.detail["through"] == 3
    assert pruned.detail["checkpoint"] == third.chain_hash
    assert pruned.detail["retentionDays"] == 180
    said = verify("acme")
    assert "holds: 3 rows from row 4 (the rows before it were pruned)" in said
    # Rows written after the prune link on; a second prune finds nothing more to remove.
    write_at(tenant, now, 2)
    assert audit_prune(tenant=tenant, now=now) == 0
    assert audit_chain_verify(tenant=tenant).holds
    # The other tenant sets no retention: its rows stay.
    assert AuditEvent.objects.filter(tenant=world.b.tenant).count() == 2
    assert audit_chain_verify(tenant=world.b.tenant).holds


def test_a_row_removed_after_the_checkpoint_is_still_found(world):
    now = timezone.now()
    tenant = retention(world.a.tenant, 180)
    write_at(tenant, now - timedelta(days=400), 2)
    write_at(tenant, now, 3)
    audit_prune(tenant=tenant, now=now)
    links_made()
    with connection.cursor() as cur:
        cur.execute(
            "DELETE FROM runtime_auditevent WHERE tenant_id = %s AND chain_seq = 3", [tenant.pk]
        )
    check = audit_chain_verify(tenant=tenant)
    assert not check.holds and "row 3 of the chain is missing" in check.problem


def test_the_pruner_never_goes_past_a_newer_row_linked_before_an_older_one(world):
    now = timezone.now()
    tenant = retention(world.a.tenant, 180)
    write_at(tenant, now - timedelta(days=400), 1)
    write_at(tenant, now - timedelta(days=5), 1)
    write_at(tenant, now - timedelta(days=300), 1)  # linked after a row that must stay
    assert audit_prune(tenant=tenant, now=now) == 1
    assert AuditEvent.objects.filter(tenant=tenant, chain_seq=3).exists()
    assert audit_chain_verify(tenant=tenant).holds


def test_a_delete_outside_the_pruner_is_refused(world):
    now = timezone.now()
    write_at(world.a.tenant, now - timedelta(days=400), 2)
    rows = AuditEvent.objects.filter(tenant=world.a.tenant)
    with pytest.raises(AppendOnlyError):
        rows.delete()
    with pytest.raises(AppendOnlyError):
        rows.first().delete()
    app = App.objects.create(slug="tracker", name="Tracker")
    ConnectionAuditEvent.objects.create(
        tenant=world.a.tenant, app=app, action="connected", actor="user:a@acme.test"
    )
    with pytest.raises(AppendOnlyError):
        ConnectionAuditEvent.objects.filter(tenant=world.a.tenant).delete()
    with retention_pruning(), pytest.raises(AppendOnlyError):
        rows.update(actor="user:mallory@acme.test")  # the pruner's path deletes, never edits
    with pytest.raises(AppendOnlyError):
        rows.delete()  # and only inside its block
    assert rows.count() == 2


def test_only_the_pruner_uses_the_sanctioned_path():
    users = sorted(
        str(path.relative_to(ROOT))
        for app in ("config", "tenants", "connections", "runtime", "approvals", "notifications")
        for path in (ROOT / app).rglob("*.py")
        if re.search(r"\bretention_pruning\b", path.read_text())
    )
    assert users == ["runtime/kernel/audit_prune.py", "tenants/appendonly.py"]


def test_a_chain_broken_where_it_would_be_pruned_is_not_pruned(world):
    now = timezone.now()
    tenant = retention(world.a.tenant, 180)
    write_at(tenant, now - timedelta(days=400), 3)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runtime_auditevent SET actor = 'user:mallory@acme.test' "
            "WHERE tenant_id = %s AND chain_seq = 2",
            [tenant.pk],
        )
    with pytest.raises(AuditPruneRefused, match="row 2 .* was changed"):
        audit_prune(tenant=tenant, now=now)
    assert AuditEvent.objects.filter(tenant=tenant).count() == 3
    assert Tenant.objects.get(pk=tenant.pk).audit_pruned_seq == 0
    # The daily run logs it and goes on with the other tenants.
    other = retention(world.b.tenant, 200)
    write_at(other, now - timedelta(days=400), 2)
    assert audit_prune_due(now=now) == 2


def test_the_command_prunes_and_a_tenant_without_retention_keeps_everything(world):
    now = timezone.now()
    write_at(world.a.tenant, now - timedelta(days=4000), 2)
    out = StringIO()
    call_command("audit", "prune", "--tenant", "acme", stdout=out)
    assert "keeps its audit for ever" in out.getvalue()
    assert AuditEvent.objects.filter(tenant=world.a.tenant).count() == 2
    retention(world.a.tenant, 365)
    out = StringIO()
    call_command("audit", "prune", stdout=out)
    assert "acme: pruned 2 audit rows older than 365 days" in out.getvalue()
    assert "holds: 1 rows from row 3" in verify("acme")
