"""A worker run as root says so in one log line, not in Celery's nine-line warning box."""

import os
import subprocess
import sys

from django.conf import settings

AS_ROOT = """
import os
os.getuid = os.geteuid = lambda: 0  # as in a container without USER
import django
django.setup()
from celery import platforms
from celery.signals import worker_init
import config.celery
platforms.check_privileges({"application/json"})  # what `celery worker` runs at start
worker_init.send(sender=None)
"""


def test_a_root_worker_logs_one_line_instead_of_the_warning_box():
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOG_", "C_FORCE"))}
    result = subprocess.run(
        [sys.executable, "-c", AS_ROOT],
        cwd=settings.BASE_DIR,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", "ENV_FILE": "", "DEBUG": "true"},
        capture_output=True,
        text=True,
        check=True,
    )
    output = result.stdout + result.stderr
    assert "superuser privileges" not in output and "--uid" not in output
    [line] = [line for line in output.splitlines() if "the worker runs as root" in line]
    assert "WARNING config.celery" in line
