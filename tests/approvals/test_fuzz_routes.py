"""Every REST and page route that takes input, fed hostile input by hypothesis.

Whatever comes in (NUL, lone surrogates, bytes that are not UTF-8, huge and deeply nested
values, wrong types, NaN), the answer is never a 5xx, and nothing is decided by input that is
not a valid decision. Each example runs in a savepoint that is rolled back, so that every
example meets the same open interactions.
"""

import json
from contextlib import contextmanager
from http import HTTPStatus
from urllib.parse import quote, quote_from_bytes

import pytest
from django.db import transaction
from django.test import Client
from django.utils.http import url_has_allowed_host_and_scheme
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from approvals.forms import ANSWER_MAX, REASON_MAX, json_text_problem
from connections.models import App, Connection
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.task_models import AuditEvent
from tenants.models import ApiToken, User

pytestmark = pytest.mark.django_db

FUZZ = hsettings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

# Text that has broken storage or parsing before: NUL (PostgreSQL refuses it), lone
# surrogates (not valid Unicode; jsonb refuses them), text over every column's length.
NASTY = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "x" * (REASON_MAX + 1),
    "y" * (ANSWER_MAX + 1),
    "z" * 300_000,
    "NaN",
    "../../etc/passwd",
    "%00",
    "'; DROP TABLE runtime_task; --",
    "<script>alert(1)</script>",
    "\u202egnp.exe",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "approve",
    "answer",
    "happened",
]
hostile_text = st.one_of(
    st.sampled_from(NASTY),
    st.text(alphabet=st.characters(exclude_categories=()), max_size=40),
)
json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=8,
)
# Bodies that are no JSON a parser should survive naively.
RAW_BODIES = [
    b"",
    b"{",
    b"\xff\xfe\x00",
    b'{"approved": NaN}',
    b'{"approved": Infinity, "reason": -Infinity}',
    b'{"value": "\\u0000"}',
    b'{"value": "\\ud800"}',
    b'{"approved": true, "reason": "\\ud800"}',
    b'{"approved": true, "reason": "a\\u0000"}',
    b'{"approved": false, "reason": "\\udfff\\ud800"}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"value": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"value": "' + b"v" * 2_000_000 + b'"}',
    b'{"approved": true, "approved": "no"}',
]
answer_body = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "approved": st.one_of(st.booleans(), json_value),
            "reason": st.one_of(hostile_text, json_value),
            "value": json_value,
        },
    ).map(lambda body: json.dumps(body, allow_nan=True).encode()),
    json_value.map(lambda body: json.dumps(body, allow_nan=True).encode()),
    st.sampled_from(RAW_BODIES),
)


def encoded(text: str) -> str:
    """Percent-encode text as UTF-8, lone surrogates included (as the bytes a browser
    could not have sent, which Django decodes with replacement characters)."""
    return quote_from_bytes(text.encode("utf-8", "surrogatepass"), safe="")


hostile_bytes = st.binary(max_size=40).map(lambda b: quote_from_bytes(b, safe=""))
hostile_param = st.one_of(hostile_text.map(encoded), hostile_bytes)
query_string = st.lists(
    st.tuples(
        st.one_of(
            st.sampled_from(
                [
                    "state",
                    "kind",
                    "agent",
                    "limit",
                    "cursor",
                    "page",
                    "before",
                    "after",
                    "code",
                    "error",
                ]
            ),
            hostile_param,
        ),
        hostile_param,
    ),
    max_size=4,
).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
path_id = st.one_of(hostile_param, hostile_bytes).filter(lambda s: s not in ("", ".", ".."))


def form_body(fields: dict) -> str:
    return "&".join(f"{quote(k)}={encoded(v)}" for k, v in fields.items())


@contextmanager
def rolled_back():
    block = transaction.atomic()
    # The services open durable blocks (one transaction each), which Django lets nest only in
    # a TestCase's own blocks; this one stands in for the test's, as a savepoint per example.
    block._from_testcase = True
    with block:
        yield
        transaction.set_rollback(True)


def decoded(text: str) -> str:
    """What Django reads from a form field we sent (invalid UTF-8 becomes U+FFFD)."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def assert_no_5xx(response):
    assert response.status_code < 500, (response.status_code, response.content[:500])


def decision_state(interaction: Interaction) -> tuple:
    interaction.refresh_from_db()
    audited = AuditEvent.objects.filter(interaction=interaction).count()
    return interaction.state, interaction.answer, audited


def clean_text(value, max_length: int) -> bool:
    return isinstance(value, str) and json_text_problem(value, max_length=max_length) is None


# --- REST ------------------------------------------------------------------------------------


def rest_answer_valid(kind: str, body) -> bool:
    """A necessary condition for a REST body to decide an interaction of this kind."""
    if not isinstance(body, dict) or ("approved" in body and "value" in body):
        return False
    if "reason" in body and not clean_text(body["reason"], REASON_MAX):
        return False
    if kind == Interaction.Kind.APPROVAL:
        return isinstance(body.get("approved"), bool) and "value" not in body
    if "value" in body:
        return json_text_problem(body["value"], max_length=ANSWER_MAX) is None
    return isinstance(body.get("approved"), bool)


@pytest.fixture
def open_three(agents):
    make = agents.a.extra["make"]
    return {
        Interaction.Kind.APPROVAL: make.approval(),
        Interaction.Kind.QUESTION: make.question(),
        Interaction.Kind.CONNECTION: make.connection(),
    }


def test_rest_answers_with_hostile_bodies_never_5xx_nor_decide_when_invalid(agents, open_three):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agents.a.extra['operator_token']}")
    before = {kind: decision_state(i) for kind, i in open_three.items()}

    @FUZZ
    @given(kind=st.sampled_from(list(open_three)), raw=answer_body)
    def check(kind, raw):
        interaction = open_three[kind]
        with rolled_back():
            response = client.post(
                f"/api/v1/interactions/{interaction.public_id}/answer",
                raw,
                content_type="application/json",
            )
            assert_no_5xx(response)
            after = decision_state(interaction)
            if after == before[kind]:
                assert response.status_code >= 400, response.content[:500]
                return
            assert response.status_code == HTTPStatus.OK, response.content[:500]
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):
                body = None
            assert rest_answer_valid(kind, body), (kind, raw[:200], response.content[:300])

    check()
    # The rollbacks held: every interaction is still open.
    assert {kind: decision_state(i) for kind, i in open_three.items()} == before


def test_rest_reads_with_hostile_ids_and_filters_never_5xx(agents, open_three):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agents.a.extra['operator_token']}")
    real = [i.public_id for i in open_three.values()]

    @FUZZ
    @given(ident=st.one_of(path_id, st.sampled_from(real)), query=query_string)
    def check(ident, query):
        assert_no_5xx(client.get(f"/api/v1/interactions?{query}"))
        assert_no_5xx(client.get(f"/api/v1/interactions/{ident}?{query}"))

    check()


# --- pages: GET --------------------------------------------------------------------------------


def test_pages_with_hostile_ids_and_query_strings_never_5xx(agents, open_three):
    make = agents.a.extra["make"]
    effect = make.uncertain()
    task_id = open_three[Interaction.Kind.APPROVAL].task.public_id
    client = agents.a.client_for(agents.a.operator)
    lists = ["/inbox/", "/inbox/fragment", "/tasks/", "/audit/", "/connections/"]
    lists.append("/connections/oauth/callback")
    real = [*(i.public_id for i in open_three.values()), effect.public_id, task_id]

    @FUZZ
    @given(
        page=st.sampled_from(lists),
        ident=st.one_of(path_id, st.sampled_from(real)),
        other=path_id,
        query=query_string,
    )
    def check(page, ident, other, query):
        for path in (
            page,
            f"/inbox/{ident}/",
            f"/effects/{ident}/",
            f"/tasks/{ident}/",
            f"/tasks/{task_id}/artifacts/{other}",
            f"/tasks/{ident}/artifacts/{other}",
        ):
            assert_no_5xx(client.get(f"{path}?{query}"))

    check()


# --- pages: POST forms ---------------------------------------------------------------------------

DECISIONS = ["approve", "deny", "answer", "decline", "", "APPROVE"]


def page_decision_valid(interaction: Interaction, fields: dict) -> bool:
    """A necessary condition for a decision form to decide this interaction."""
    decision = fields.get("decision", "")
    reason = decoded(fields.get("reason", "")).strip()
    if interaction.kind == Interaction.Kind.APPROVAL:
        return decision in ("approve", "deny") and "\x00" not in reason
    if interaction.kind == Interaction.Kind.QUESTION:
        custom = decoded(fields.get("custom", "")).strip()
        choice = decoded(fields.get("choice", ""))
        choices = [str(c) for c in (interaction.request or {}).get("choices") or []]
        return decision == "answer" and (
            (custom and not choice and "\x00" not in custom and len(custom) <= ANSWER_MAX)
            or (choice in choices and not custom)
        )
    return decision == "decline"


def test_decision_forms_with_hostile_values_never_5xx_nor_decide_when_invalid(agents, open_three):
    client = agents.a.client_for(agents.a.operator)
    before = {kind: decision_state(i) for kind, i in open_three.items()}
    question = open_three[Interaction.Kind.QUESTION]
    choices = [str(c) for c in (question.request or {}).get("choices") or []]

    @FUZZ
    @given(
        kind=st.sampled_from(list(open_three)),
        fields=st.fixed_dictionaries(
            {},
            optional={
                "decision": st.one_of(st.sampled_from(DECISIONS), hostile_text),
                "reason": hostile_text,
                "choice": st.one_of(st.sampled_from(choices or ["x"]), hostile_text),
                "custom": hostile_text,
            },
        ),
    )
    def check(kind, fields):
        interaction = open_three[kind]
        with rolled_back():
            response = client.post(
                f"/inbox/{interaction.public_id}/",
                form_body(fields),
                content_type="application/x-www-form-urlencoded",
            )
            assert_no_5xx(response)
            after = decision_state(interaction)
            if after == before[kind]:
                assert response.status_code >= 400, response.status_code
                return
            assert response.status_code == HTTPStatus.FOUND
            assert page_decision_valid(interaction, fields), (kind, fields)

    check()
    assert {kind: decision_state(i) for kind, i in open_three.items()} == before


def test_effect_resolution_with_hostile_values_never_5xx_nor_resolves_when_invalid(agents):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)

    @FUZZ
    @given(
        fields=st.fixed_dictionaries(
            {},
            optional={
                "resolution": st.one_of(
                    st.sampled_from(["happened", "not_happened", "fail"]), hostile_text
                ),
                "result": st.one_of(
                    hostile_text,
                    json_value.map(lambda v: json.dumps(v, allow_nan=True)),
                    st.sampled_from(['"\\u0000"', '["\\ud800"]', "[" * 5000 + "]" * 5000]),
                ),
            },
        )
    )
    def check(fields):
        with rolled_back():
            response = client.post(
                f"/effects/{effect.public_id}/",
                form_body(fields),
                content_type="application/x-www-form-urlencoded",
            )
            assert_no_5xx(response)
            state = Effect.objects.get(pk=effect.pk).state
            if state == Effect.State.UNCERTAIN:
                assert response.status_code >= 400, response.status_code
                return
            assert response.status_code == HTTPStatus.FOUND
            assert fields.get("resolution") in ("happened", "not_happened", "fail")
            if fields["resolution"] == "happened":
                result = decoded(fields.get("result", "")).strip()
                assert result and "\x00" not in result

    check()
    assert Effect.objects.get(pk=effect.pk).state == Effect.State.UNCERTAIN


def test_connection_token_form_and_tenant_switch_with_hostile_values_never_5xx(agents):
    App.objects.create(slug="github", name="GitHub", method=App.Method.TOKEN)
    client = agents.a.client_for(agents.a.admin)

    @FUZZ
    @given(
        token=hostile_text,
        slug=st.sampled_from(["github", "nope", "a" * 300]),
        tenant=st.one_of(st.sampled_from(["acme", "globex", ""]), hostile_text),
        next_url=st.one_of(
            st.sampled_from(["/inbox/", "https://evil.example/", "//x"]), hostile_text
        ),
    )
    def check(token, slug, tenant, next_url):
        with rolled_back():
            response = client.post(
                f"/connections/{slug}/token",
                form_body({f"{slug}-token": token}),
                content_type="application/x-www-form-urlencoded",
            )
            assert_no_5xx(response)
            if Connection.objects.exists():
                stored = decoded(token).strip()
                assert response.status_code == HTTPStatus.FOUND
                assert stored and "\x00" not in stored
            assert_no_5xx(client.post(f"/connections/{slug}/disconnect"))
            switched = client.post(
                "/tenant/switch",
                form_body({"tenant": tenant, "next": next_url}),
                content_type="application/x-www-form-urlencoded",
            )
            assert_no_5xx(switched)
            if switched.status_code == HTTPStatus.FOUND:
                # Only a tenant the admin is in, and never away from this site.
                assert decoded(tenant) == "acme"
                assert url_has_allowed_host_and_scheme(switched["Location"], {"testserver"})

    check()


def test_admin_token_form_with_hostile_values_never_5xx_nor_mints_when_invalid(agents):
    admin = User.objects.create_superuser(email="root@example.test", password="x-long-password")
    client = Client()
    client.force_login(admin)
    tokens_before = ApiToken.objects.count()

    @FUZZ
    @given(
        fields=st.fixed_dictionaries(
            {
                "tenant": st.one_of(st.just(str(agents.a.tenant.pk)), hostile_text),
                "kind": st.one_of(st.sampled_from(["partner", "operator"]), hostile_text),
                "subject": st.one_of(st.just("partner:fuzz"), hostile_text),
                "name": st.one_of(st.just("fuzz"), hostile_text),
            },
            optional={
                "all_agents": st.sampled_from(["on", ""]),
                "agent_slugs": st.one_of(
                    json_value.map(lambda v: json.dumps(v, allow_nan=True)),
                    st.sampled_from(['["\\u0000"]', '["\\ud800"]', '["support"]', "[" * 3000]),
                    hostile_text,
                ),
                "expires_at_0": hostile_text,
                "expires_at_1": hostile_text,
            },
        )
    )
    def check(fields):
        with rolled_back():
            response = client.post(
                "/admin/tenants/apitoken/add/",
                form_body(fields),
                content_type="application/x-www-form-urlencoded",
            )
            assert_no_5xx(response)
            if ApiToken.objects.count() > tokens_before:
                assert response.status_code == HTTPStatus.OK  # the page that shows it once
                assert "\x00" not in decoded(fields["subject"])
                assert "\x00" not in decoded(fields["name"])

    check()
    assert ApiToken.objects.count() == tokens_before
