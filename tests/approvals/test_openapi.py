"""The REST API's OpenAPI schema: it describes every /api/v1/ route and nothing else, it is a
valid OpenAPI 3.1 document, every body in it has an example that fits its schema, and the
real answers of every operation fit it too. It is served at /api/schema/ (and /api/schema),
with an explorer at /api/docs/ that loads nothing but this site's static files."""

import re
import subprocess
import sys
from datetime import timedelta
from http import HTTPStatus

import jsonschema
import pytest
from django.contrib.staticfiles import finders
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from tenants.models import Membership
from tests.approvals.test_api import bearer
from tests.groups import held_group, model_stub, planner
from tests.live import ROOT

pytestmark = pytest.mark.django_db

SKIPPED_METHODS = {"options", "head", "trace"}


def served_routes(patterns=None, prefix: str = "") -> dict[str, set[str]]:
    """Every /api/v1/ route Django serves, as OpenAPI writes its path, with its methods."""
    found: dict[str, set[str]] = {}
    for pattern in patterns if patterns is not None else get_resolver().url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            for path, methods in served_routes(pattern.url_patterns, route).items():
                found.setdefault(path, set()).update(methods)
        elif isinstance(pattern, URLPattern) and route.startswith("api/v1/"):
            view = getattr(pattern.callback, "cls", None)
            assert view is not None, f"{route} is not a REST framework view"
            path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
            found.setdefault(path, set()).update(set(view.http_method_names) - SKIPPED_METHODS)
    return found


def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def test_the_schema_describes_every_rest_route_and_nothing_else():
    served = served_routes()
    assert len(served) >= 9 and "/api/v1/interactions/{public_id}/answer" in served
    described = {
        path: set(operations) - SKIPPED_METHODS for path, operations in schema()["paths"].items()
    }
    assert described == served


def test_the_schema_is_valid_openapi_and_generates_without_a_warning():
    validate_schema(schema())
    # The command as `make docs` and a reader run it: warnings (a view it cannot read, a
    # name it had to guess) fail it.
    result = subprocess.run(
        [sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("openapi: 3.1.0")


def validator(document: dict, body_schema: dict) -> jsonschema.Draft202012Validator:
    """A validator of ``body_schema``, whose $refs point into the document's components."""
    root = {**body_schema, "components": document["components"]}
    return jsonschema.Draft202012Validator(root)


def bodies(document: dict):
    """(operation, where, media) of every request body and every response with content."""
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            name = f"{method.upper()} {path}"
            body = operation.get("requestBody")
            if body:
                for media in body["content"].values():
                    yield name, "request", media
            for status, response in operation["responses"].items():
                for media in response.get("content", {}).values():
                    yield name, status, media


def test_every_body_has_an_example_that_fits_its_schema():
    document = schema()
    seen = 0
    for name, where, media in bodies(document):
        examples = media.get("examples") or {}
        assert examples, f"{name} {where}: no example"
        check = validator(document, media["schema"])
        for title, example in examples.items():
            errors = [e.message for e in check.iter_errors(example["value"])]
            assert errors == [], f"{name} {where} {title!r}: {errors}"
            seen += 1
    assert seen > 40


@pytest.fixture
def responses(agents, client, settings, monkeypatch) -> list[tuple[str, str, int, object]]:
    """A real answer of every operation, and of its refusals: (method, path, status, body)."""
    found = []
    auth = bearer(agents.a.extra["operator_token"])
    partner = bearer(agents.a.token)

    def call(method, path, template, body=None, content_type="application/json", **headers):
        send = client.get if method == "get" else client.post
        kwargs = {"content_type": content_type} if method == "post" else {}
        response = (
            send(path, body, **kwargs, **headers)
            if body is not None
            else send(path, **kwargs, **headers)
        )
        found.append((method, template, response.status_code, response.json()))
        return response.json()

    make = agents.a.extra["make"]
    approval = make.approval(build="2026.10.06-1")
    one = "/api/v1/interactions/{public_id}"
    call("get", "/api/v1/interactions?state=open", "/api/v1/interactions", **auth)
    call("get", "/api/v1/interactions?state=sideways", "/api/v1/interactions", **auth)
    call("get", "/api/v1/interactions", "/api/v1/interactions", **partner)
    detail = call("get", f"/api/v1/interactions/{approval.public_id}", one, **auth)
    call("get", "/api/v1/interactions/eff_nothing", one, **auth)
    extend = f"/api/v1/interactions/{approval.public_id}/extend"
    call("post", extend, one + "/extend", {"by": "forever"}, **auth)
    call("post", extend, one + "/extend", "by", content_type="text/plain", **auth)
    call("post", extend, one + "/extend", {"by": "30m"}, **auth)
    answer = f"/api/v1/interactions/{approval.public_id}/answer"
    call("post", answer, one + "/answer", "approved", content_type="text/plain", **auth)
    call("post", answer, one + "/answer", {"approved": "yes"}, **auth)
    call(
        "post",
        answer,
        one + "/answer",
        {
            "approved": True,
            "reason": "staging is free",
            "argumentsHash": detail["heldCall"]["argumentsHash"],
            "allowSimilar": {
                "duration": "1d",
                "conditions": [{"field": "environment", "op": "equals", "value": "staging"}],
            },
        },
        **auth,
    )
    call("post", answer, one + "/answer", {"approved": False}, **auth)
    call("post", extend, one + "/extend", {"by": "30m"}, **auth)
    rules = call("get", "/api/v1/rules", "/api/v1/rules", **auth)
    revoke = f"/api/v1/rules/{rules[0]['id']}/revoke"
    call("post", revoke, "/api/v1/rules/{public_id}/revoke", {}, **auth)
    call("post", revoke, "/api/v1/rules/{public_id}/revoke", {}, **auth)
    question = make.question()
    cancel = f"/api/v1/tasks/{question.task.public_id}/cancel"
    call("post", cancel, "/api/v1/tasks/{public_id}/cancel", {}, **auth)
    call("post", cancel, "/api/v1/tasks/{public_id}/cancel", {"reason": "not needed"}, **auth)
    call("post", cancel, "/api/v1/tasks/{public_id}/cancel", {"reason": "again"}, **auth)
    call("get", "/api/v1/whoami", "/api/v1/whoami", **auth)
    member = agents.a.client_for(agents.a.operator)
    away = "/api/v1/me/away"
    until = (timezone.now() + timedelta(days=7)).isoformat()
    for method, body in [
        ("put", {"until": until, "delegate": "admin@acme.test"}),
        ("put", {"until": until, "delegate": "nobody@acme.test"}),
        ("get", None),
        ("delete", None),
    ]:
        send = getattr(member, method)
        response = send(away, body, content_type="application/json") if body else send(away)
        found.append((method, away, response.status_code, response.json()))
    refused = client.get(away, **auth)
    found.append(("get", away, refused.status_code, refused.json()))
    # An admin sets another member's: /api/v1/members/<id>/away.
    admin = agents.a.client_for(agents.a.admin)
    target = Membership.objects.get(tenant=agents.a.tenant, user=agents.a.operator)
    theirs = "/api/v1/members/{member_id}/away"
    for who, method, pk, body in [
        (admin, "put", target.pk, {"until": until, "delegate": "admin@acme.test"}),
        (admin, "put", target.pk, {"until": "soon"}),
        (admin, "get", target.pk, None),
        (admin, "delete", target.pk, None),
        (member, "get", target.pk, None),
        (admin, "get", 99999999, None),
    ]:
        send = getattr(who, method)
        path = f"/api/v1/members/{pk}/away"
        response = send(path, body, content_type="application/json") if body else send(path)
        found.append((method, theirs, response.status_code, response.json()))
    call("get", "/api/v1/whoami", "/api/v1/whoami", **partner)
    with model_stub(settings, monkeypatch) as stub:
        planner(agents.a.tenant)
        _, calls = held_group(agents.a, stub)
        group = f"/api/v1/groups/{calls[0].group_id}"
        shown = call("get", group, "/api/v1/groups/{public_id}", **auth)
        hashes = {c["id"]: c["heldCall"]["argumentsHash"] for c in shown["interactions"]}
        template = "/api/v1/groups/{public_id}/answer"
        call("post", f"{group}/answer", template, {"approved": False, "value": 1}, **auth)
        body = {"approved": False, "reason": "not today", "argumentsHashes": hashes}
        call("post", f"{group}/answer", template, body, **auth)
        call("post", f"{group}/answer", template, body, **auth)
        call("get", "/api/v1/groups/grp_nothing", "/api/v1/groups/{public_id}", **auth)
    return found


def test_the_real_answers_of_every_operation_fit_the_schema(responses):
    document = schema()
    statuses = {(method, path, status) for method, path, status, _ in responses}
    for method, path, status, body in responses:
        operation = document["paths"][path][method]
        documented = operation["responses"].get(str(status))
        assert documented is not None, f"{method.upper()} {path} answered {status}, undocumented"
        media = documented["content"]["application/json"]
        errors = [e.message for e in validator(document, media["schema"]).iter_errors(body)]
        assert errors == [], f"{method.upper()} {path} {status}: {errors}"
    # Every operation answered, and each of these refusals was seen for real.
    assert {(m, p) for m, p, _ in statuses} == {
        (method, path) for path, ops in document["paths"].items() for method in ops
    }
    for expected in [
        ("get", "/api/v1/interactions", 400),
        ("get", "/api/v1/interactions", 403),
        ("post", "/api/v1/interactions/{public_id}/answer", 415),
        ("post", "/api/v1/interactions/{public_id}/answer", 409),
        ("post", "/api/v1/interactions/{public_id}/extend", 400),
        ("post", "/api/v1/interactions/{public_id}/extend", 409),
        ("post", "/api/v1/rules/{public_id}/revoke", 409),
        ("post", "/api/v1/tasks/{public_id}/cancel", 400),
        ("post", "/api/v1/tasks/{public_id}/cancel", 409),
        ("post", "/api/v1/groups/{public_id}/answer", 400),
        ("post", "/api/v1/groups/{public_id}/answer", 409),
        ("get", "/api/v1/groups/{public_id}", 404),
    ]:
        assert expected in statuses, expected


def test_the_schema_is_served_with_and_without_the_trailing_slash(client):
    slashed = client.get("/api/schema/", {"format": "json"})
    assert slashed.status_code == HTTPStatus.OK
    assert slashed.json()["openapi"] == "3.1.0"
    assert client.get("/api/schema", {"format": "json"}).json() == slashed.json()


def test_the_explorer_loads_only_this_sites_static_files_under_the_csp(client):
    page = client.get("/api/docs/")
    assert page.status_code == HTTPStatus.OK
    assert "script-src 'self'" in page["Content-Security-Policy"]
    html = page.content.decode()
    assert 'data-schema-url="/api/schema/"' in html
    sources = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
    assert len(sources) == 5 and all(source.startswith("/static/") for source in sources)
    for source in sources:
        assert finders.find(source.removeprefix("/static/")), source
    # Nothing runs inline: every script has a src, and there is no style element.
    assert re.findall(r"<script(?![^>]*\bsrc=)", html) == [] and "<style" not in html
