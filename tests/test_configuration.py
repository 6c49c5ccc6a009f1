"""`.env` is read as documented (tests/test_env_catalog.py holds that every knob is)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import dotenv_load

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def clean_environ(monkeypatch):
    for name in ("CS_A", "CS_B", "CS_C", "CS_D", "CS_E", "CS_F", "ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_dotenv_sets_what_the_environment_does_not(tmp_path, clean_environ):
    env = tmp_path / ".env"
    env.write_text(
        "# a comment\n\n"
        "CS_A=plain value  # trailing comment\n"
        "export CS_B='single # not a comment'\n"
        'CS_C="double"\n'
        "CS_D=from the file\n"
        "CS_E=\n"
        "CS_F=a=b,c\n"
    )
    clean_environ.setenv("CS_D", "from the environment")
    assert dotenv_load(env) == env
    assert os.environ["CS_A"] == "plain value"
    assert os.environ["CS_B"] == "single # not a comment"
    assert os.environ["CS_C"] == "double"
    assert os.environ["CS_D"] == "from the environment"
    assert os.environ["CS_E"] == ""
    assert os.environ["CS_F"] == "a=b,c"


def test_a_quoted_dotenv_value_may_be_followed_by_a_comment(tmp_path, clean_environ):
    env = tmp_path / ".env"
    env.write_text(
        'CS_A="a" # the quotes are not the value\n'
        "CS_B='b c'   # nor these\n"
        'CS_C="say \\"hi\\" # not a comment" # this is\n'
        'CS_D="a\\\\b"#tight\n'
        "CS_E='it''s'\n"
    )
    # CS_E: two quoted values side by side are not one value.
    with pytest.raises(ImproperlyConfigured, match=r":5: text after the closing quote: \"'s'\""):
        dotenv_load(env)
    env.write_text(env.read_text().replace("CS_E='it''s'\n", "CS_E=it's\n"))
    dotenv_load(env)
    assert os.environ["CS_A"] == "a"
    assert os.environ["CS_B"] == "b c"
    assert os.environ["CS_C"] == 'say "hi" # not a comment'
    assert os.environ["CS_D"] == "a\\b"
    assert os.environ["CS_E"] == "it's"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('CS_A="open', "the value's \" quote is not closed"),
        ("CS_A='a' b", "text after the closing"),
    ],
)
def test_a_badly_quoted_dotenv_value_names_its_line(tmp_path, clean_environ, line, reason):
    env = tmp_path / ".env"
    env.write_text(f"CS_B=1\n{line}\n")
    with pytest.raises(ImproperlyConfigured, match=re.escape(f"{env}:2: {reason}")):
        dotenv_load(env)
    assert "CS_A" not in os.environ and "CS_B" not in os.environ


def test_a_bad_dotenv_line_names_the_file_and_line_and_sets_nothing(tmp_path, clean_environ):
    env = tmp_path / ".env"
    env.write_text("CS_A=1\nthis is not a setting\nCS_B=2\n")
    with pytest.raises(ImproperlyConfigured, match=rf"{re.escape(str(env))}:2: not a NAME=value"):
        dotenv_load(env)
    assert "CS_A" not in os.environ and "CS_B" not in os.environ


def test_env_file_names_the_file_and_empty_reads_none(tmp_path, clean_environ):
    clean_environ.setenv("ENV_FILE", str(tmp_path / "missing.env"))
    with pytest.raises(ImproperlyConfigured, match="missing.env"):
        dotenv_load()
    clean_environ.setenv("ENV_FILE", "")
    assert dotenv_load() is None


def test_settings_read_the_env_file(tmp_path):
    env = tmp_path / "countersign.env"
    env.write_text("A2A_WAIT_MS=1234\nTIME_ZONE=Europe/Paris\nDEMO_OPERATOR_PASSWORD=\n")
    code = (
        "import django; django.setup(); from django.conf import settings as s;"
        "print(s.A2A_WAIT_MS, s.TIME_ZONE, s.DEMO_OPERATOR_PASSWORD)"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("A2A_WAIT_MS", "TIME_ZONE")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", "ENV_FILE": str(env)},
        capture_output=True,
        text=True,
        check=True,
    )
    # An empty DEMO_OPERATOR_PASSWORD (as .env.example has it) is the default, not "".
    assert out.stdout.split() == ["1234", "Europe/Paris", "countersign-demo"]
