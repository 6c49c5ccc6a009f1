"""Shared fixtures: a world of two tenants, each with an admin, an operator, a viewer and a
partner token, as the house style asks."""

import os
import uuid
from pathlib import Path

import pytest

from a2a_endpoint import asyncdb
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.agents.demo import seed_demo_agents
from tenants.models import Tenant, User
from tests import loopback
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, held_approval
from tests.world import PASSWORD, World, make_side

# In-process tests publish their Celery messages to a queue of this run that no worker
# consumes; the live stack's worker consumes a queue of its own. Without this, the live
# worker would also run the turns that in-process tests enqueue (and those of earlier runs
# left in the broker) against the same database.
INPROC_QUEUE = f"test-inproc-{uuid.uuid4().hex[:8]}"
LIVE_QUEUE = f"test-live-{uuid.uuid4().hex[:8]}"


def _flush_that_outlasts_a_deadlock():
    """A transactional test ends with a flush (TRUNCATE of every table). The live stack's
    worker may still be finishing work for the test that just ended; should the two deadlock,
    PostgreSQL aborts one of them, and when it is the flush, it is tried again: the worker's
    transaction is gone by then, or is waited for. ``live_stack`` waits for a quiet database
    first (LiveStack.quiesce), so this is the rare case."""
    import time

    from django.test import TransactionTestCase

    original = TransactionTestCase._fixture_teardown

    def _fixture_teardown(self):
        for attempt in range(5):
            try:
                return original(self)
            except Exception as exc:
                cause = exc.__cause__ or exc
                if attempt == 4 or "deadlock detected" not in str(cause):
                    raise
                time.sleep(0.2 * (attempt + 1))

    TransactionTestCase._fixture_teardown = _fixture_teardown


_flush_that_outlasts_a_deadlock()


def _flush_by_delete():
    """A transactional test ends with a flush of every table. PostgreSQL's TRUNCATE of the
    fifty-odd tables makes new files for each table and index: 0.4 s per test, more than
    most of these tests take to run. A DELETE of each table, in the flush's one transaction,
    takes a few milliseconds for the rows a test leaves; the foreign keys do not mind the
    order, Django makes them DEFERRABLE INITIALLY DEFERRED and they are checked at the
    commit. Sequences go on as they did (the flush does not reset them); a flush that must
    reset them, or cascade to tables it was not given, still truncates."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [
            "SET CONSTRAINTS ALL DEFERRED",
            *(f"{style.SQL_KEYWORD('DELETE FROM')} {self.quote_name(t)}" for t in tables),
        ]

    DatabaseOperations.sql_flush = sql_flush


_flush_by_delete()


@pytest.fixture(scope="session", autouse=True)
def _loopback_only_session(tmp_path_factory):
    """Tests never leave loopback, not even for a DNS lookup (tests/loopback.py): in this
    process, and in the Python processes it starts (tests/loopback_site), which report what
    they refuse to a file of this run."""
    from django.conf import settings

    services = loopback.service_hosts() | loopback.service_hosts(
        {"DATABASE_URL": f"db://{settings.DATABASES['default'].get('HOST') or ''}/"}
    )
    services |= loopback.service_hosts({"CELERY_BROKER_URL": settings.CELERY_BROKER_URL})
    report = tmp_path_factory.mktemp("loopback") / "refused.txt"
    report.touch()
    guard = loopback.LoopbackOnly(allowed=services, collect=str(report))
    site = str(Path(__file__).resolve().parent / "loopback_site")
    undo = loopback.install(guard)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(loopback.REPORT_ENV, str(report))
        mp.setenv(
            "PYTHONPATH", os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
        )
        yield guard
    undo()


@pytest.fixture(autouse=True)
def loopback_only(_loopback_only_session):
    """The lookup guard: a test may give a name fixed addresses (``loopback_only.answer(
    "hooks.test", "127.0.0.1")``, e.g. to see the outbound guard refuse what a public name
    resolves to). A test, or a subprocess of it, that looked up any other name fails, even
    where the product code swallowed the error; a test of the guard itself takes what it
    provoked with ``take_refused()``."""
    guard = _loopback_only_session
    yield guard
    guard.answers.clear()
    refused = guard.take_refused()
    if refused:
        pytest.fail(f"tests never leave loopback, but this one looked up: {refused}")


@pytest.fixture(autouse=True)
def _celery_queue_of_this_run(settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = INPROC_QUEUE


@pytest.fixture(autouse=True)
def _receipt_key_forgotten():
    """The receipt signing key this process keeps (runtime.decisions.signing) is forgotten
    after each test: the database it came from is flushed or rolled back."""
    yield
    from runtime.decisions.signing import signing_cache_clear

    signing_cache_clear()


def _rows_in_its_own_transaction(request) -> bool:
    """Whether the test's rows stay in a transaction of its own (django_db, not transactional)."""
    marker = request.node.get_closest_marker("django_db")
    transactional = (
        "transactional_db" in request.fixturenames
        or "live_server" in request.fixturenames
        or (marker is not None and bool(marker.kwargs.get("transaction", marker.args[:1])))
    )
    return not transactional and (marker is not None or "db" in request.fixturenames)


@pytest.fixture(autouse=True)
def _a2a_db_thread_sensitive(request, monkeypatch):
    """What was the A2A_DB_THREAD_SENSITIVE setting, now the tests' own: the A2A
    view runs its database calls on the shared threads (a2a_endpoint.asyncdb), and a test
    that keeps its rows in its own open transaction sees them only from its own thread: its
    calls run there. Every other test (transactional, live) reaches the database as
    production does; the async pool's reads are the server's (opened at its start), which
    the live stack runs and tests/a2a_endpoint/test_hot_path.py reads directly."""
    if _rows_in_its_own_transaction(request):
        monkeypatch.setattr(asyncdb, "call_runner", asyncdb.on_the_callers_thread)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's cost is for attackers, not for a test suite that creates dozens of users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def postgres_only():
    """Skip the test on SQLite: it needs PostgreSQL's row locks across connections, its
    LISTEN/NOTIFY or its async reads (run it with DATABASE_URL, as CI does)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL): row locks, LISTEN/NOTIFY, async reads")


@pytest.fixture
def staff(db):
    """A Django test client logged in as platform staff (a superuser)."""
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create_superuser(email="staff@countersign.test", password="x"))
    return client


@pytest.fixture
def world(db) -> World:
    return World(a=make_side("acme"), b=make_side("globex"))


@pytest.fixture
def agents(world) -> World:
    """The demo agents (runtime/agents/*.md) in both tenants of the world."""
    for side in (world.a, world.b):
        seed_demo_agents(tenant=side.tenant)
    return world


@pytest.fixture
def make_agent(agents):
    """Create an agent (in tenant A, acme, unless told) from an AgentSpec with a scripted model."""

    def make(slug: str, steps: list, tenant=None, **fields):
        spec = AgentSpec(
            slug=slug,
            name=slug,
            description=f"test agent {slug}",
            skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
            model={"provider": "scripted", "script": [{"steps": steps}]},
            **fields,
        )
        agent, _ = agent_upsert(tenant=tenant or agents.a.tenant, spec=spec)
        return agent

    return make


@pytest.fixture
def holder(make_agent):
    """An agent (``dep`` unless told) whose deploy call is held under the policy entry
    ``rule`` (and the tool entry ``tool``), made in tenant A unless told; returns a maker of
    its open approvals: ``holder(rule)(side)``."""

    def make(rule, *, slug: str = "dep", tool: dict = DEPLOY_TOOL, tenant=None):
        make_agent(
            slug,
            [deploy_step(), *REPORT_RESULT],
            tenant=tenant,
            tools=[tool],
            tool_policy={"deploy/deploy_build": rule},
        )
        return lambda side: held_approval(side, slug)

    return make


@pytest.fixture
def held_under(holder):
    """The side's open approval of a deploy held under the policy entry ``rule``, its agent
    (``dep`` unless told) made in the side's tenant: ``holder`` for one call."""

    def hold(side, rule, *, slug: str = "dep"):
        return holder(rule, slug=slug, tenant=side.tenant)(side)

    return hold


@pytest.fixture
def eager(settings):
    """Run turns inline when the enqueuing transaction commits; bound a blocking wait."""
    from config.celery import app

    # Celery copies Django's settings once, at first use: read its view before changing
    # anything (a first read after the change would save the change), set it, and put it
    # back, so that no other test runs tasks inline by accident.
    saved = {key: app.conf[key] for key in ("task_always_eager", "task_eager_propagates")}
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.CELERY_TASK_EAGER_PROPAGATES = True
    settings.A2A_WAIT_MS = 10_000
    app.conf.update(task_always_eager=True, task_eager_propagates=True)
    yield
    app.conf.update(saved)


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
def live_stack(transactional_db, _live_stack_session, settings):
    """uvicorn + a Celery worker on the test database (started once; see tests/live.py).

    What the test itself enqueues (an operator's decision made in-process) goes to the live
    worker's queue while it runs. It asks for ``transactional_db`` first so that, at the end,
    the stack is quiet before the database is flushed (see LiveStack.quiesce)."""
    settings.CELERY_TASK_DEFAULT_QUEUE = LIVE_QUEUE
    yield _live_stack_session
    _live_stack_session.quiesce()


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
    seeded = json.loads(out.getvalue())
    # The demo tenant has AI summaries on (seed_demo), so each held call of a hosted model
    # also asks that model for a summary, from a worker, at a moment of its own. Tests that
    # script a model's replies in order (tests.llm_stub) would lose one to it: off here; the
    # summaries' own tests turn them on (tests/e2e/test_call_summary_browser.py).
    tenants = Tenant.objects.filter(slug=seeded["tenant"])
    assert tenants.get().ai_summaries, "seed_demo turns the demo tenant's AI summaries on"
    tenants.update(ai_summaries=False)  # no audit row: the tests count theirs
    return seeded
