import logging
import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("countersign")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger(__name__)

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
