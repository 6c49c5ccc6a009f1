"""Settings load with no environment at all, and production values pass `check --deploy`."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_settings_load_with_an_empty_environment(tmp_path):
    result = run(
        [
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
            "from django.conf import settings as s;"
            "print(s.DEBUG, s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, s.A2A_WAIT_MS)",
        ],
        {"VAR_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "True",
        "django.db.backends.sqlite3",
        "filesystem://",
        "300000",
    ]
    assert (tmp_path / "dev-secret-key").exists()


def test_check_deploy_passes_with_production_values(tmp_path):
    result = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        {
            "VAR_DIR": str(tmp_path),
            "DEBUG": "false",
            "SECRET_KEY": "x" * 20 + "-production-secret-with-enough-entropy-0123456789",
            "ALLOWED_HOSTS": "countersign.example.com",
            "CSRF_TRUSTED_ORIGINS": "https://countersign.example.com",
            "DATABASE_URL": "postgres://countersign@127.0.0.1:5432/countersign",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_debug_off_without_secret_key_refuses_to_start(tmp_path):
    result = run(["manage.py", "check"], {"VAR_DIR": str(tmp_path), "DEBUG": "false"})
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_secret_key_file_is_read(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-a-file-" + "k" * 50)
    result = run(
        [
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
            "from django.conf import settings; print(settings.SECRET_KEY)",
        ],
        {
            "VAR_DIR": str(tmp_path),
            "DEBUG": "false",
            "SECRET_KEY_FILE": str(secret),
            "ALLOWED_HOSTS": "x",
        },
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from-a-file-" + "k" * 50


def test_the_worker_runs_a_threads_pool_sized_for_its_database(tmp_path):
    """One worker process holds many waiting turns on PostgreSQL; SQLite takes one writer at a
    time, so the embedded default runs few. `celery -A config worker` reads these."""
    show = (
        "import os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings';"
        "from config.celery import app; app.loader.import_default_modules();"
        "print(app.conf.worker_pool, app.conf.worker_concurrency)"
    )
    embedded = run(["-c", show], {"VAR_DIR": str(tmp_path)})
    assert embedded.returncode == 0, embedded.stderr
    assert embedded.stdout.split() == ["threads", "8"]
    postgres = run(
        ["-c", show],
        {"VAR_DIR": str(tmp_path), "DATABASE_URL": "postgres://u@127.0.0.1:5432/db"},
    )
    assert postgres.returncode == 0, postgres.stderr
    assert postgres.stdout.split() == ["threads", "500"]
    chosen = run(
        ["-c", show],
        {
            "VAR_DIR": str(tmp_path),
            "CELERY_WORKER_POOL": "prefork",
            "CELERY_WORKER_CONCURRENCY": "3",
        },
    )
    assert chosen.stdout.split() == ["prefork", "3"], chosen.stderr
