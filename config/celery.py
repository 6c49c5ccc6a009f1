import logging
import os
import threading
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("countersign")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger(__name__)

# The Celery task that runs a turn (runtime.tasks), queued by name.
RUN_TURN = "runtime.tasks.run_turn"
_discovery = threading.Lock()

# A worker run as root (a container without USER, `make run` in a root shell) gets Celery's
# nine-line warning box on every start. Its messages are JSON only (CELERY_ACCEPT_CONTENT),
# so no message can run code as root, which is what the box is about (with pickle Celery
# refuses to start as root at all); one log line says the rest (``_root_noted``).
warnings.filterwarnings(
    "ignore",
    message="You're running the worker with superuser privileges",
    category=SecurityWarning,
)


@worker_init.connect(weak=False, dispatch_uid="countersign-root-noted")
def _root_noted(**_kwargs) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        logger.warning(
            "the worker runs as root: run it as an unprivileged user in production (the "
            "image's countersign user, the systemd units' User=)"
        )


def queue() -> str:
    """The queue to publish to, read at publish time (tests point it at their own worker)."""
    from django.conf import settings

    return settings.CELERY_TASK_DEFAULT_QUEUE


def task_named(name: str):
    """The Celery task registered as ``name`` (``app.tasks.function``).

    Work is queued by the task's name, never by importing the module that runs it: each app's
    task module imports the services it runs, so it sits above them, and a service that
    imported it would close a circle. A process that has not imported the task modules yet
    (a web process) finds them as the worker does, by each app's ``tasks`` module, once:
    Celery's autodiscovery returns nothing to a second thread that asks while a first is
    importing, so the threads that commit a web process's writes take turns here."""
    if name not in app.tasks:
        with _discovery:
            if name not in app.tasks:
                app.loader.import_default_modules()
    return app.tasks[name]


def task_enqueue(name: str, args: tuple = (), kwargs: dict | None = None, **options) -> None:
    """Queue the task ``name`` on this process's queue (``queue()``), as ``apply_async``
    does: run at once where tasks run eagerly (tests)."""
    task_named(name).apply_async(args, kwargs, queue=queue(), **options)
