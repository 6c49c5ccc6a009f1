"""The audit chain: every audit row carries the hash of its tenant's previous one, linked
when its transaction commits; ``manage.py audit verify`` checks a tenant's chain in place
and names the first row that breaks it (removed, changed, the last ones cut off)."""

import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction

from runtime.kernel.audit import audit_record
from runtime.kernel.audit_chain import audit_chain_verify, chain_check, links_made
from runtime.kernel.audit_hash import content_digest, link_hash
from runtime.kernel.task_models import AuditChainHead, AuditEvent
from tenants.models import Tenant
from tests.core import Maker, decide


def write(tenant, n: int, action: str = "noted") -> None:
    for i in range(n):
        audit_record(tenant_id=tenant.pk, actor="user:a@acme.test", action=action, detail={"i": i})


def verify(slug: str) -> str:
    out = StringIO()
    call_command("audit", "verify", "--tenant", slug, stdout=out)
    return out.getvalue()


def sql(statement: str, params=()) -> None:
    # Around the ORM, which refuses (append-only): what someone with the database would do.
    with connection.cursor() as cur:
        cur.execute(statement, params)


@pytest.mark.django_db
def test_each_row_links_to_the_one_before_it_per_tenant(agents):
    interaction = Maker(agents.a).approval(build="b-1")
    decide(interaction, approved=True)
    write(agents.a.tenant, 3)
    write(agents.b.tenant, 2)
    links_made()
    rows = list(AuditEvent.objects.filter(tenant=agents.a.tenant).order_by("chain_seq"))
    assert [r.chain_seq for r in rows] == list(range(1, len(rows) + 1))
    assert rows[0].prev_hash == ""
    for before, row in zip(rows, rows[1:], strict=False):
        assert row.prev_hash == before.chain_hash
        assert row.chain_hash == link_hash(row.prev_hash, row.content_hash)
        assert row.content_hash == content_digest(row)
    head = AuditChainHead.objects.get(tenant=agents.a.tenant)
    assert (head.seq, head.hash) == (len(rows), rows[-1].chain_hash)
    # Tenant B's chain is its own, from its own start.
    theirs = AuditEvent.objects.filter(tenant=agents.b.tenant).order_by("chain_seq")
    assert [r.chain_seq for r in theirs][:1] == [1] and theirs[0].prev_hash == ""
    assert f"holds: {len(rows)} rows" in verify("acme")
    assert audit_chain_verify(tenant=agents.b.tenant).holds


@pytest.mark.django_db
def test_a_removed_row_is_named(agents):
    write(agents.a.tenant, 5)
    links_made()
    sql(
        "DELETE FROM runtime_auditevent WHERE tenant_id = %s AND chain_seq = 3",
        [agents.a.tenant.pk],
    )
    with pytest.raises(CommandError) as failed:
        verify("acme")
    assert "row 3 of the chain is missing (removed) before row 4 (noted" in str(failed.value)
    assert failed.value.returncode == 1


@pytest.mark.django_db
def test_a_changed_row_is_named_even_with_its_content_hash_rewritten(agents):
    write(agents.a.tenant, 4)
    links_made()
    sql(
        "UPDATE runtime_auditevent SET actor = 'user:mallory@acme.test' "
        "WHERE tenant_id = %s AND chain_seq = 2",
        [agents.a.tenant.pk],
    )
    check = audit_chain_verify(tenant=agents.a.tenant)
    assert (check.seq, check.rows) == (2, 1)
    assert "row 2 (noted by user:mallory@acme.test" in check.problem
    assert "was changed" in check.problem
    # Whoever rewrites the row's content hash too breaks the link instead.
    row = AuditEvent.objects.get(tenant=agents.a.tenant, chain_seq=2)
    sql(
        "UPDATE runtime_auditevent SET content_hash = %s WHERE id = %s",
        [content_digest(row), row.pk],
    )
    check = audit_chain_verify(tenant=agents.a.tenant)
    assert check.seq == 2 and "chain hash that is not its link" in check.problem


@pytest.mark.django_db
def test_rows_cut_from_the_end_are_found_by_the_head(agents):
    write(agents.a.tenant, 3)
    links_made()
    sql(
        "DELETE FROM runtime_auditevent WHERE tenant_id = %s AND chain_seq = 3",
        [agents.a.tenant.pk],
    )
    check = audit_chain_verify(tenant=agents.a.tenant)
    assert check.seq == 3 and "the last rows were removed" in check.problem


def test_a_record_list_is_checked_the_same_way_offline():
    assert chain_check([]).holds
    assert "not linked" in chain_check([{"seq": None, "action": "x"}]).problem


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_of_one_tenant_make_one_chain_and_never_deadlock(agents):
    """Two transactions of one tenant: the first writes its audit row and then waits for a
    row the second holds; the second, holding it, writes its own audit row and commits.
    Were the chain locked from the insert to the commit, the second would wait for the
    first and the first for the second (PostgreSQL would abort one as a deadlock)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks and the deferred link are PostgreSQL's")
    tenant = agents.a.tenant
    second_locked, first_wrote = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first():
        try:
            second_locked.wait(30)
            with transaction.atomic():
                write(tenant, 1, action="first")
                first_wrote.set()
                Tenant.objects.select_for_update().get(pk=tenant.pk)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
            first_wrote.set()
        finally:
            connections.close_all()

    def second():
        try:
            with transaction.atomic():
                Tenant.objects.select_for_update().get(pk=tenant.pk)
                second_locked.set()
                first_wrote.wait(30)
                write(tenant, 1, action="second")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            second_locked.set()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    rows = AuditEvent.objects.filter(tenant=tenant, action__in=["first", "second"])
    # In the order they committed: the second first.
    assert [r.action for r in rows.order_by("chain_seq")] == ["second", "first"]
    assert audit_chain_verify(tenant=tenant).holds
