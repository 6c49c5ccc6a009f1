"""An install set up from a shell (tokens, tenants, members) and the banner
again on demand (countersign_info)."""

import re
from io import StringIO

import pytest
from django.core import mail
from django.core.management import CommandError, call_command

from tenants.models import ApiToken, Membership, Tenant, User
from tenants.tokens import TokenError, authenticate_bearer

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def acme():
    return Tenant.objects.create(slug="acme", name="Acme")


def test_tokens_create_prints_the_plaintext_once_alone_on_stdout(acme):
    out, err = run("tokens", "create", "--tenant", "acme", "--subject", "partner:globex")
    plaintext = out.strip()
    identity = authenticate_bearer(f"Bearer {plaintext}", kind="partner")
    assert (identity.tenant, identity.subject) == (acme, "partner:globex")
    assert identity.token.prefix in err and plaintext not in err
    listing, _ = run("tokens", "list", "--tenant", "acme")
    assert identity.token.prefix in listing and plaintext not in listing
    assert "partner:globex" in listing and "active" in listing


def test_tokens_create_an_operator_token_for_some_agents_that_expires(acme):
    out, _ = run(
        "tokens", "create", "--tenant", "acme", "--subject", "program:bot",
        "--kind", "operator", "--agents", "deployer, coder", "--expires-days", "7",
    )  # fmt: skip
    identity = authenticate_bearer(f"Bearer {out.strip()}", kind="operator")
    assert identity.token.agent_slugs == ["deployer", "coder"]
    assert not identity.token.all_agents and identity.token.expires_at is not None
    with pytest.raises(TokenError, match="operator token"):
        authenticate_bearer(f"Bearer {out.strip()}", kind="partner")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "nope", "--subject", "partner:x"], "No tenant 'nope'"),
        (["--tenant", "acme", "--subject", "anonymous:x"], "subject: anonymous"),
        # The system's own subjects: no token acts as one.
        (["--tenant", "acme", "--subject", "system:expiry"], "reserved for the system"),
        (["--tenant", "acme", "--subject", "rule:rul_1"], "reserved for the system"),
        # ... in any case, after trimming, in any Unicode form that folds to one.
        (["--tenant", "acme", "--subject", "System:expiry"], "reserved for the system"),
        (["--tenant", "acme", "--subject", " RULE:rul_1 "], "reserved for the system"),
        (["--tenant", "acme", "--subject", "ｓｙｓｔｅｍ:expiry"], "reserved for the system"),
        (["--tenant", "acme", "--subject", "Anonymous"], "subject: anonymous"),
        (["--tenant", "acme", "--subject", "partner:x", "--expires-days", "0"], "from 1 to 3650"),
        # Once a traceback (OverflowError): a date no calendar has.
        (["--tenant", "acme", "--subject", "partner:x", "--expires-days", "99999999999"], "from 1"),
        (["--tenant", "acme", "--subject", "partner:x", "--expires-days", "3000000"], "from 1"),
        # A line break would forge log lines, the audit's and receipts' lines too.
        (["--tenant", "acme", "--subject", "partner:x\nFORGED"], r"subject: must not contain"),
        (["--tenant", "acme", "--subject", "partner:\x1b[31mx"], r"subject: must not contain"),
        (["--tenant", "acme", "--subject", "partner:x", "--name", "a\u2028b"], r"name: must not"),
        (["--tenant", "acme", "--subject", "user:" + "a" * 300], "at most 200 characters"),
    ],
)
def test_tokens_create_refuses_bad_input_and_stores_nothing(acme, args, message):
    with pytest.raises(CommandError, match=message):
        run("tokens", "create", *args)
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("form", ["prefix", "plaintext", "id"])
def test_tokens_revoke_by_prefix_plaintext_or_id(acme, form):
    out, _ = run("tokens", "create", "--tenant", "acme", "--subject", "partner:x")
    token = ApiToken.objects.get()
    key = {"prefix": token.prefix, "plaintext": out.strip(), "id": str(token.public_id)}[form]
    revoked, _ = run("tokens", "revoke", key)
    assert f"Revoked {token.prefix}" in revoked
    with pytest.raises(TokenError, match="revoked"):
        authenticate_bearer(f"Bearer {out.strip()}")
    again, _ = run("tokens", "revoke", key)
    assert "already revoked" in again
    assert token.prefix not in run("tokens", "list")[0]
    assert "revoked" in run("tokens", "list", "--all")[0]


def test_tokens_revoke_of_an_unknown_token_or_in_another_tenant_is_an_error(acme):
    Tenant.objects.create(slug="other", name="Other")
    run("tokens", "create", "--tenant", "acme", "--subject", "partner:x")
    token = ApiToken.objects.get()
    with pytest.raises(CommandError, match="No token"):
        run("tokens", "revoke", "ZZZZZZZZZZZZ")
    with pytest.raises(CommandError, match="No token"):
        run("tokens", "revoke", token.prefix, "--tenant", "other")
    token.refresh_from_db()
    assert token.revoked_at is None


def test_tenants_create_and_list():
    out, _ = run("tenants", "create", "globex", "--name", "Globex Corp")
    assert "Created tenant globex" in out
    assert Tenant.objects.get(slug="globex").name == "Globex Corp"
    assert "Globex Corp" in run("tenants", "list")[0]
    with pytest.raises(CommandError, match="exists already"):
        run("tenants", "create", "globex")
    with pytest.raises(CommandError, match="slug"):
        run("tenants", "create", "not a slug!")
    assert Tenant.objects.count() == 1


def test_members_add_gives_a_role_and_no_usable_password(acme):
    out, _ = run("members", "add", "Alice@Acme.test", "--tenant", "acme", "--role", "viewer")
    user = User.objects.get(email="alice@acme.test")
    assert "Added alice@acme.test as viewer in acme" in out
    assert not user.has_usable_password() and not user.is_staff
    assert Membership.objects.get(user=user, tenant=acme).role == "viewer"
    run("members", "add", "alice@acme.test", "--tenant", "acme", "--role", "admin", "--staff")
    user.refresh_from_db()
    assert user.is_staff and Membership.objects.get(user=user).role == "admin"
    assert "alice@acme.test" in run("members", "list", "--tenant", "acme")[0]
    assert not mail.outbox


def test_members_invite_mails_a_link_to_set_a_password(acme, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.ALLOWED_HOSTS = ["cs.acme.test"]
    out, _ = run(
        "members", "invite", "bob@acme.test", "--tenant", "acme",
        "--base-url", "https://cs.acme.test",
    )  # fmt: skip
    assert "Sent an invitation to bob@acme.test" in out
    [message] = mail.outbox
    assert message.to == ["bob@acme.test"]
    assert re.search(r"https://cs\.acme\.test/accounts/invitation/\S+/", message.body)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["not-an-address", "--tenant", "acme"], "not an e-mail address"),
        (["carol@acme.test", "--tenant", "nope"], "No tenant 'nope'"),
        (["carol@acme.test", "--tenant", "acme", "--base-url", "https://evil.test"], "ALLOWED"),
        (["carol@acme.test", "--tenant", "acme", "--base-url", "cs.acme.test"], "http"),
        (["a" * 300 + "@acme.test", "--tenant", "acme"], "at most 254 characters"),
        (
            ["carol@acme.test", "--tenant", "acme", "--base-url", "https://cs.acme.test"]
            + ["--by", "b" * 300 + "@acme.test"],
            "no account",
        ),
    ],
)
def test_members_invite_refuses_bad_input_and_stores_nothing(acme, args, message, settings):
    settings.ALLOWED_HOSTS = ["cs.acme.test"]
    with pytest.raises(CommandError, match=message):
        run("members", "invite", *args)
    assert not User.objects.exists() and not Membership.objects.exists()


def test_countersign_info_prints_the_banner_with_working_export_lines(settings, monkeypatch):
    settings.DEBUG = True  # seed_demo's documented password, as under make run
    monkeypatch.setenv("PORT", "8123")
    out, _ = run("countersign_info")
    assert "Countersign is running at http://127.0.0.1:8123/" in out
    assert "export A2A_BASE=http://127.0.0.1:8123" in out
    assert 'scripts/a2a.sh code-reviewer reply "$TASK" main' in out
    # The demo tenant's admin, and platform staff for every tenant.
    assert "admin login:    admin@demo.test" in out and "the demo tenant's admin" in out
    assert "platform staff: platform@countersign.test" in out
    exports, _ = run("countersign_info", "--exports")
    values = dict(re.findall(r"^export (\w+)=(\S+)$", exports, flags=re.M))
    assert authenticate_bearer(f"Bearer {values['TOKEN']}", kind="partner").subject == (
        "partner:demo-client"
    )
    assert authenticate_bearer(f"Bearer {values['OPERATOR_TOKEN']}", kind="operator").subject == (
        "program:demo-operator"
    )


def test_a_token_with_the_longest_expiry_is_made(acme):
    run("tokens", "create", "--tenant", "acme", "--subject", "partner:x", "--expires-days", "3650")
    assert ApiToken.objects.get().expires_at is not None
