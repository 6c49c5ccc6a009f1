"""A Content-Security-Policy on every page, and pages that need no inline
script to work under it."""

import re
from html.parser import HTMLParser
from http import HTTPStatus
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from runtime.agents.demo import seed_demo_agents

pytestmark = pytest.mark.django_db

ROOT = Path(settings.BASE_DIR)
# Script types a browser does not run: data blocks (allauth's onload data, DRF's CSRF).
DATA_SCRIPT_TYPES = {"application/json", "application/ld+json"}


class InlineScripts(HTMLParser):
    """Collects what a CSP without 'unsafe-inline' would block: inline <script> bodies,
    on* event handler attributes and javascript: URLs."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._inline_script: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name, value in attrs.items():
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
            if name in ("href", "src", "action", "formaction") and (
                value or ""
            ).strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}=javascript:...>")
        if tag == "script" and "src" not in attrs:
            if (attrs.get("type") or "").lower() not in DATA_SCRIPT_TYPES:
                self._inline_script = ""

    def handle_data(self, data):
        if self._inline_script is not None:
            self._inline_script += data

    def handle_endtag(self, tag):
        if tag == "script" and self._inline_script is not None:
            if self._inline_script.strip():
                self.found.append(f"<script>{self._inline_script.strip()[:60]}</script>")
            self._inline_script = None


def inline_scripts(html: str) -> list[str]:
    parser = InlineScripts()
    parser.feed(html)
    parser.close()
    return parser.found


def our_templates() -> list[Path]:
    folders = [ROOT / "templates"] + [
        path for path in ROOT.glob("*/templates") if not path.parts[-2].startswith(".")
    ]
    return sorted(p for folder in folders for p in folder.rglob("*.html"))


def directives(policy: str) -> dict[str, list[str]]:
    parsed = {}
    for directive in policy.split(";"):
        name, *values = directive.split()
        parsed[name] = values
    return parsed


def test_the_scanner_finds_what_a_csp_blocks():
    # The scan below is only as good as this parser: it must see every form of inline code.
    assert inline_scripts("<script>alert(1)</script>") == ["<script>alert(1)</script>"]
    assert inline_scripts('<select onchange="this.form.submit()">') == ["<select onchange=...>"]
    assert inline_scripts('<a href=" JavaScript:go()">x</a>') == ["<a href=javascript:...>"]
    assert inline_scripts('<script src="/static/a.js"></script>') == []
    assert inline_scripts('<script type="application/json">{"a": 1}</script>') == []


def test_no_template_has_an_inline_script_or_handler():
    templates = our_templates()
    assert ROOT / "templates" / "base.html" in templates
    assert any(p.name == "inbox.html" for p in templates)
    found = {str(p.relative_to(ROOT)): inline_scripts(p.read_text()) for p in templates}
    assert {path: hits for path, hits in found.items() if hits} == {}


def test_policy_is_self_only_and_allows_no_inline_script():
    policy = directives(settings.CONTENT_SECURITY_POLICY)
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    for values in policy.values():
        assert "'unsafe-inline'" not in values and "'unsafe-eval'" not in values
        assert "*" not in values


def test_every_page_has_the_content_security_policy(world, client):
    seed_demo_agents(tenant=world.a.tenant)
    anonymous = ["/accounts/login/", "/healthz", "/no-such-page/", "/api/v1/interactions"]
    for path in anonymous:
        response = client.get(path)
        assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY, path
    world.a.admin.is_staff = world.a.admin.is_superuser = True
    world.a.admin.save(update_fields=["is_staff", "is_superuser"])
    member = world.a.client_for(world.a.admin)
    pages = ["/", "/inbox/", "/inbox/fragment", "/tasks/", "/audit/", "/connections/"]
    pages += ["/admin/", "/admin/tenants/apitoken/add/", "/api/v1/interactions"]
    pages += ["/accounts/password/change/", "/accounts/2fa/"]
    for path in pages:
        response = member.get(path, follow=True)
        assert response.status_code == HTTPStatus.OK, path
        assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY, path
        if "text/html" in response["Content-Type"]:
            assert inline_scripts(response.content.decode()) == [], path


def test_the_pages_of_a_paused_turn_run_no_inline_script(world, client):
    from tests.core import Maker

    seed_demo_agents(tenant=world.a.tenant)
    interaction = Maker(world.a).approval()
    member = world.a.client_for(world.a.operator)
    for url in (
        reverse("approvals:interaction", args=[interaction.public_id]),
        reverse("approvals:task", args=[interaction.task.public_id]),
    ):
        response = member.get(url)
        assert response.status_code == HTTPStatus.OK
        assert "Content-Security-Policy" in response
        assert inline_scripts(response.content.decode()) == [], url


def test_tenant_switcher_submits_from_a_static_script(world):
    from tenants.models import Membership

    Membership.objects.create(tenant=world.b.tenant, user=world.a.operator, role="viewer")
    html = world.a.client_for(world.a.operator).get("/inbox/").content.decode()
    assert re.search(r'<select id="tenant-switch" name="tenant" data-autosubmit>', html)
    assert "countersign.js" in html
    script = (ROOT / "static" / "countersign.js").read_text()
    assert "select[data-autosubmit]" in script and "form.submit()" in script
