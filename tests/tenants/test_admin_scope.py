"""Tenant admins run their own tenant in Django admin and nothing else.

The walk goes through every model admin registered on the site (``admin.site._registry``,
so an admin registered later is walked too) as the admin of tenant A and proves that nothing
of tenant B is visible or changeable: list, search, filters, the raw-id popup, change,
delete, history, actions, autocomplete and the choices of every form.
"""

import json
from http import HTTPStatus

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.forms.models import model_to_dict
from django.test import Client

from notifications.models import Channel, Delivery
from runtime.agents.agent_models import Agent, ToolServer
from tenants.admin_scope import tenant_filter, tenant_path
from tenants.models import ApiToken, Membership, Tenant, User
from tests.admin_pages import change_links, populate, read_form, tenant_admin_client

pytestmark = pytest.mark.django_db


def rows_of(model, tenant):
    path = tenant_path(model)
    return list(model._default_manager.filter(**tenant_filter(path, tenant))) if path else []


def url(model, *parts) -> str:
    meta = model._meta
    return "/".join(["", "admin", meta.app_label, meta.model_name, *map(str, parts), ""])


def snapshot(obj):
    fresh = type(obj)._default_manager.filter(pk=obj.pk).first()
    return None if fresh is None else json.dumps(model_to_dict(fresh), default=str, sort_keys=True)


@pytest.fixture
def scoped_world(world, make_agent):
    populate(world, make_agent)
    return world


def registered():
    return sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label)


def test_the_walk_covers_every_registered_admin_and_each_has_rows_in_both_tenants(scoped_world):
    """Not vacuous: every tenant-owned model the walk visits has rows of both tenants."""
    missing = [
        model._meta.label
        for model, _ in registered()
        if tenant_path(model) is not None
        and model_admin_is_scoped(model)
        and not (rows_of(model, scoped_world.a.tenant) and rows_of(model, scoped_world.b.tenant))
    ]
    assert not missing, f"add rows of both tenants to tests.admin_pages.populate: {missing}"


def model_admin_is_scoped(model) -> bool:
    return admin.site._registry[model].scope_path() is not None


def test_a_tenant_admin_sees_nothing_of_another_tenant_in_any_admin(scoped_world):
    a, b = scoped_world.a, scoped_world.b
    client = tenant_admin_client(a)
    problems = []
    seen_own = []
    other_before = other_tenant_rows(b.tenant)
    for model, model_admin in registered():
        label = model._meta.label
        theirs = rows_of(model, b.tenant)
        mine = rows_of(model, a.tenant)
        changelist = client.get(url(model))
        if model_admin.scope_path() is None:
            # Platform staff's only: the catalog, model prices, people's accounts, allauth's.
            if changelist.status_code != HTTPStatus.FORBIDDEN:
                problems.append(f"{label}: changelist {changelist.status_code}, not 403")
            continue
        if changelist.status_code != HTTPStatus.OK:
            problems.append(f"{label}: changelist {changelist.status_code}")
            continue
        meta = model._meta
        for query in (
            "",
            "?q=globex",
            "?_popup=1&_to_field=id",
            f"?tenant__id__exact={b.tenant.pk}",
        ):
            page = client.get(url(model) + query, follow=True).content.decode()
            leaked = change_links(page, meta.app_label, meta.model_name) & {
                str(o.pk) for o in theirs
            }
            if leaked:
                problems.append(f"{label}{query}: lists {leaked} of the other tenant")
            if "Globex" in page or "globex.test" in page:
                problems.append(f"{label}{query}: names the other tenant")
        listed = change_links(changelist.content.decode(), meta.app_label, meta.model_name)
        if mine and not listed & {str(o.pk) for o in mine}:
            problems.append(f"{label}: lists none of the tenant's own rows")
        else:
            seen_own.append(label)
        actions = read_form(changelist.content.decode()).options.get("action", [])
        for obj in theirs[:2]:
            before = snapshot(obj)
            for view in ("change", "delete", "history"):
                response = client.get(url(model, obj.pk, view))
                if response.status_code != HTTPStatus.NOT_FOUND:
                    problems.append(f"{label} {obj.pk}: GET {view} {response.status_code}")
            for view in ("change", "delete"):
                response = client.post(url(model, obj.pk, view), {"post": "yes"})
                if response.status_code != HTTPStatus.NOT_FOUND:
                    problems.append(f"{label} {obj.pk}: POST {view} {response.status_code}")
            for action in [a for a in actions if a]:
                # Django runs the action on the selection within the changelist's queryset:
                # here, an empty one (nothing of the other tenant changes, checked below).
                response = client.post(
                    url(model),
                    {"action": action, "_selected_action": [obj.pk], "index": 0, "post": "yes"},
                )
                if response.status_code >= 500:
                    problems.append(f"{label}: action {action} answered {response.status_code}")
            if snapshot(obj) != before:
                problems.append(f"{label} {obj.pk}: changed")
        for page_url in [url(model, "add")] + [url(model, o.pk, "change") for o in mine[:1]]:
            response = client.get(page_url)
            if response.status_code != HTTPStatus.OK:
                continue
            problems += choice_leaks(label, response.content.decode(), model, b.tenant)
    if other_tenant_rows(b.tenant) != other_before:
        problems.append("the other tenant's rows changed during the walk")
    assert not problems, "\n".join(problems)
    assert "runtime.Agent" in seen_own and "tenants.ApiToken" in seen_own


def other_tenant_rows(tenant) -> dict:
    """Every row of the tenant in every model an admin shows, as it is now (and how many
    deliveries and mails it has: actions such as "send a test" add rows)."""
    rows = {}
    for model, _ in registered():
        if tenant_path(model) is not None:
            rows[model._meta.label] = sorted(
                json.dumps(model_to_dict(o), default=str, sort_keys=True)
                for o in rows_of(model, tenant)
            )
    return rows


def choice_leaks(label, html, model, other) -> list[str]:
    """Every select of the form offers none of the other tenant's rows; the tenant field is
    disabled and offers this tenant alone."""
    reader = read_form(html)
    problems = []
    for field in model._meta.get_fields():
        if not (field.is_relation and field.concrete):
            continue
        offered = set(reader.options.get(field.name, []))
        theirs = {str(o.pk) for o in rows_of(field.related_model, other)}
        if offered & theirs:
            problems.append(f"{label}.{field.name}: offers the other tenant's {offered & theirs}")
        if field.related_model is Tenant and field.name in reader.options:
            if field.name not in reader.disabled:
                problems.append(f"{label}.{field.name}: the tenant field is editable")
    # Selects of a form's own fields that offer rows of a model (not the model's fields).
    for name, related in FORM_CHOICES.get(label, {}).items():
        offered = set(reader.options.get(name, []))
        theirs = {str(o.pk) for o in rows_of(related, other)}
        if offered & theirs:
            problems.append(f"{label}.{name}: offers the other tenant's {offered & theirs}")
    return problems


# A member's page in Django admin offers a delegate for their out of office.
FORM_CHOICES = {"tenants.Membership": {"away_delegate": Membership}}


def test_autocomplete_offers_only_the_tenants_rows(scoped_world):
    a, b = scoped_world.a, scoped_world.b
    client = tenant_admin_client(a)
    problems = []
    asked = 0
    for source, _ in registered():
        for field in source._meta.get_fields():
            if not (field.is_relation and field.concrete) or field.related_model is None:
                continue
            remote_admin = admin.site._registry.get(field.related_model)
            if remote_admin is None or not remote_admin.search_fields:
                continue
            response = client.get(
                "/admin/autocomplete/",
                {
                    "app_label": source._meta.app_label,
                    "model_name": source._meta.model_name,
                    "field_name": field.name,
                    "term": "",
                },
            )
            if response.status_code != HTTPStatus.OK:
                continue
            asked += 1
            ids = {r["id"] for r in response.json()["results"]}
            theirs = {str(o.pk) for o in rows_of(field.related_model, b.tenant)}
            if ids & theirs:
                problems.append(f"{source._meta.label}.{field.name}: {ids & theirs}")
    assert asked, "no autocomplete was asked: the walk proved nothing"
    assert not problems, problems


def test_the_index_and_app_pages_name_no_other_tenant(scoped_world):
    client = tenant_admin_client(scoped_world.a)
    for path in ["/admin/"] + [f"/admin/{app}/" for app in ("tenants", "runtime", "notifications")]:
        page = client.get(path)
        assert page.status_code == HTTPStatus.OK, path
        text = page.content.decode()
        assert "Globex" not in text and "globex" not in text
    assert "Acme Corp" in client.get("/admin/").content.decode()


def test_a_tool_servers_refresh_of_another_tenant_is_a_404(scoped_world):
    client = tenant_admin_client(scoped_world.a)
    theirs = ToolServer.objects.get(tenant=scoped_world.b.tenant)
    response = client.post(f"/admin/runtime/toolserver/{theirs.pk}/refresh/")
    assert response.status_code == HTTPStatus.NOT_FOUND


def test_a_policy_preview_of_another_tenants_agent_is_a_404(scoped_world):
    client = tenant_admin_client(scoped_world.a)
    theirs = Agent.objects.get(tenant=scoped_world.b.tenant, slug="shipper")
    response = client.post(
        f"/admin/runtime/agent/{theirs.pk}/policy-preview/",
        {"preview-tool": "deploy/deploy_build", "preview-arguments": "{}"},
    )
    assert response.status_code == HTTPStatus.NOT_FOUND


def test_a_channels_send_test_of_another_tenant_is_a_404_and_sends_nothing(scoped_world):
    client = tenant_admin_client(scoped_world.a)
    theirs = Channel.objects.get(tenant=scoped_world.b.tenant)
    response = client.post(f"/admin/notifications/channel/{theirs.pk}/send-test/")
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert not Delivery.objects.filter(channel=theirs, event="test").exists()


def test_staff_of_another_tenant_with_every_model_permission_see_nothing_of_this_one(
    scoped_world,
):
    """Staff of `other` with Django model permissions neither see demo's tokens and tasks nor
    change demo's agent policy to `allow`: those permissions know no tenants."""
    a, b = scoped_world.a, scoped_world.b
    agent = Agent.objects.get(tenant=a.tenant, slug="shipper")
    policy = agent.tool_policy
    for role in ("operator", "admin"):
        staff = getattr(b, role)
        staff.is_staff = True
        staff.save(update_fields=["is_staff"])
        staff.user_permissions.set(Permission.objects.all())
        client = Client()
        client.force_login(staff)
        tokens = client.get("/admin/tenants/apitoken/")
        tasks = client.get("/admin/runtime/task/")
        if role == "operator":
            # Not an admin of any tenant: model permissions open nothing.
            assert tokens.status_code == tasks.status_code == HTTPStatus.FORBIDDEN
        else:
            for page in (tokens, tasks):
                assert page.status_code == HTTPStatus.OK
                assert a.tenant.slug not in page.content.decode()
            mine = ApiToken.objects.get(tenant=b.tenant)
            assert str(mine.pk) in change_links(tokens.content.decode(), "tenants", "apitoken")
        change = client.get(f"/admin/runtime/agent/{agent.pk}/change/")
        assert change.status_code in (HTTPStatus.FORBIDDEN, HTTPStatus.NOT_FOUND)
        response = client.post(
            f"/admin/runtime/agent/{agent.pk}/change/",
            {
                "policy-total": "1",
                "policy-0-tool": "deploy/deploy_build",
                "policy-0-action": "allow",
            },
        )
        assert response.status_code in (HTTPStatus.FORBIDDEN, HTTPStatus.NOT_FOUND)
        agent.refresh_from_db()
        assert agent.tool_policy == policy


def test_a_tenant_admin_cannot_make_themselves_platform_staff(world):
    a = world.a
    client = tenant_admin_client(a)
    response = client.post(
        f"/admin/tenants/user/{a.admin.pk}/change/",
        {"email": a.admin.email, "is_staff": "on", "is_superuser": "on", "is_active": "on"},
    )
    # People's accounts are platform staff's: not even their own is there for a tenant admin.
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert client.get("/admin/tenants/user/").status_code == HTTPStatus.FORBIDDEN
    a.admin.refresh_from_db()
    assert not a.admin.is_superuser
    own = Membership.objects.get(user=a.admin)
    page = client.get(f"/admin/tenants/membership/{own.pk}/change/").content.decode()
    assert "is_superuser" not in page
    # Their own role and access are for another admin to change.
    response = client.post(
        f"/admin/tenants/membership/{own.pk}/change/", {"role": "viewer", "staff": "on"}
    )
    assert response.status_code == HTTPStatus.OK and b"another admin" in response.content
    assert Membership.objects.get(pk=own.pk).role == "admin"


def test_a_tenant_admin_adds_members_only_to_their_tenant(world, mailoutbox):
    a, b = world.a, world.b
    client = tenant_admin_client(a)
    response = client.post(
        "/admin/tenants/membership/add/",
        {"tenant": b.tenant.pk, "email": "new@acme.test", "role": "admin", "send_invitation": ""},
    )
    assert response.status_code == HTTPStatus.FOUND, response.content[:2000]
    membership = Membership.objects.get(user__email="new@acme.test")
    assert membership.tenant == a.tenant
    assert not Membership.objects.filter(tenant=b.tenant, user__email="new@acme.test").exists()
    # A member of another tenant too: their Django admin access is platform staff's to give.
    b_operator = b.operator
    response = client.post(
        "/admin/tenants/membership/add/",
        {"email": b_operator.email, "role": "admin", "staff": "on", "send_invitation": ""},
    )
    assert response.status_code == HTTPStatus.OK
    assert b"platform staff give" in response.content
    assert not User.objects.get(pk=b_operator.pk).is_staff
    assert not Membership.objects.filter(tenant=a.tenant, user=b_operator).exists()


def test_a_tenant_admin_works_in_the_tenant_the_switcher_chose(world):
    a, b = world.a, world.b
    # The admin of A is an operator of B: switching to B shows them nothing in admin.
    Membership.objects.create(tenant=b.tenant, user=a.admin, role="operator")
    client = tenant_admin_client(a)
    client.post("/tenant/switch", {"tenant": a.tenant.slug})
    assert client.get("/admin/tenants/apitoken/").status_code == HTTPStatus.OK
    client.post("/tenant/switch", {"tenant": b.tenant.slug})
    assert client.get("/admin/tenants/apitoken/").status_code == HTTPStatus.FORBIDDEN
    index = client.get("/admin/").content.decode()
    assert "You are not an admin of Globex Corp" in index
    # Made an admin of B, they run B (and only B) after the switch.
    Membership.objects.filter(tenant=b.tenant, user=a.admin).update(role="admin")
    tokens = client.get("/admin/tenants/apitoken/").content.decode()
    assert str(ApiToken.objects.get(tenant=b.tenant).pk) in change_links(
        tokens, "tenants", "apitoken"
    )
    assert str(ApiToken.objects.get(tenant=a.tenant).pk) not in change_links(
        tokens, "tenants", "apitoken"
    )


def test_platform_staff_still_see_every_tenant(scoped_world):
    root = User.objects.create_superuser(email="root@countersign.test", password="x")
    client = Client()
    client.force_login(root)
    page = client.get("/admin/runtime/agent/").content.decode()
    listed = change_links(page, "runtime", "agent")
    for side in (scoped_world.a, scoped_world.b):
        assert str(Agent.objects.get(tenant=side.tenant, slug="shipper").pk) in listed


def test_a_raw_id_field_names_only_the_scopes_objects(agents, rf):
    """A raw-id field shows the label of the object its value points at; a value typed by
    hand (posted back with its error) may point at another tenant's."""
    from notifications.admin import LadderAdmin
    from notifications.models import Ladder

    class RawLadderAdmin(LadderAdmin):
        raw_id_fields = ["agent"]

    request = rf.get("/admin/")
    agents.a.admin.is_staff = True
    request.user = agents.a.admin
    request.membership = Membership.objects.select_related("tenant").get(user=agents.a.admin)
    field = RawLadderAdmin(Ladder, admin.site).formfield_for_foreignkey(
        Ladder._meta.get_field("agent"), request
    )
    mine = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    theirs = Agent.objects.get(tenant=agents.b.tenant, slug="deployer")
    assert field.widget.label_and_url_for_value(mine.pk)[0] == str(mine)
    assert field.widget.label_and_url_for_value(theirs.pk) == ("", "")
    assert field.widget.label_and_url_for_value("not a number") == ("", "")
    assert not field.queryset.filter(pk=theirs.pk).exists()
