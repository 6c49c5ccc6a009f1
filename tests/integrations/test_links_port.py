"""One address everywhere: with no PUBLIC_BASE_URL, every link the server writes where no
request tells its address (e-mails, invitations, Slack messages, the Slack manifest, the
`make run` banner) names the host and port it listens on, as the banner prints them, so that
a link's page shares the session cookie of the banner's login."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core import mail
from django.core.management import call_command

from config.banner import banner, base_url
from config.env import listen_url
from integrations.slack.settings import request_url, slack_manifest
from notifications.channel_settings import channel_save

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent.parent
URL = re.compile(r"https?://[^\s\"'<>)\]|]+")
DEMO = {
    "token": "cs_partner_token",
    "operator_token": "cs_operator_token",
    "agents": {"support": "/a2a/demo/support", "deployer": "/a2a/demo/deployer"},
    "logins": {
        "operator": {"email": "operator@demo.test", "password": "pw"},
        "admin": {"email": "admin@demo.test", "password": "pw"},
    },
}


def hosts(text: str) -> set[str]:
    """The host:port of every http(s) link in ``text``, but Slack's and example ones."""
    return {
        urlsplit(url).netloc
        for url in URL.findall(text)
        if not urlsplit(url).netloc.endswith((".invalid", "slack.com", "api.openai.com"))
    }


def test_the_settings_take_the_port_and_host_the_server_is_started_with():
    """As `PORT=8123 make run` starts the web server and the worker (scripts/run.py)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PUBLIC_BASE_URL", "NOTIFY_BASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env.update(PORT="8123", HOST="0.0.0.0", ENV_FILE="", DEBUG="true")
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings'; "
        "django.setup(); from config.site import site_url; print(site_url())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "http://127.0.0.1:8123"


@pytest.fixture
def port_8123(settings):
    """The settings as `PORT=8123 make run` makes them: no PUBLIC_BASE_URL, no
    NOTIFY_BASE_URL."""
    settings.LISTEN_URL = listen_url("127.0.0.1", "8123")
    settings.PUBLIC_BASE_URL = ""
    settings.NOTIFY_BASE_URL = ""
    return "127.0.0.1:8123"


def test_with_port_8123_every_link_in_emails_banners_and_slack_points_at_port_8123(
    agents, slack_app, held, port_8123, settings
):
    settings.PUBLIC_BASE_URL = ""  # the notify fixture's, undone
    tenant = agents.a.tenant
    channel_save(tenant=tenant, name="ops mail", kind="email", email_roles=["operator"])
    call_command("members", "invite", "newcomer@acme.test", "--tenant", "acme")
    held()

    mails = "\n".join(
        m.body + "".join(content for content, _ in getattr(m, "alternatives", []))
        for m in mail.outbox
    )
    assert {"Approve", "Deny", "invitation"} <= set(re.findall(r"Approve|Deny|invitation", mails))
    assert hosts(mails) == {port_8123}
    posted = json.dumps(slack_app.called("chat.postMessage"))
    assert "Open in Countersign" in posted
    assert hosts(posted) == {port_8123}
    assert hosts(request_url(tenant)) == {port_8123}
    # Slack sends clicks to HTTPS only: with no public address, the manifest asks for Socket
    # Mode instead of naming a Request URL that could not work.
    manifest = slack_manifest(tenant)["settings"]
    assert (
        manifest["socket_mode_enabled"] is True and "request_url" not in manifest["interactivity"]
    )
    environ = {"PORT": "8123"}
    text = banner(DEMO, base_url(environ), environ=environ)
    assert "/inbox/" in text and "/dev/outbox/" in text
    # Besides the example address of a local model server (OPENAI_BASE_URL, Ollama's port).
    assert hosts(text) - {"127.0.0.1:11434"} == {port_8123}


def test_a_public_base_url_wins_for_links_and_the_banner_says_where_they_point(
    agents, port_8123, settings
):
    settings.PUBLIC_BASE_URL = "https://tunnel.example"
    settings.ALLOWED_HOSTS = ["tunnel.example"]
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    call_command("members", "invite", "newcomer@acme.test", "--tenant", "acme")
    assert hosts(mail.outbox[-1].body) == {"tunnel.example"}
    environ = {"PORT": "8123", "PUBLIC_BASE_URL": "https://tunnel.example"}
    text = banner(DEMO, base_url(environ), environ=environ)
    assert "links in e-mails and Slack point at https://tunnel.example" in text
