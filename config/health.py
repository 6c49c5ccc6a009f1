"""``/healthz`` (liveness) and ``/readyz`` (readiness) for load balancers and orchestrators.

``/healthz`` answers 200 ``ok`` whenever the process serves requests; it touches nothing else,
so a database outage does not get every web process restarted.

``/readyz`` tries the real dependencies each time: a query on the database, a connection to
the Celery broker, and the migration plan (every migration applied). 200 with
``{"status": "ok", "checks": {...}}`` when all pass; 503 with the same shape, ``"status":
"fail"`` and each failed check's ``error`` (the exception's class; the detail goes to the
log, since this page is public) or, for migrations, the unapplied ones.

The page is open (probes and load balancers call it without credentials), so what it costs
is bounded: an answer is reused for READY_CACHE_SECONDS by every caller of the process (a
flood of /readyz runs the checks once a second, not once a call: they took ~10 ms of CPU,
the migration plan most of it), and a migration plan found complete is trusted for
MIGRATIONS_CACHE_SECONDS (a process's migrations change only with its code).
"""

import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_SECONDS = 2
READY_CACHE_SECONDS = 1.0
MIGRATIONS_CACHE_SECONDS = 60.0
# The clock of the caches (tests move it).
clock = time.monotonic
_cache: dict = {}
_cache_lock = threading.Lock()


def readiness_forget() -> None:
    """Drop the cached answer and migration plan (the next call checks everything)."""
    with _cache_lock:
        _cache.clear()


@require_GET
def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


def db_connection(alias: str = "default"):
    """The connection the checks use (tests swap it for one pointing at a closed port)."""
    return connections[alias]


def _timed(check) -> dict:
    started = time.monotonic()
    try:
        result = check() or {}
    except Exception as exc:
        logger.warning("readiness check %s failed: %s: %s", check.__name__, type(exc).__name__, exc)
        result = {"ok": False, "error": type(exc).__name__}
    else:
        result = {"ok": True, **result} if "ok" not in result else result
    result["ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


def database_check() -> dict:
    connection = db_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {}


def broker_check() -> dict:
    from kombu import Connection

    url = settings.CELERY_BROKER_URL
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    with Connection(url, transport_options=options, connect_timeout=BROKER_TIMEOUT_SECONDS) as conn:
        # One attempt, no retry loop: a readiness probe must answer quickly.
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
        # Redis and AMQP connect lazily; the default channel makes it a real round trip.
        conn.default_channel  # noqa: B018
    return {}


def migrations_check() -> dict:
    connection = db_connection()
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        return {
            "ok": False,
            "unapplied": [f"{migration.app_label}.{migration.name}" for migration, _ in plan],
        }
    return {}


CHECKS = {"database": database_check, "broker": broker_check, "migrations": migrations_check}


def _checks_run(now: float) -> dict:
    checks: dict[str, dict] = {}
    for name, check in CHECKS.items():
        if name == "migrations" and not checks["database"]["ok"]:
            checks[name] = {"ok": False, "error": "database unavailable", "ms": 0.0}
            continue
        if name == "migrations" and _cache.get("migrations_ok_until", 0.0) > now:
            checks[name] = {"ok": True, "ms": 0.0, "cached": True}
            continue
        checks[name] = _timed(check)
        if name == "migrations" and checks[name]["ok"]:
            _cache["migrations_ok_until"] = now + MIGRATIONS_CACHE_SECONDS
    return checks


def readiness() -> tuple[dict, int]:
    """The readiness answer (body, status), checked at most once per READY_CACHE_SECONDS:
    callers meanwhile wait for the one check in flight and share its answer."""
    with _cache_lock:
        now = clock()
        answer = _cache.get("answer")
        if answer is not None and now < _cache["answer_until"]:
            return answer
        checks = _checks_run(now)
        ok = all(check["ok"] for check in checks.values())
        body: dict[str, Any] = {"status": "ok" if ok else "fail", "checks": checks}
        if not ok:
            body["failed"] = [name for name, check in checks.items() if not check["ok"]]
        answer = (body, 200 if ok else 503)
        _cache.update(answer=answer, answer_until=now + READY_CACHE_SECONDS)
        return answer


@require_GET
@never_cache
def readyz(request):
    body, status = readiness()
    return JsonResponse(body, status=status)
