import pytest

from notifications.channel_settings import channel_save
from notifications.models import Channel
from tests.a2a_endpoint.receiver import Receiver

BUILD = "2026.10.06-1"
HOLD = f"deploy build {BUILD} to staging"


@pytest.fixture
def notify(settings, eager):
    """Deliveries run inline (eager Celery) against local receivers; mail is Django's locmem."""
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.NOTIFY_RETRY_BASE_SECONDS = 0
    settings.PUBLIC_BASE_URL = "https://countersign.example"


@pytest.fixture
def receivers():
    started = []

    def make(**kwargs) -> Receiver:
        receiver = Receiver(**kwargs).start()
        started.append(receiver)
        return receiver

    yield make
    for receiver in started:
        receiver.stop()


@pytest.fixture
def channel():
    """Make a channel through the service, as the settings page does."""

    def make(tenant, name: str, kind: str, **fields) -> tuple[Channel, str]:
        return channel_save(tenant=tenant, name=name, kind=kind, **fields)

    return make
