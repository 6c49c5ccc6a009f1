"""One log line per event in development, JSON lines in production."""

import json
import logging
import os
import subprocess
import sys

import pytest
from django.conf import settings

EMIT = """
import logging, warnings
import django
django.setup()
logging.getLogger("django.request").warning("Not Found: /nothing-here")
logging.getLogger("celery.beat").info("Scheduler: Sending due task sweep-turns")
logging.getLogger("celery.app.trace").info("Task runtime.tasks.sweep_turns succeeded")
logging.getLogger("kombu.connection").warning("No hostname was supplied. Reverting")
logging.getLogger("uvicorn.error").info("Started server process")
logging.getLogger("runtime.turn.intake").info("turn t1.x queued")
warnings.warn("StreamingHttpResponse must consume synchronous iterators in order to", Warning)
"""


def emit(**env) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOG_", "CELERY_"))}
    result = subprocess.run(
        [sys.executable, "-c", EMIT],
        cwd=settings.BASE_DIR,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", "ENV_FILE": "", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return (result.stdout + result.stderr).splitlines()


def test_development_logs_each_event_once_without_the_chatter():
    lines = emit(DEBUG="true")
    assert sum("Not Found: /nothing-here" in line for line in lines) == 1
    assert any("uvicorn.error" in line and "Started server process" in line for line in lines)
    assert any("turn t1.x queued" in line for line in lines)
    text = "\n".join(lines)
    for noise in ("Sending due task", "succeeded", "No hostname", "synchronous iterators"):
        assert noise not in text, noise


def test_log_level_debug_shows_the_periodic_chatter_again():
    text = "\n".join(emit(DEBUG="true", LOG_LEVEL="DEBUG"))
    assert "Sending due task" in text and "sweep_turns succeeded" in text


@pytest.mark.parametrize(
    "env", [{"DEBUG": "false", "SECRET_KEY": "x" * 50}, {"LOG_FORMAT": "json"}]
)
def test_production_and_log_format_json_log_one_json_object_per_line(env):
    lines = emit(**env)
    records = [json.loads(line) for line in lines]  # every line parses
    messages = [r["message"] for r in records]
    assert messages.count("Not Found: /nothing-here") == 1
    assert "Started server process" in messages
    assert {"time", "level", "logger", "task_id", "tenant", "subject", "trace_id"} <= set(
        records[0]
    )


def test_an_unknown_log_format_is_refused():
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "LOG_FORMAT must be text or json" in result.stderr


@pytest.mark.django_db
def test_a_refusal_in_django_admin_is_one_log_line_not_a_traceback(world, caplog):
    from tests.admin_pages import tenant_admin_client

    client = tenant_admin_client(world.a)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        # People's accounts are platform staff's: a tenant admin is refused.
        assert client.get("/admin/tenants/user/").status_code == 403
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.getMessage() == "Forbidden (Permission denied): /admin/tenants/user/"
    assert record.exc_info is None
    assert "\n" not in logging.Formatter().format(record)


def test_a_fault_keeps_its_traceback():
    from config.logging import ForbiddenOneLine

    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "django.request",
            logging.ERROR,
            __file__,
            1,
            "Internal Server Error",
            (),
            sys.exc_info(),
        )
    record.status_code = 500
    assert ForbiddenOneLine().filter(record) and record.exc_info is not None


FORGE = """
import logging
import django
django.setup()
from config.logging import log_context
with log_context(subject="partner:x\\n2026-01-01 INFO fake.logger forged line"):
    logging.getLogger("runtime.turn.intake").info("caller said: %s", "hi\\rthere\\x1b[2J")
"""


def test_a_subject_or_message_with_a_line_break_stays_on_its_line():
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOG_", "CELERY_"))}
    result = subprocess.run(
        [sys.executable, "-c", FORGE],
        cwd=settings.BASE_DIR,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", "ENV_FILE": "", "DEBUG": "true"},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line]
    [line] = [line for line in lines if "caller said" in line]
    assert "subject=partner:x\\n2026-01-01 INFO fake.logger forged line" in line
    assert line.endswith("caller said: hi\\rthere\\x1b[2J")
    assert not any(line.startswith("2026-01-01 INFO fake.logger") for line in lines)
