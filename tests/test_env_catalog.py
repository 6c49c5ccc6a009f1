"""Every environment variable the code reads is documented once (config/env_catalog.py), and
the settings reference and the two .env examples written from it are current and safe:
.env.example copied as it is changes nothing, deploy/production.env.example runs only once
its secret is filled in, and then passes `check --deploy`. (tests/test_docs_site.py holds the
written files to what the code makes.)"""

import os
import subprocess
import sys
import textwrap

import pytest

from config.env_catalog import names_all, settings_all
from scripts.docs_reference import (
    COMPUTED,
    ROOT,
    SETTING_LINE,
    constant_value,
    defaults_by_name,
    env_reads,
    env_text,
)

DEV_EXAMPLE = ROOT / ".env.example"
PRODUCTION_EXAMPLE = ROOT / "deploy" / "production.env.example"


def test_every_variable_the_code_reads_is_documented():
    read = {read.name for read in env_reads()}
    assert len(read) > 80
    missing = sorted(read - set(names_all()))
    where = {r.name: r.where for r in env_reads()}
    assert missing == [], [f"{name} ({where[name]})" for name in missing]


def test_every_documented_variable_is_read_by_the_code_or_says_who_reads_it():
    read = {read.name for read in env_reads()}
    unread = [name for setting in settings_all() if not setting.read_by for name in setting.names]
    assert sorted(set(unread) - read) == []
    assert len(names_all()) == len(set(names_all())), "a variable is documented twice"


def test_a_default_is_said_in_words_only_where_the_code_computes_it():
    defaults = defaults_by_name(env_reads())
    for setting in settings_all():
        computed = [name for name in setting.names if defaults.get(name) is COMPUTED]
        if setting.read_by:
            continue
        if computed:
            assert setting.default, f"say the default of {computed} in words"
            # A .env line cannot say "computed": each gets an example value instead.
            assert set(computed) <= set(setting.example), f"an example for {computed}"
        if setting.default:
            # The words cannot drift from the values the code does write down.
            for name in setting.names:
                literal = env_text(defaults.get(name))
                if defaults.get(name) is not COMPUTED and literal:
                    assert literal in setting.default, (name, literal, setting.default)


def test_defaults_are_read_from_constants_and_disagreeing_readers_are_computed(tmp_path):
    import ast

    assert constant_value(ast.parse("4 * 1024 * 1024", mode="eval").body) == 4194304
    assert constant_value(ast.parse("['a', 'b']", mode="eval").body) == ["a", "b"]
    assert constant_value(ast.parse("not DEBUG", mode="eval").body) is COMPUTED
    assert constant_value(ast.parse("2 * THREADS", mode="eval").body) is COMPUTED
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings.py").write_text(
        textwrap.dedent(
            """
            import os
            A = env_int("CS_A", 4 * 1024)
            B = env_str("CS_B", "x")
            C = os.environ.get("CS_C")
            D = env_bool("CS_D", not DEBUG)
            """
        )
    )
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run.py").write_text('import os\nB = os.environ.get("CS_B", "y")\n')
    for name in ("gunicorn.conf.py", "manage.py"):
        (tmp_path / name).write_text("")
    reads = env_reads(tmp_path)
    assert sorted(r.name for r in reads) == ["CS_A", "CS_B", "CS_B", "CS_C", "CS_D"]
    defaults = defaults_by_name(reads)
    assert defaults == {"CS_A": 4096, "CS_B": COMPUTED, "CS_C": None, "CS_D": COMPUTED}


def settings_with(env_file: str, tmp_path, **extra: str) -> subprocess.CompletedProcess:
    """The settings and the home page as a process started with ENV_FILE sees them."""
    code = (
        "import django, json; django.setup(); from django.conf import settings as s;"
        "from django.test import Client;"
        "r = Client().get('/', HTTP_HOST='127.0.0.1:8000');"
        "print(json.dumps([r.status_code, r.get('Location'), s.DEBUG, s.SECURE_SSL_REDIRECT,"
        " s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, s.DATABASES['default']['ENGINE'],"
        " s.CELERY_BROKER_URL, s.EMAIL_BACKEND, s.ALLOWED_HOSTS, s.LOG_FORMAT]))"
    )
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **base,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "ENV_FILE": env_file,
            "VAR_DIR": str(tmp_path / "var"),
            **extra,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_copy_of_env_example_changes_nothing_and_serves_plain_http(tmp_path):
    copied = settings_with(str(DEV_EXAMPLE), tmp_path)
    none = settings_with("", tmp_path)
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout == none.stdout
    # To the login page over plain http: no redirect to https://, no HSTS.
    assert copied.stdout.startswith('[302, "/accounts/login/", true, false, 0, false,')
    # Every line is a comment: nothing in it is set.
    lines = [line for line in DEV_EXAMPLE.read_text().splitlines() if line.strip()]
    assert all(line.startswith("#") for line in lines)


def test_the_production_example_needs_its_secret_key_and_then_passes_check_deploy(tmp_path):
    refused = settings_with(str(PRODUCTION_EXAMPLE), tmp_path)
    assert refused.returncode != 0 and "SECRET_KEY" in refused.stderr
    secret = {"SECRET_KEY": "p" * 20 + "-production-secret-with-enough-entropy-0123456789"}
    started = settings_with(str(PRODUCTION_EXAMPLE), tmp_path, **secret)
    assert started.returncode == 0, started.stderr
    assert '"django.db.backends.postgresql"' in started.stdout
    assert '"redis://127.0.0.1:6379/0"' in started.stdout
    assert '"django.core.mail.backends.smtp.EmailBackend"' in started.stdout
    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/tmp"),
            "ENV_FILE": str(PRODUCTION_EXAMPLE),
            "VAR_DIR": str(tmp_path / "var"),
            **secret,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "System check identified no issues" in check.stdout


@pytest.mark.parametrize("example", [DEV_EXAMPLE, PRODUCTION_EXAMPLE], ids=["dev", "production"])
def test_each_example_lists_every_variable_once(example):
    listed = [
        match.group(1)
        for line in example.read_text().splitlines()
        if (match := SETTING_LINE.match(line))
    ]
    assert sorted(set(listed)) == sorted(names_all())
    assert len(listed) == len(set(listed))
