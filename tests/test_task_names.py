"""Work is queued by a Celery task's name (config.celery.task_enqueue): a process that has not
imported the task modules finds them at the first use, in every thread that asks at once."""

import subprocess
import sys

from tests.live import ROOT

# A fresh process (nothing has imported the task modules), many threads asking at once for
# tasks of each app: the web process's database threads run their commits' hooks so.
CONCURRENT_FIRST_USE = """
import os, sys, threading
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
import django
django.setup()
assert "runtime.tasks" not in sys.modules
from config.celery import task_named
names = ["runtime.tasks.deliver_push", "runtime.tasks.run_turn",
         "notifications.tasks.follow_up", "integrations.tasks.slack_decide"] * 4
start = threading.Barrier(len(names))
failed = []
def ask(name):
    start.wait()
    try:
        assert task_named(name).name == name
    except Exception as exc:
        failed.append(f"{name}: {exc!r}")
threads = [threading.Thread(target=ask, args=(n,)) for n in names]
for t in threads: t.start()
for t in threads: t.join()
print("\\n".join(failed) or "ok")
"""


def test_every_thread_finds_a_task_by_its_name_at_the_first_use():
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", CONCURRENT_FIRST_USE],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "VAR_DIR": str(ROOT / "var" / "test")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "ok", done.stdout
