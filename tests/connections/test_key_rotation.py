"""CONNECTIONS_ENCRYPTION_KEY rotates (MultiFernet): with a new key first,
old secrets stay readable; `rotate_secrets` re-encrypts every stored one under the new key;
after it, the new key alone reads them all."""

import os
import subprocess
import sys
from io import StringIO

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.test import Client

from connections.crypto import InvalidToken, secret_decrypt, secret_is_current
from connections.models import Connection
from connections.selectors import connection_secret_for
from connections.services import connection_connect_token
from runtime.agents.agent_models import Credential
from runtime.decisions.decision_models import SigningKey
from runtime.decisions.signing import signing_cache_clear
from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.push.push_selectors import push_settings_for
from runtime.llm.credentials import CredentialMissing, credential_set, credential_value

OLD, NEW, STRANGER = "the-old-key-" + "o" * 40, "the-new-key-" + "n" * 40, "s" * 50
GITHUB_TOKEN = "ghp_" + "a" * 36
MODEL_KEY = "sk-test-" + "k" * 30


def stored() -> list[str]:
    """Every ciphertext at rest, in the five fields that hold one."""
    values = []
    for row in Connection.objects.values_list("access_token_encrypted", "refresh_token_encrypted"):
        values.extend(row)
    for row in PushConfig.objects.values_list("token", "auth_credentials"):
        values.extend(row)
    values.extend(Credential.objects.values_list("secret_encrypted", flat=True))
    for row in PushSettings.objects.values_list("secret_encrypted", "previous_secret_encrypted"):
        values.extend(row)
    return [value for value in values if value]


def readable(side) -> tuple:
    config = PushConfig.objects.get(tenant=side.tenant)
    return (
        connection_secret_for(tenant=side.tenant, app_slug="github"),
        config.token_plaintext(),
        secret_decrypt(config.auth_credentials),
        credential_value(tenant=side.tenant, name="OPENAI_API_KEY"),
        push_settings_for(tenant=side.tenant).secret,
    )


def expected(side) -> tuple:
    return (GITHUB_TOKEN, "push-tok", "push-cred", MODEL_KEY, side.extra["push_secret"])


@pytest.fixture
def secrets_at_rest(transactional_db, agents, github, settings):
    """A connection, a push config with a token and credentials, and a model credential,
    all stored under OLD. (Committed: the A2A view closes its connection when it is done,
    which a test's open transaction would not survive.)"""
    settings.CONNECTIONS_ENCRYPTION_KEY = [OLD]
    # The receipt signing key the migrations made is encrypted under the default key, which
    # none of this test's keys opens; it is gone after the first transactional test's flush,
    # so the counts below held only after another test. This test is about the five secrets.
    SigningKey.objects.all().delete()
    signing_cache_clear()
    side = agents.a
    connection_connect_token(tenant=side.tenant, app=github, token=GITHUB_TOKEN, by=side.operator)
    credential_set(tenant=side.tenant, name="OPENAI_API_KEY", secret=MODEL_KEY)
    push = push_settings_for(tenant=side.tenant)
    push.allowed_hosts = "*.acme.test"
    push.save(update_fields=["allowed_hosts"])
    side.extra["push_secret"] = push.secret
    assert push.secret.startswith("whsec_")
    message = {"messageId": "rot-1", "role": "ROLE_USER", "parts": [{"text": "How do I log in?"}]}
    configuration = {
        "returnImmediately": True,
        "taskPushNotificationConfig": {
            "url": "https://hooks.acme.test/a2a",
            "token": "push-tok",
            "authentication": {"scheme": "Bearer", "credentials": "push-cred"},
        },
    }
    response = Client().post(
        f"/a2a/{side.tenant.slug}/support",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": message, "configuration": configuration},
        },
        content_type="application/json",
        headers={"Authorization": f"Bearer {side.token}", "A2A-Version": "1.0"},
    )
    assert "result" in response.json(), response.content
    assert len(stored()) == 5 and readable(side) == expected(side)
    return side


def rotate(*args) -> str:
    out = StringIO()
    call_command("rotate_secrets", *args, stdout=out)
    return out.getvalue()


def test_old_secrets_stay_readable_with_a_new_key_first(secrets_at_rest, settings):
    settings.CONNECTIONS_ENCRYPTION_KEY = [NEW, OLD]
    assert readable(secrets_at_rest) == expected(secrets_at_rest)
    assert not any(secret_is_current(value) for value in stored())
    with pytest.raises(CommandError) as raised:
        rotate("--check")
    assert str(raised.value) == (
        "5 secret(s) still need a key other than the first of CONNECTIONS_ENCRYPTION_KEY "
        "(5 with key 2 of 2); run rotate_secrets first."
    )


def test_the_check_names_keys_by_their_place_not_their_age(secrets_at_rest, settings):
    """After a rotation to NEW, the keys put back the wrong way round: what the secrets need
    is the newer key, second in the list. The check used to call it "an older key"."""
    settings.CONNECTIONS_ENCRYPTION_KEY = [NEW, OLD]
    rotate()
    settings.CONNECTIONS_ENCRYPTION_KEY = [OLD, NEW]
    with pytest.raises(CommandError) as raised:
        rotate("--check")
    assert "older" not in str(raised.value)
    assert "(5 with key 2 of 2)" in str(raised.value)
    settings.CONNECTIONS_ENCRYPTION_KEY = [STRANGER, OLD, NEW]
    with pytest.raises(CommandError, match=r"\(5 with key 3 of 3\)"):
        rotate("--check")
    settings.CONNECTIONS_ENCRYPTION_KEY = [STRANGER]
    with pytest.raises(CommandError, match=r"^5 secret\(s\) open with none of the configured keys"):
        rotate("--check")


def test_rotate_secrets_reencrypts_everything_so_the_new_key_alone_reads_it(
    secrets_at_rest, settings
):
    before = stored()
    settings.CONNECTIONS_ENCRYPTION_KEY = "  " + NEW + " , " + OLD  # the environment's form
    out = rotate()
    assert "connections.Connection.access_token_encrypted: 1 re-encrypted" in out
    assert "runtime.PushConfig.auth_credentials: 1 re-encrypted" in out
    assert "runtime.Credential.secret_encrypted: 1 re-encrypted" in out
    assert "runtime.PushSettings.secret_encrypted: 1 re-encrypted" in out
    after = stored()
    assert len(after) == 5 and not set(before) & set(after)
    assert all(secret_is_current(value) for value in after)
    assert "opens with the first key alone" in rotate("--check")

    settings.CONNECTIONS_ENCRYPTION_KEY = [NEW]
    assert readable(secrets_at_rest) == expected(secrets_at_rest)
    settings.CONNECTIONS_ENCRYPTION_KEY = [OLD]  # the old key no longer opens any of them
    for value in after:
        with pytest.raises(InvalidToken):
            secret_decrypt(value)
    with pytest.raises(CredentialMissing):
        credential_value(tenant=secrets_at_rest.tenant, name="OPENAI_API_KEY")


def test_secrets_no_key_opens_are_named_and_left_as_they_were(secrets_at_rest, settings):
    before = stored()
    settings.CONNECTIONS_ENCRYPTION_KEY = [STRANGER]
    with pytest.raises(CommandError, match="5 secret\\(s\\) open with none") as raised:
        rotate()
    assert "runtime.Credential.secret_encrypted pk=" in str(raised.value)
    assert MODEL_KEY not in str(raised.value) and GITHUB_TOKEN not in str(raised.value)
    assert stored() == before
    settings.CONNECTIONS_ENCRYPTION_KEY = [OLD]
    assert readable(secrets_at_rest) == expected(secrets_at_rest)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("k1-" + "a" * 40 + ", k2-" + "b" * 40, ["k1-" + "a" * 40, "k2-" + "b" * 40]), ("", None)],
)
def test_the_setting_is_a_list_of_keys_defaulting_to_secret_key(value, expected):
    code = (
        "import django; django.setup(); from django.conf import settings as s;"
        f"print(s.CONNECTIONS_ENCRYPTION_KEY == ({expected!r} or [s.SECRET_KEY]))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "ENV_FILE": ""}
    env["CONNECTIONS_ENCRYPTION_KEY"] = value
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"


def settings_in_a_process(code: str, **env) -> str:
    full = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "ENV_FILE": "", **env}
    for name in ("SECRET_KEY_FALLBACKS", "SECRET_KEY_FALLBACKS_FILE", "CONNECTIONS_ENCRYPTION_KEY"):
        full.setdefault(name, "")
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + code],
        cwd=django_settings.BASE_DIR,
        env=full,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_secret_key_fallbacks_come_from_the_environment_or_a_file(tmp_path):
    code = "from django.conf import settings as s; print(s.SECRET_KEY_FALLBACKS)"
    assert settings_in_a_process(code, SECRET_KEY_FALLBACKS=f" {OLD} , {STRANGER} ") == repr(
        [OLD, STRANGER]
    )
    path = tmp_path / "fallbacks"
    path.write_text(f"{OLD},{STRANGER}\n")
    assert settings_in_a_process(code, SECRET_KEY_FALLBACKS_FILE=str(path)) == repr([OLD, STRANGER])
    assert settings_in_a_process(code) == "[]"


def test_a_new_secret_key_with_the_old_as_fallback_reads_what_the_old_one_made(tmp_path):
    """SECRET_KEY rotated with the old one in SECRET_KEY_FALLBACKS: what the old key signed
    (sessions, links) still verifies, and with no CONNECTIONS_ENCRYPTION_KEY of its own the
    secrets the old key encrypted still open, until rotate_secrets moves them to the new."""
    made = settings_in_a_process(
        "from django.core import signing; from connections.crypto import secret_encrypt;"
        "print(signing.dumps('hello'), secret_encrypt('the-secret'))",
        SECRET_KEY=OLD,
    )
    signed, encrypted = made.split()
    read = (
        "from django.core import signing; from connections.crypto import secret_decrypt,"
        " secret_key_position;"
        f"print(signing.loads({signed!r}), secret_decrypt({encrypted!r}),"
        f" secret_key_position({encrypted!r}))"
    )
    assert settings_in_a_process(read, SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=OLD) == (
        "hello the-secret 1"
    )
    failed = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + read],
        cwd=django_settings.BASE_DIR,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "ENV_FILE": "",
            "SECRET_KEY": NEW,
            "SECRET_KEY_FALLBACKS": "",
            "CONNECTIONS_ENCRYPTION_KEY": "",
        },
        capture_output=True,
        text=True,
    )
    assert failed.returncode != 0 and "BadSignature" in failed.stderr


def test_every_encrypted_column_is_known_to_rotate_secrets():
    """A column named ``*_encrypted`` holds secret_encrypt() output: rotate_secrets must know it,
    or a retired key would leave it unreadable."""
    from django.apps import apps

    from connections.management.commands.rotate_secrets import encrypted_fields

    known = {(model, field) for model, field in encrypted_fields()}
    columns = {
        (model, field.name)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if field.name.endswith("_encrypted")
    }
    assert columns, "no encrypted columns found: the test looks in the wrong place"
    assert columns - known == set()
