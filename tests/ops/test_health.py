"""/healthz and /readyz: readiness tries the real database, broker and migration plan."""

import socket

import pytest
from django.db import connections
from django.db.migrations.recorder import MigrationRecorder
from django.db.utils import load_backend

from config import health

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_readiness(monkeypatch):
    """Each test sees its own readiness, at a clock it moves."""
    now = [1000.0]
    monkeypatch.setattr(health, "clock", lambda: now[0])
    health.readiness_forget()
    yield now
    health.readiness_forget()


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_healthz_is_liveness_only(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok"


def test_readyz_is_200_with_every_check_when_all_is_up(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "broker", "migrations"}
    assert all(check["ok"] for check in body["checks"].values())
    assert "no-cache" in response["Cache-Control"]


@pytest.fixture
def database_down(monkeypatch, tmp_path):
    """The checks get a connection to a database that is not there (a closed port, or an
    SQLite file in a directory that does not exist)."""
    config = dict(connections["default"].settings_dict)
    config["OPTIONS"] = {
        k: v for k, v in config.get("OPTIONS", {}).items() if k not in {"pool", "init_command"}
    }
    if config["ENGINE"].endswith("sqlite3"):
        config["NAME"] = str(tmp_path / "missing" / "db.sqlite3")
    else:
        config.update(HOST="127.0.0.1", PORT=closed_port(), CONN_MAX_AGE=0)
        config["OPTIONS"]["connect_timeout"] = 2
    wrapper = load_backend(config["ENGINE"]).DatabaseWrapper(config, alias="readyz-down")
    monkeypatch.setattr(health, "db_connection", lambda alias="default": wrapper)
    yield
    wrapper.close()


def test_readyz_is_503_naming_the_database_when_it_is_down(client, database_down):
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "fail"
    assert body["failed"] == ["database", "migrations"]
    assert body["checks"]["database"]["ok"] is False
    assert body["checks"]["database"]["error"] == "OperationalError"
    assert body["checks"]["broker"]["ok"] is True


def test_readyz_is_503_naming_the_broker_when_it_is_down(client, settings):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["broker"]
    assert body["checks"]["broker"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True
    # The page is public: it names the failure, not the broker's address.
    assert "127.0.0.1" not in response.content.decode()


def test_readyz_is_503_listing_an_unapplied_migration(client):
    recorder = MigrationRecorder(connections["default"])
    last = recorder.migration_qs.filter(app="runtime").order_by("-id").first()
    assert last is not None
    last.delete()  # the test's transaction is rolled back afterwards
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["migrations"]
    assert f"runtime.{last.name}" in body["checks"]["migrations"]["unapplied"]


def test_readyz_answers_a_flood_with_one_check_a_second(
    client, _fresh_readiness, django_assert_num_queries
):
    first = client.get("/readyz")
    assert first.status_code == 200
    # Within the second every caller gets that answer: no query, no broker connection.
    with django_assert_num_queries(0):
        for _ in range(20):
            again = client.get("/readyz")
            assert again.json() == first.json()
    # A second later the database and the broker are tried again; the migration plan found
    # complete is trusted for a minute (it took most of the check's CPU).
    _fresh_readiness[0] += 1.5
    with django_assert_num_queries(1):
        later = client.get("/readyz").json()
    assert later["checks"]["migrations"] == {"ok": True, "ms": 0.0, "cached": True}
    _fresh_readiness[0] += 60
    fresh = client.get("/readyz").json()
    assert fresh["status"] == "ok" and "cached" not in fresh["checks"]["migrations"]


def test_a_failed_answer_is_not_kept_past_its_second(client, settings, _fresh_readiness):
    working = (settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    assert client.get("/readyz").status_code == 503
    settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS = working
    assert client.get("/readyz").status_code == 503  # the same second: the same answer
    _fresh_readiness[0] += 1.5
    assert client.get("/readyz").status_code == 200
