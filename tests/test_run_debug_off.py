"""`make run` with DEBUG=false serves pages, because scripts/run.py
collects the static files the manifest storage names before it starts the servers."""

import importlib.util
import os
import subprocess
import sys
from http import HTTPStatus

import pytest
from django.conf import settings
from django.core.management import call_command

MANIFEST_STORAGE = "whitenoise.storage.CompressedManifestStaticFilesStorage"


def load_run_script():
    spec = importlib.util.spec_from_file_location(
        "countersign_run", settings.BASE_DIR / "scripts" / "run.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("debug", ["false", "0", "off"])
def test_run_collects_static_files_when_debug_is_off(monkeypatch, debug):
    monkeypatch.setenv("DEBUG", debug)
    commands = load_run_script().static_commands()
    assert [c[1:3] for c in commands] == [["manage.py", "collectstatic"]]
    assert "--noinput" in commands[0]


@pytest.mark.parametrize("debug", [None, "true"])
def test_run_serves_source_static_files_when_debug_is_on(monkeypatch, debug):
    if debug is None:
        monkeypatch.delenv("DEBUG", raising=False)
    else:
        monkeypatch.setenv("DEBUG", debug)
    assert load_run_script().static_commands() == []


def test_debug_off_settings_use_the_manifest_storage():
    # The storage that needs collectstatic is what a DEBUG=false process really configures.
    code = "from django.conf import settings; print(settings.STORAGES['staticfiles']['BACKEND'])"
    env = {"DEBUG": "false", "SECRET_KEY": "x" * 50, "DJANGO_SETTINGS_MODULE": "config.settings"}
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=settings.BASE_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == MANIFEST_STORAGE


@pytest.mark.django_db
def test_pages_with_debug_off_need_collectstatic_and_serve_after_it(settings, tmp_path, client):
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path / "staticfiles"
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {"BACKEND": MANIFEST_STORAGE}}
    # What the probe saw: without collectstatic, a page cannot name its stylesheet.
    with pytest.raises(ValueError, match="Missing staticfiles manifest entry"):
        client.get("/accounts/login/")
    call_command("collectstatic", interactive=False, verbosity=0)
    response = client.get("/accounts/login/")
    assert response.status_code == HTTPStatus.OK
    html = response.content.decode()
    assert "/static/countersign." in html and "/static/countersign.css" not in html
    assert (settings.STATIC_ROOT / "staticfiles.json").exists()
