"""Shared fixtures: a world of two tenants, each with an admin, an operator, a viewer and a
partner token, as the house style asks."""

import uuid
from dataclasses import dataclass, field

import pytest
from django.test import Client

from tenants.models import Membership, Tenant, User
from tenants.tokens import api_token_create

PASSWORD = "correct-horse-battery-staple"


# In-process tests publish their Celery messages to a queue of this run that no worker
# consumes; the live stack's worker consumes a queue of its own. Without this, the live
# worker would also run the turns that in-process tests enqueue (and those of earlier runs
# left in the broker) against the same database.
INPROC_QUEUE = f"test-inproc-{uuid.uuid4().hex[:8]}"
LIVE_QUEUE = f"test-live-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _celery_queue_of_this_run(settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = INPROC_QUEUE


@pytest.fixture(autouse=True)
def _a2a_queries_on_the_test_thread(settings):
    # The A2A view runs its queries on a shared pool in production (config/asgi.py); driven
    # in-process by the test client, they must run on the test's thread to see its data.
    settings.A2A_DB_THREAD_SENSITIVE = True


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's cost is for attackers, not for a test suite that creates dozens of users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@dataclass
class Side:
    tenant: Tenant
    admin: User
    operator: User
    viewer: User
    token: str
    subject: str
    extra: dict = field(default_factory=dict)

    def client_for(self, user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client


@dataclass
class World:
    a: Side
    b: Side


def make_side(slug: str) -> Side:
    tenant = Tenant.objects.create(slug=slug, name=f"{slug.title()} Corp")
    users = {}
    for role in ("admin", "operator", "viewer"):
        user = User.objects.create_user(email=f"{role}@{slug}.test", password=PASSWORD)
        Membership.objects.create(tenant=tenant, user=user, role=role)
        users[role] = user
    subject = f"partner:{slug}-client"
    _, token = api_token_create(tenant=tenant, subject=subject, name=f"{slug} partner")
    return Side(tenant=tenant, token=token, subject=subject, **users)


@pytest.fixture
def world(db) -> World:
    return World(a=make_side("acme"), b=make_side("globex"))


@pytest.fixture
def user_factory(db):
    def make(email: str = "someone@example.test", password: str = PASSWORD, **extra) -> User:
        return User.objects.create_user(email=email, password=password, **extra)

    return make


@pytest.fixture(scope="session")
def _live_stack_session(django_db_setup, django_db_blocker, tmp_path_factory):
    from tests.live import LiveStack

    with django_db_blocker.unblock():
        stack = LiveStack(
            tmp_path_factory.mktemp("live"), extra_env={"CELERY_QUEUE": LIVE_QUEUE}
        ).start()
    yield stack
    stack.stop()


@pytest.fixture
def live_stack(_live_stack_session, settings):
    """uvicorn + a Celery worker on the test database (started once; see tests/live.py).

    What the test itself enqueues (an operator's decision made in-process) goes to the live
    worker's queue while it runs."""
    settings.CELERY_TASK_DEFAULT_QUEUE = LIVE_QUEUE
    return _live_stack_session


@pytest.fixture
def demo(transactional_db, settings):
    """The demo tenant as seed_demo makes it (agents, logins, a partner token)."""
    import json
    from io import StringIO

    from django.core.management import call_command

    # pytest-django runs with DEBUG off, where seed_demo refuses the documented password.
    settings.DEBUG = True
    out = StringIO()
    call_command("seed_demo", "--json", stdout=out)
    settings.DEBUG = False
    return json.loads(out.getvalue())
