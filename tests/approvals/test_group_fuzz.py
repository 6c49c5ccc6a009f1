"""An approval group's routes fed hostile input (as tests/approvals/test_fuzz_routes.py feeds
the others): the REST group's read and answer, and the group's form on a call's page. Never
a 5xx, and nothing is decided by input that is not a valid decision."""

import json

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from runtime.decisions.decision_models import Effect, Interaction
from tests.approvals.test_fuzz_routes import (
    FUZZ,
    RAW_BODIES,
    assert_no_5xx,
    encoded,
    hostile_text,
    json_value,
    path_id,
    rolled_back,
)
from tests.groups import held_group, model_stub, planner

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm(settings, monkeypatch):
    with model_stub(settings, monkeypatch) as stub:
        yield stub


@pytest.fixture
def group(agents, llm):
    planner(agents.a.tenant)
    task, calls = held_group(agents.a, llm)
    digests = dict(Effect.objects.filter(task=task).values_list("public_id", "arguments_hash"))
    return calls, digests


def states(calls) -> list[str]:
    return [Interaction.objects.get(pk=c.pk).state for c in calls]


def test_the_rest_group_answer_with_hostile_bodies_never_5xx(agents, group):
    calls, digests = group
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agents.a.extra['operator_token']}")
    path = f"/api/v1/groups/{calls[0].group_id}/answer"
    hashes = st.dictionaries(
        st.one_of(hostile_text, st.sampled_from(list(digests))),
        st.one_of(json_value, st.sampled_from(list(digests.values()))),
        max_size=3,
    )
    body = st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "approved": st.one_of(st.booleans(), json_value),
                "reason": st.one_of(hostile_text, json_value),
                "argumentsHashes": st.one_of(hashes, json_value),
            },
        ).map(lambda b: json.dumps(b, allow_nan=True).encode()),
        st.sampled_from(RAW_BODIES),
    )

    @FUZZ
    @given(raw=body)
    def check(raw):
        with rolled_back():
            response = client.post(path, raw, content_type="application/json")
            assert_no_5xx(response)
            if response.status_code != 200:
                assert states(calls) == ["open", "open"], response.content[:300]

    check()
    assert states(calls) == ["open", "open"]


def test_a_lone_surrogate_in_an_arguments_hashes_id_is_a_400_that_names_it(agents, group):
    calls, digests = group
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agents.a.extra['operator_token']}")
    path = f"/api/v1/groups/{calls[0].group_id}/answer"
    lone = "x\udfffy"  # valid JSON ("x\\udfffy"), and no text UTF-8 (or PostgreSQL) takes
    for hashes in ({lone: -0.0}, {**digests, lone: "0" * 64}):
        body = json.dumps({"approved": True, "argumentsHashes": hashes}).encode()
        response = client.post(path, body, content_type="application/json")
        assert response.status_code == 400, response.content[:300]
        answer = response.json()
        assert answer["field"].startswith("argumentsHashes"), answer
        assert "\\udfff" in json.dumps(answer["errors"]), answer
    assert states(calls) == ["open", "open"]


def test_the_rest_group_read_with_hostile_ids_never_5xx(agents, group):
    calls, _ = group
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agents.a.extra['operator_token']}")

    @FUZZ
    @given(ident=st.one_of(path_id, st.just(calls[0].group_id)))
    def check(ident):
        assert_no_5xx(client.get(f"/api/v1/groups/{ident}"))
        assert_no_5xx(
            client.post(f"/api/v1/groups/{ident}/answer", b"{}", content_type="application/json")
        )

    check()


def test_the_pages_group_form_with_hostile_fields_never_5xx(agents, group):
    calls, digests = group
    client = agents.a.client_for(agents.a.operator)
    path = f"/inbox/{calls[0].public_id}/"
    shown = st.dictionaries(
        st.one_of(hostile_text, st.sampled_from(list(digests))).map(lambda k: f"shown-{k}"),
        st.one_of(hostile_text, st.sampled_from(list(digests.values()))),
        max_size=3,
    )

    @FUZZ
    @given(
        decision=st.one_of(st.sampled_from(["approve_group", "deny_group"]), hostile_text),
        reason=hostile_text,
        fields=shown,
    )
    def check(decision, reason, fields):
        with rolled_back():
            response = client.post(
                path,
                "&".join(
                    f"{encoded(k)}={encoded(v)}"
                    for k, v in {"decision": decision, "reason": reason, **fields}.items()
                ),
                content_type="application/x-www-form-urlencoded",
            )
            assert_no_5xx(response)
            if response.status_code != 302:
                assert states(calls) == ["open", "open"]

    check()
    assert states(calls) == ["open", "open"]
