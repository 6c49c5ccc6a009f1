import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("countersign")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def queue() -> str:
    """The queue to publish to, read at publish time (tests point it at their own worker)."""
    from django.conf import settings

    return settings.CELERY_TASK_DEFAULT_QUEUE
