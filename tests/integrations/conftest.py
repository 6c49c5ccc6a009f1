import pytest
from django.test import Client

from integrations.slack.settings import slack_app_save
from notifications.channel_settings import channel_save
from runtime.decisions.decision_models import Interaction
from tests.core import start
from tests.integrations.slack.standin import BOT_TOKEN, SIGNING_SECRET, SlackStandIn, signed
from tests.notifications.conftest import channel

__all__ = ["channel"]  # the fixture that makes a channel through the service, shared

BUILD = "2026.10.06-1"
SLACK_CHANNEL = "C0DEPLOY"
OPERATOR, ADMIN, VIEWER, STRANGER = "U0OPERATOR", "U0ADMIN", "U0VIEWER", "U0STRANGER"


@pytest.fixture
def notify(settings, eager):
    """Deliveries and Slack's clicks run inline (eager Celery); mail is Django's locmem."""
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.NOTIFY_RETRY_BASE_SECONDS = 0
    settings.PUBLIC_BASE_URL = "https://countersign.example"


@pytest.fixture
def slack(settings, notify):
    """The stand-in for Slack's Web API, with the people of acme (and one stranger)."""
    standin = SlackStandIn().start()
    settings.SLACK_API_URL = standin.url
    standin.user(OPERATOR, "operator@acme.test")
    standin.user(ADMIN, "Admin@Acme.test")  # Slack keeps the case people typed
    standin.user(VIEWER, "viewer@acme.test")
    standin.user(STRANGER, "someone@elsewhere.test")
    yield standin
    standin.stop()


@pytest.fixture
def slack_app(agents, slack):
    """acme's Slack app, posting to one channel; returns the stand-in."""
    slack_app_save(tenant=agents.a.tenant, bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
    channel_save(
        tenant=agents.a.tenant, name="deploys", kind="slack_app", slack_channel=SLACK_CHANNEL
    )
    return slack


@pytest.fixture
def held(agents, django_capture_on_commit_callbacks):
    """A turn of tenant A run to its pause (the fan-out and its deliveries run too)."""

    def hold(agent: str = "deployer", text: str = f"deploy build {BUILD} to staging", side=None):
        side = side or agents.a
        with django_capture_on_commit_callbacks(execute=True):
            task = start(side, agent, text)
        return Interaction.objects.select_related("task__agent").get(task=task, state="open")

    return hold


@pytest.fixture
def slack_post(django_capture_on_commit_callbacks):
    """Slack's request to acme's interactivity endpoint (what it queues runs, eagerly)."""

    def post(payload: dict, tenant: str = "acme", **signing):
        with django_capture_on_commit_callbacks(execute=True):
            return Client().post(
                f"/integrations/slack/{tenant}/interactions", **signed(payload, **signing)
            )

    return post
