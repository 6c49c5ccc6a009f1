"""The deployment kit runs the commands docs/how-to/production.md documents: the
Dockerfile, compose.yaml, the systemd units and the Procfile are parsed and compared; the
documented web command is started for real."""

import json
import re
import shlex
import subprocess
import sys

import httpx
import pytest
import yaml

from tests.live import ROOT, database_url, free_port, wait_until

BIN = f"{sys.prefix}/bin"
SYSTEMD = ROOT / "deploy" / "systemd"
VENV_BIN = "/opt/countersign/.venv/bin/"


def production_section() -> str:
    page = (ROOT / "docs" / "how-to" / "production.md").read_text()
    start = page.index("# Running in production")
    return page[start : page.index("## Deployment kit", start)]


def documented() -> dict[str, str]:
    """The commands of the production page's steps, by role."""
    blocks = re.findall(r"```sh(?: \{[^}\n]*\})?\n(.*?)```", production_section(), re.S)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    roles = {
        "migrate": lambda c: c.startswith("python manage.py migrate"),
        "collectstatic": lambda c: c.startswith("python manage.py collectstatic"),
        "web": lambda c: c.startswith("gunicorn "),
        "worker": lambda c: c.startswith("celery ") and " worker" in c,
        "beat": lambda c: c.startswith("celery ") and " beat" in c,
    }
    found = {}
    for role, matches in roles.items():
        commands = [line for line in lines if line and matches(line)]
        assert len(commands) == 1, (role, commands)
        found[role] = " ".join(shlex.split(commands[0]))
    return found


def test_the_readme_documents_the_uvicorn_worker_package():
    commands = documented()
    assert "-k uvicorn_worker.UvicornWorker" in commands["web"]
    assert "uvicorn.workers" not in production_section()
    assert commands["migrate"] == "python manage.py migrate --noinput"
    assert commands["collectstatic"] == "python manage.py collectstatic --noinput"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"uvicorn-worker>=' in pyproject
    assert "uvicorn-worker==" in (ROOT / "constraints.txt").read_text()


def test_the_procfile_runs_the_documented_commands():
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip():
            name, _, command = line.partition(":")
            entries[name.strip()] = " ".join(shlex.split(command))
    commands = documented()
    assert entries == {
        "release": commands["migrate"],
        "web": commands["web"],
        "worker": commands["worker"],
        "beat": commands["beat"],
    }


def test_compose_runs_the_documented_commands_with_health_checks():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    commands = documented()

    def command(name):
        value = services[name]["command"]
        return " ".join(value) if isinstance(value, list) else " ".join(shlex.split(value))

    assert {"db", "redis", "migrate", "web", "worker", "beat"} <= set(services)
    for role in ("migrate", "web", "worker", "beat"):
        assert command(role) == commands[role]
    assert services["db"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    for name in ("db", "redis", "web", "worker", "beat"):
        assert services[name]["healthcheck"]["test"], name
    assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["db"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        env = services[name]["environment"]
        assert env["DEBUG"] == "false"
        assert env["DATABASE_URL"].startswith("postgres://") and "@db:5432/" in env["DATABASE_URL"]
        assert env["CELERY_BROKER_URL"] == "redis://redis:6379/0"
        # The web serves the workers' counters through one shared directory.
        assert "metrics:" + env["PROMETHEUS_MULTIPROC_DIR"] in services[name]["volumes"]
    assert services["web"]["build"] == "."


def interpolate(text: str, env: dict) -> str:
    """compose's ${NAME}, ${NAME:-default} (nested), ${NAME-default}, ${NAME:?error}, $$."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                depth += (
                    {"{": 1, "}": -1}.get(text[j], 0) if text[j - 1] == "$" or text[j] == "}" else 0
                )
                j += 1
            inner = text[i + 2 : j - 1]
            name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", inner).group()
            rest = inner[len(name) :]
            value = env.get(name)
            if rest.startswith(":?"):
                assert value, f"compose refuses to start: {rest[2:]}"
            elif rest.startswith(":-"):
                value = value or interpolate(rest[2:], env)
            elif rest.startswith("-"):
                value = interpolate(rest[1:], env) if value is None else value
            out.append(value or "")
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def compose_environment(service: str, dotenv: dict, shell: dict | None = None) -> dict:
    """The environment compose gives a service's container: .env (env_file) and then the
    service's ``environment``, interpolated from the shell and .env (the shell wins)."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    definition = compose["services"][service]
    [env_file] = definition["env_file"]
    assert env_file == {"path": ".env", "required": False}
    variables = {**dotenv, **(shell or {})}
    resolved = dict(dotenv)
    for name, value in definition["environment"].items():
        if value is None:  # passed through when set, else left out
            if name in variables:
                resolved[name] = variables[name]
            else:
                resolved.pop(name, None)
        else:
            resolved[name] = interpolate(str(value), variables)
    return resolved


REQUIRED = {
    "SECRET_KEY": "compose-test-secret-key-0123456789-abcdefghijklmnop",
    "POSTGRES_PASSWORD": "pw",
}


def test_compose_gives_every_process_the_dotenv_and_serves_plain_http_by_default():
    env = compose_environment("worker", {**REQUIRED})
    assert env["SECURE_SSL_REDIRECT"] == "false"
    assert env["SESSION_COOKIE_SECURE"] == env["CSRF_COOKIE_SECURE"] == "false"
    assert {"localhost", "127.0.0.1"} <= set(env["ALLOWED_HOSTS"].split(","))
    assert "EMAIL_HOST" not in env and "OPENAI_API_KEY" not in env  # unset stays unset
    behind_tls = compose_environment("web", {**REQUIRED, "SECURE_SSL_REDIRECT": "true"})
    assert behind_tls["SESSION_COOKIE_SECURE"] == behind_tls["CSRF_COOKIE_SECURE"] == "true"
    with pytest.raises(AssertionError, match="set SECRET_KEY"):
        compose_environment("web", {"POSTGRES_PASSWORD": "pw"})


OPERATOR_DOTENV = {
    **REQUIRED,
    "EMAIL_HOST": "smtp.acme.test",
    "EMAIL_PORT": "2525",
    "EMAIL_HOST_USER": "mailer",
    "EMAIL_HOST_PASSWORD": "mail-secret",
    "EMAIL_USE_TLS": "true",
    "DEFAULT_FROM_EMAIL": "Countersign <cs@acme.test>",
    "NOTIFY_BASE_URL": "https://cs.acme.test",
    "TIME_ZONE": "Europe/Paris",
    "OPENAI_API_KEY": "sk-test-" + "k" * 30,
    "OPENAI_MODEL": "gpt-4.1-mini",
    # As .env.example has them, for make run: the container's own win.
    "HOST": "127.0.0.1",
    "PORT": "9000",
    "DEBUG": "true",
    "VAR_DIR": "./var",
    "DATABASE_URL": "postgres://countersign@127.0.0.1:5432/countersign",
}


@pytest.mark.django_db(transaction=True)
def test_compose_as_written_serves_http_localhost_with_email_from_dotenv(tmp_path):
    env = compose_environment("web", OPERATOR_DOTENV, shell={"EMAIL_PORT": "587"})
    assert (env["HOST"], env["PORT"], env["DEBUG"], env["VAR_DIR"]) == (
        "0.0.0.0", "8000", "false", "/app/var",
    )  # fmt: skip
    assert env["DATABASE_URL"] == "postgres://countersign:pw@db:5432/countersign"
    assert env["EMAIL_PORT"] == "587"  # the shell wins over .env
    # The settings and a page as that container has them (its database and broker are the
    # test's here, there being no db or redis host).
    env.update(
        DATABASE_URL=database_url(),
        DATABASE_POOL="false",
        CELERY_BROKER_URL="memory://",
        VAR_DIR=str(tmp_path),
        PATH=f"{BIN}:/usr/bin:/bin",
        ENV_FILE="",
        DJANGO_SETTINGS_MODULE="config.settings",
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR")
    code = (
        "import django; django.setup(); from django.conf import settings as s;"
        "from django.test import Client;"
        "r = Client().get('/', HTTP_HOST='localhost:8000');"
        "print(r.status_code, r['Location'], s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.EMAIL_BACKEND,"
        " s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_HOST_USER, s.EMAIL_HOST_PASSWORD, s.EMAIL_USE_TLS,"
        " s.TIME_ZONE, s.NOTIFY_BASE_URL, s.OPENAI_MODEL if hasattr(s, 'OPENAI_MODEL') else '-')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:12] == [
        # To the login page on plain http (SECURE_SSL_REDIRECT sent it to https://).
        "302",
        "/accounts/login/",
        "False",
        "False",
        "django.core.mail.backends.smtp.EmailBackend",
        "smtp.acme.test",
        "587",
        "mailer",
        "mail-secret",
        "True",
        "Europe/Paris",
        "https://cs.acme.test",
    ]


def unit(path) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            keys.setdefault(key.strip(), []).append(value.strip())
    return keys


def test_the_systemd_units_run_the_documented_commands():
    commands = documented()
    for role in ("migrate", "web", "worker", "beat"):
        keys = unit(SYSTEMD / f"countersign-{role}.service")
        (exec_start,) = keys["ExecStart"]
        assert exec_start.startswith(VENV_BIN), exec_start
        assert " ".join(shlex.split(exec_start.removeprefix(VENV_BIN))) == commands[role]
        assert keys["User"] == ["countersign"]
        assert keys["WorkingDirectory"] == ["/opt/countersign"]
        assert keys["EnvironmentFile"] == ["/etc/countersign/env"]
        if role != "migrate":
            assert keys["Requires"] == ["countersign-migrate.service"]
    assert unit(SYSTEMD / "countersign-migrate.service")["Type"] == ["oneshot"]


def dockerfile() -> list[str]:
    """Its instructions, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_the_dockerfile_is_multi_stage_non_root_with_static_files_collected():
    instructions = dockerfile()
    stages = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert len(stages) >= 2
    final = instructions[stages[-1] :]
    assert any(line.startswith("COPY --from=") for line in final), (
        "the runtime stage takes the build stage's virtualenv"
    )
    runs = " ".join(line for line in final if line.startswith("RUN "))
    assert documented()["collectstatic"] in runs
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    (cmd,) = [line for line in final if line.startswith("CMD ")]
    assert " ".join(json.loads(cmd.removeprefix("CMD "))) == documented()["web"]
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "var", ".git", ".env"} <= set(ignored)


@pytest.mark.django_db(transaction=True)
def test_the_documented_web_command_serves_probes_and_metrics(tmp_path):
    """gunicorn with uvicorn_worker, as documented, in production mode on the test database."""
    port = free_port()
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "WEB_CONCURRENCY": "2",
        "DEBUG": "false",
        "SECRET_KEY": "deploy-kit-test-secret-key-0123456789-abcdefghijklmnop",
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": database_url(),
        "DATABASE_POOL": "false",
        "CELERY_BROKER_URL": "memory://",
        "VAR_DIR": str(tmp_path / "var"),
        "METRICS_TOKEN": "deploy-kit-metrics",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    log = open(tmp_path / "gunicorn.log", "wb")
    process = subprocess.Popen(
        shlex.split(documented()["web"]),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up():
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return process.poll() is not None

        wait_until(up, 30, what="gunicorn")
        assert process.poll() is None, (tmp_path / "gunicorn.log").read_text()
        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ok"
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 401
        scraped = httpx.get(
            f"{url}/metrics", headers={"Authorization": "Bearer deploy-kit-metrics"}, timeout=10
        )
        assert scraped.status_code == 200
        assert "countersign_push_backlog " in scraped.text
        log_text = (tmp_path / "gunicorn.log").read_text()
        assert "Using worker: uvicorn_worker.UvicornWorker" in log_text, log_text
    finally:
        process.terminate()
        process.wait(20)
