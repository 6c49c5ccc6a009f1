"""What an operator's decision over REST costs the database (a part of decision latency). The
count is pinned, so a change that adds a query to the answer fails here and has to say why;
the refusals keep their order although the body is read under the lock."""

import re
from http import HTTPStatus

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runtime.decisions.decision_models import Interaction, SigningKey
from runtime.decisions.signing import signing_key, signing_key_row_new

pytestmark = pytest.mark.django_db

SAVEPOINT = re.compile(r'^(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT) "')


def answer(client, public_id: str, body, token: str):
    return client.post(
        f"/api/v1/interactions/{public_id}/answer",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts PostgreSQL's statements (NOTIFY)"
)
def test_an_approval_over_rest_is_one_transaction_of_three_statements(agents, client):
    approval = agents.a.extra["make"].approval()
    token = agents.a.extra["operator_token"]
    # The token's last use is written at most once a minute: not on this request; and its
    # row is cached by this process for a second (tenants.tokens.token_cache).
    listed = client.get("/api/v1/interactions", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert listed.status_code == HTTPStatus.OK

    # The receipt signing key, read once per process (runtime.decisions.signing); the one the
    # migration made, unless a flush before this test took it.
    if not SigningKey.objects.filter(active=True).exists():
        signing_key_row_new().save()
    signing_key()

    with CaptureQueriesContext(connection) as captured:
        response = answer(client, approval.public_id, {"approved": True}, token)

    assert response.status_code == HTTPStatus.OK, response.content
    # The answer shows the call as the decision left it, without reading it again.
    assert response.json()["heldCall"]["arguments"]["build"] == "2026.10.06-1"
    sql = [q["sql"] for q in captured.captured_queries]
    statements = [s for s in sql if not SAVEPOINT.match(s)]
    assert sum(1 for s in sql if s.startswith("SAVEPOINT")) == 1, statements
    # In the decision's transaction: the task's lock, the interaction with the call it holds
    # (read once, under the lock: the body is checked against it there), then one
    # statement: the WORKING status event (which also queues its push deliveries: the task
    # has no config, so none), the receipt, the audit row, the claim of the interaction and
    # the task's row with its NOTIFY. (It was 13: the view read the interaction before the
    # service read it again, the held call was a read of its own, and the answer read it
    # again; then 10, with a read of the token's row on every request, now cached as the A2A
    # endpoint's; then 9, with a read of the task's push configs; then 8, with a NOTIFY of
    # its own; then 7, with the claim, the event, the receipt, the audit row and the task's
    # row apart.)
    assert len(statements) == 3, "\n".join(statements)
    written = statements[2]
    for table in ("runtime_taskevent", "runtime_receipt", "runtime_auditevent"):
        assert f'INSERT INTO "{table}"' in written, written
    assert '"m0" AS (UPDATE "runtime_interaction"' in written, written
    assert '"t" AS (UPDATE "runtime_task"' in written and "pg_notify(" in written, written
    assert sum(1 for s in statements if "pg_notify" in s) == 1, statements
    assert not any('"tenants_apitoken"' in s for s in statements), statements


def test_a_missing_interaction_is_404_before_its_body_is_read(agents, client):
    token = agents.a.extra["operator_token"]
    assert answer(client, "eff_nope", "not json", token).status_code == HTTPStatus.NOT_FOUND
    other = agents.b.extra["make"].approval()
    response = answer(client, other.public_id, {"approved": "maybe"}, token)
    assert response.status_code == HTTPStatus.NOT_FOUND
    other.refresh_from_db()
    assert other.state == Interaction.State.OPEN


def test_a_bad_body_is_400_even_once_the_interaction_is_decided(agents, client):
    approval = agents.a.extra["make"].approval()
    token = agents.a.extra["operator_token"]
    denied = answer(client, approval.public_id, {"approved": False}, token)
    assert denied.status_code == HTTPStatus.OK
    response = answer(client, approval.public_id, {"value": "x"}, token)
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert response.json()["field"] == "value"
