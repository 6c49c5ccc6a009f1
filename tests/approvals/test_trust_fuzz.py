"""Hostile input on the routes of who-may-decide and standing rules (as on every route):
"approve and allow similar calls" on the page and over REST, and revoking rules. Never a
5xx, and nothing is approved or made by input that is not valid."""

import json

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from runtime.decisions.decision_models import Interaction, StandingRule
from tests.approvals.test_fuzz_routes import (
    FUZZ,
    assert_no_5xx,
    encoded,
    form_body,
    hostile_text,
    json_value,
    path_id,
    rolled_back,
)

pytestmark = pytest.mark.django_db

FIELDS = ["build", "environment", "durationSeconds", "nope", "\x00"]


@pytest.fixture
def approval(agents) -> Interaction:
    return agents.a.extra["make"].approval(build="rel-1")


def test_allow_similar_form_with_hostile_values_never_5xx(agents, approval):
    client = agents.a.client_for(agents.a.operator)
    url = f"/inbox/{approval.public_id}/"

    @FUZZ
    @given(
        duration=st.one_of(st.sampled_from(["1h", "30d", "forever", ""]), hostile_text),
        ops=st.dictionaries(
            st.sampled_from(FIELDS),
            st.one_of(st.sampled_from(["equals", "in", "prefix", ""]), hostile_text),
            max_size=3,
        ),
        values=st.dictionaries(st.sampled_from(FIELDS), hostile_text, max_size=3),
    )
    def check(duration, ops, values):
        fields = {"decision": "approve_rule", "rule-duration": duration, "rule-caller_only": "on"}
        fields.update({f"rule-op_{k}": v for k, v in ops.items()})
        fields.update({f"rule-value_{k}": v for k, v in values.items()})
        with rolled_back():
            response = client.post(
                url, form_body(fields), content_type="application/x-www-form-urlencoded"
            )
            assert_no_5xx(response)
            approval.refresh_from_db()
            if response.status_code != 302:
                # Refused: nothing approved, no rule made.
                assert approval.state == "open" and not StandingRule.objects.exists()

    check()


def test_rest_allow_similar_with_hostile_bodies_never_5xx(agents, approval):
    token = agents.a.extra["operator_token"]
    url = f"/api/v1/interactions/{approval.public_id}/answer"

    @FUZZ
    @given(
        allow=st.one_of(
            json_value,
            st.fixed_dictionaries(
                {},
                optional={
                    "duration": st.one_of(st.sampled_from(["1h", "forever"]), json_value),
                    "callerOnly": json_value,
                    "conditions": st.one_of(
                        json_value,
                        st.lists(
                            st.fixed_dictionaries(
                                {
                                    "field": st.one_of(st.sampled_from(FIELDS), json_value),
                                    "op": st.one_of(
                                        st.sampled_from(["equals", "in", "prefix"]), json_value
                                    ),
                                    "value": json_value,
                                }
                            ),
                            max_size=3,
                        ),
                    ),
                },
            ),
        )
    )
    def check(allow):
        body = json.dumps({"approved": True, "allowSimilar": allow}, allow_nan=True)
        with rolled_back():
            response = Client().post(
                url,
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )
            assert_no_5xx(response)
            approval.refresh_from_db()
            if response.status_code != 200:
                assert approval.state == "open" and not StandingRule.objects.exists()

    check()


def test_revoking_hostile_rule_ids_never_5xx(agents):
    client = agents.a.client_for(agents.a.operator)
    token = agents.a.extra["operator_token"]

    @FUZZ
    @given(ident=path_id)
    def check(ident):
        assert_no_5xx(client.post(f"/rules/{ident}/revoke"))
        assert_no_5xx(
            Client().post(f"/api/v1/rules/{ident}/revoke", HTTP_AUTHORIZATION=f"Bearer {token}")
        )
        assert_no_5xx(client.get(f"/rules/?q={encoded(ident)}"))

    check()


@pytest.mark.parametrize("value", ["a\x00b", "\ud800", ["x", "\x00"]])
def test_condition_values_postgres_cannot_store_are_refused(agents, approval, value):
    op = "in" if isinstance(value, list) else "prefix"
    body = json.dumps(
        {
            "approved": True,
            "allowSimilar": {"conditions": [{"field": "build", "op": op, "value": value}]},
        }
    )
    response = Client().post(
        f"/api/v1/interactions/{approval.public_id}/answer",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agents.a.extra['operator_token']}",
    )
    assert response.status_code == 400
    approval.refresh_from_db()
    assert approval.state == "open" and not StandingRule.objects.exists()
