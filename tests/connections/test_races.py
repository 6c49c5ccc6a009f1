import threading

import pytest
from django.conf import settings
from django.db import connection as db_connection

from connections.models import Connection, ConnectionAuditEvent
from connections.services import connection_connect_token, connection_disconnect

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
        reason="needs PostgreSQL's row locks; SQLite serialises writers anyway",
    ),
]


def run_together(*calls):
    barrier = threading.Barrier(len(calls))
    results, errors = [None] * len(calls), []

    def run(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:  # collected and asserted on below
            errors.append(exc)
        finally:
            db_connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def test_two_operators_connecting_at_once_make_one_connection(world, github):
    tenant = world.a.tenant
    _, errors = run_together(
        lambda: connection_connect_token(
            tenant=tenant, app=github, token="ghp_one", by=world.a.operator
        ),
        lambda: connection_connect_token(
            tenant=tenant, app=github, token="ghp_two", by=world.a.admin
        ),
    )
    assert errors == []
    assert Connection.objects.filter(tenant=tenant, app=github).count() == 1
    assert ConnectionAuditEvent.objects.filter(action="connected").count() == 2


def test_two_operators_disconnecting_at_once_write_one_audit_row(world, github):
    tenant = world.a.tenant
    connection_connect_token(tenant=tenant, app=github, token="ghp_one", by=world.a.operator)
    results, errors = run_together(
        lambda: connection_disconnect(tenant=tenant, app=github, by=world.a.operator),
        lambda: connection_disconnect(tenant=tenant, app=github, by=world.a.admin),
    )
    assert errors == []
    assert sorted(results) == [False, True]
    assert ConnectionAuditEvent.objects.filter(action="disconnected").count() == 1
