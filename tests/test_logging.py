"""Issue 14, item 1: one log line per event in development, JSON lines in production."""

import json
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
