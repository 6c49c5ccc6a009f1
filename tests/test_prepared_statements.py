"""DATABASE_PREPARE_THRESHOLD: on PostgreSQL a hot statement (runtime.kernel.rowsql's cursor,
parameters bound on the server) that a connection runs again and again becomes a prepared
statement (no parse, mostly no plan); 0 turns them off."""

import pytest
from django.db import connection

from runtime.kernel.rowsql import cursor
from tests.test_settings import run

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def prepared_on_this_connection(fragment: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        return [row[0] for row in cursor.fetchall()]


def hot_read() -> None:
    with cursor() as hot:
        hot.execute('SELECT "id" FROM "runtime_task" WHERE "id" = %s AND "turn" = %s', [-1, 7])
        assert hot.fetchall() == []


def test_a_hot_statement_run_five_times_is_prepared_on_the_server(postgres_only):
    shape = '"id" = $1 AND "turn" = $2'
    for _ in range(4):
        hot_read()
    assert prepared_on_this_connection(shape) == []  # below the threshold: not yet
    hot_read()
    hot_read()
    assert len(prepared_on_this_connection(shape)) == 1


def settings_threshold(tmp_path, value: str | None) -> str:
    script = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
        "from django.conf import settings as s;"
        "print(s.DATABASES['default']['OPTIONS'].get('prepare_threshold', 'absent'))"
    )
    env = {"VAR_DIR": str(tmp_path), "DATABASE_URL": "postgres://u@127.0.0.1:5432/x"}
    if value is not None:
        env["DATABASE_PREPARE_THRESHOLD"] = value
    result = run(["-c", script], env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_threshold_is_five_by_default_and_zero_turns_it_off(tmp_path):
    assert settings_threshold(tmp_path, None) == "5"
    assert settings_threshold(tmp_path, "2") == "2"
    assert settings_threshold(tmp_path, "0") == "None"  # psycopg: never prepare
