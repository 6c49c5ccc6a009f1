"""Django admin for two kinds of admin: platform staff and a tenant's own admins.

- **Platform staff** (superusers) see and change every tenant, as Django admin always did.
- A **tenant admin** (a member with the admin role and staff status) sees and changes only
  the tenant they work in now, which the tenant switcher chooses (tenants.middleware), as on
  every other page.
- Anyone else with staff status sees nothing, whatever Django model permissions they hold:
  those permissions know no tenants, so they would reach every tenant's rows.

One mixin, ``TenantScopedAdmin``, does the scoping for every model admin: the changelist's
queryset (and with it search, filters, actions and the raw-id popup), the change, delete and
history views (an id of another tenant's object is a 404, as missing), the choices of every
foreign key and many-to-many field (and so autocomplete, which asks the related admin), and
the tenant field, which a tenant admin never edits: it is their current tenant. The admin
site (``CountersignAdminSite``) puts the mixin under any model admin registered without it,
as platform-only, so that nothing registered later (a third-party app's admin) is open to
tenant admins by accident.
"""

import enum
import logging
from copy import deepcopy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.contrib import admin, messages
from django.contrib.admin.options import BaseModelAdmin, InlineModelAdmin
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.http import Http404
from django.shortcuts import redirect

from tenants.models import Membership, Tenant
from tenants.selectors import membership_current

logger = logging.getLogger(__name__)


class Infer(enum.Enum):
    """A one-value type for the INFER marker, so that ``is INFER`` tells the type checker too."""

    INFER = "infer"


# The admin's model has a ``tenant`` foreign key, or reaches one over one foreign key.
INFER: Final = Infer.INFER
PERMISSIONS = ("view", "add", "change", "delete")


@dataclass(frozen=True)
class AdminScope:
    """Whose rows a request to Django admin reaches: every tenant's (``platform``), one
    tenant's (``tenant``), or nobody's."""

    platform: bool = False
    tenant: Tenant | None = None
    membership: Membership | None = None

    @property
    def tenant_admin(self) -> bool:
        return not self.platform and self.tenant is not None


def admin_scope(request) -> AdminScope:
    """The scope of the request's person in Django admin (worked out once per request)."""
    found = getattr(request, "countersign_admin_scope", None)
    if found is not None:
        return found
    user = getattr(request, "user", None)
    scope = AdminScope()
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        if user.is_superuser:
            scope = AdminScope(platform=True)
        else:
            if hasattr(request, "membership"):
                membership = request.membership if request.membership else None
            else:  # a request that did not pass through the middleware (a shell, a test)
                membership = membership_current(user=user, slug=None)
            if membership is not None and membership.role == Membership.Role.ADMIN:
                scope = AdminScope(tenant=membership.tenant, membership=membership)
    request.countersign_admin_scope = scope
    return scope


def tenant_path(model) -> str | None:
    """The lookup from ``model`` to its tenant, or None for a model no tenant owns (the app
    catalog, model prices, people's accounts)."""
    if model is Tenant:
        return "pk"
    if model is get_user_model():
        # A person is seen by a tenant's admin as a member of that tenant.
        return "memberships__tenant"
    fields = {f.name: f for f in model._meta.get_fields() if getattr(f, "concrete", False)}
    tenant = fields.get("tenant")
    if tenant is not None and tenant.is_relation and tenant.related_model is Tenant:
        return "tenant"
    for field in fields.values():
        if field.many_to_one or field.one_to_one:
            remote = field.related_model
            inner = {f.name: f for f in remote._meta.get_fields() if getattr(f, "concrete", False)}
            if "tenant" in inner and inner["tenant"].related_model is Tenant:
                return f"{field.name}__tenant"
    return None


def tenant_filter(path: str, tenant: Tenant) -> dict:
    """The filter() keywords of ``tenant``'s rows along ``path`` (see tenant_path)."""
    return {path: tenant.pk if path == "pk" else tenant}


def _in_tenant(model, obj, path: str, tenant: Tenant) -> bool:
    if path == "pk":
        return obj.pk == tenant.pk
    if path == "tenant":
        return obj.tenant_id == tenant.pk
    return model._default_manager.filter(pk=obj.pk, **tenant_filter(path, tenant)).exists()


def scoped_choices(model, queryset, request):
    """``queryset`` of ``model`` (the choices of a relation) as the request's scope sees it."""
    scope = admin_scope(request)
    if scope.platform:
        return queryset
    path = tenant_path(model)
    if queryset is None:
        queryset = model._default_manager.all()
    if path is None:
        return queryset  # a catalog every tenant chooses from (apps, content types)
    if scope.tenant is None:
        return queryset.none()
    return queryset.filter(**tenant_filter(path, scope.tenant))


class ScopedRawIdWidget(ForeignKeyRawIdWidget):
    """The raw-id widget names the object its value points at; only an object of the scope
    (a value typed by hand may point anywhere, and the form shows it back with its error)."""

    def __init__(self, rel, admin_site, *, choices, **kwargs):
        super().__init__(rel, admin_site, **kwargs)
        self.choices_queryset = choices

    def label_and_url_for_value(self, value):
        key = self.rel.get_related_field().name
        try:
            known = self.choices_queryset.filter(**{key: value}).exists()
        except (ValueError, TypeError, ValidationError):
            known = False
        return super().label_and_url_for_value(value) if known else ("", "")


# The mixins are put before a model admin's or an inline's class: the type checker is told
# which methods their super() calls reach.
if TYPE_CHECKING:
    AdminBase = BaseModelAdmin
    InlineBase = InlineModelAdmin
else:
    AdminBase = InlineBase = object


class ScopedAdminMixin(AdminBase):
    """What model admins and inlines share: permissions by scope, scoped relation choices."""

    # The lookup to the tenant (INFER: worked out from the model, see tenant_path); None
    # makes the admin platform staff's only.
    tenant_path: str | None | Infer = INFER
    # What a tenant's admin may do here (the admin's own has_*_permission may say less).
    tenant_admin_may: tuple[str, ...] = PERMISSIONS

    def scope_path(self) -> str | None:
        return tenant_path(self.model) if self.tenant_path is INFER else self.tenant_path

    def scope_allows(self, request, what: str, obj=None) -> bool | None:
        """None: Django's own rules (platform staff); else whether the scope allows it."""
        scope = admin_scope(request)
        if scope.platform:
            return None
        path = self.scope_path()
        if scope.tenant is None or path is None or what not in self.tenant_admin_may:
            return False
        return obj is None or _in_tenant(self.model, obj, path, scope.tenant)

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        scope = admin_scope(request)
        if scope.platform:
            return queryset
        path = self.scope_path()
        if scope.tenant is None or path is None:
            return queryset.none()
        return queryset.filter(**tenant_filter(path, scope.tenant))

    def get_field_queryset(self, db, db_field, request):
        # Every foreign key's and many-to-many field's choices (their select, their
        # validation, the raw-id label): the scope's rows only.
        queryset = super().get_field_queryset(db, db_field, request)
        return scoped_choices(db_field.remote_field.model, queryset, request)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if (
            "widget" not in kwargs
            and db_field.name in self.raw_id_fields
            and not admin_scope(request).platform
        ):
            choices = self.get_field_queryset(kwargs.get("using"), db_field, request)
            kwargs["widget"] = ScopedRawIdWidget(
                db_field.remote_field, self.admin_site, choices=choices, using=kwargs.get("using")
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class TenantScopedAdmin(ScopedAdminMixin, admin.ModelAdmin):
    """The base of every model admin: see the module's docstring."""

    def has_platform_permission(self, request) -> bool:
        """For actions only platform staff may run: ``@admin.action(permissions=["platform"])``."""
        return admin_scope(request).platform

    def has_module_permission(self, request):
        allowed = self.scope_allows(request, "view")
        return super().has_module_permission(request) if allowed is None else allowed

    def has_view_permission(self, request, obj=None):
        allowed = self.scope_allows(request, "view", obj)
        return super().has_view_permission(request, obj) if allowed is None else allowed

    def has_add_permission(self, request):
        allowed = self.scope_allows(request, "add")
        if allowed and self.one_per_tenant():
            # A tenant's only one (its Slack app, its push settings) exists: no "Add" link
            # to a form that could only refuse.
            scope = admin_scope(request)
            return not self.model._default_manager.filter(tenant=scope.tenant).exists()
        return super().has_add_permission(request) if allowed is None else allowed

    def one_per_tenant(self) -> bool:
        field = next((f for f in self.model._meta.fields if f.name == "tenant"), None)
        return field is not None and field.one_to_one

    def add_view(self, request, form_url="", extra_context=None):
        # The add page of a tenant's only one that exists (a bookmark, a second tab): its
        # change page, saying so, rather than a bare 403.
        scope = admin_scope(request)
        if self.one_per_tenant() and scope.tenant is not None and self.scope_allows(request, "add"):
            existing = self.model._default_manager.filter(tenant=scope.tenant).first()
            if existing is not None:
                opts = self.model._meta
                self.message_user(
                    request,
                    f"This tenant has its {opts.verbose_name} already: change it here.",
                    messages.INFO,
                )
                return redirect(f"admin:{opts.app_label}_{opts.model_name}_change", existing.pk)
        return super().add_view(request, form_url, extra_context)

    def has_change_permission(self, request, obj=None):
        allowed = self.scope_allows(request, "change", obj)
        return super().has_change_permission(request, obj) if allowed is None else allowed

    def has_delete_permission(self, request, obj=None):
        allowed = self.scope_allows(request, "delete", obj)
        return super().has_delete_permission(request, obj) if allowed is None else allowed

    def get_object(self, request, object_id, from_field=None):
        # Django answers a missing id with a redirect and "doesn't exist. Perhaps it was
        # deleted?": an id of another tenant's object must look exactly as missing, a 404.
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404("No such object.")
        return obj

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        if admin_scope(request).tenant_admin:
            # One tenant: the column would say the same on every row.
            return [name for name in shown if name != "tenant"]
        return shown

    def get_list_filter(self, request):
        filters = super().get_list_filter(request)
        if admin_scope(request).platform:
            return filters
        scoped: list[Any] = []
        for entry in filters:
            name = entry[0] if isinstance(entry, list | tuple) else entry
            if isinstance(entry, list | tuple) and not (
                isinstance(entry[1], type) and issubclass(entry[1], admin.RelatedFieldListFilter)
            ):
                scoped.append(entry)  # e.g. (field, EmptyFieldListFilter): lists no rows
                continue
            if not isinstance(name, str):
                scoped.append(entry)  # a filter class of the admin's own
                continue
            try:
                field = get_fields_from_path(self.model, name)[-1]
            except (FieldDoesNotExist, NotRelationField):
                scoped.append(entry)
                continue
            if not field.is_relation:
                scoped.append(entry)
            elif field.related_model is not Tenant:
                # A relation filter lists every row of the related model; this one lists
                # those the scoped changelist points at.
                scoped.append((name, admin.RelatedOnlyFieldListFilter))
        return scoped

    def get_changeform_initial_data(self, request):
        initial: dict[str, Any] = super().get_changeform_initial_data(request)
        scope = admin_scope(request)
        if scope.tenant_admin and scope.tenant is not None and self.scope_path() == "tenant":
            initial["tenant"] = scope.tenant.pk
        return initial

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        field = form.base_fields.get("tenant")
        if field is not None and self.scope_path() == "tenant":
            # A tenant admin's rows are their current tenant's; and nobody moves a row to
            # another tenant (an agent with its tasks, a token with its subject).
            scope = admin_scope(request)
            if scope.tenant_admin or obj is not None:
                field = deepcopy(field)
                field.disabled = True
                if obj is None and scope.tenant is not None:  # a tenant admin's new row
                    # A disabled field's value is its initial one, also when the form is
                    # posted (Django passes the changeform's initial data only to a GET).
                    field.initial = scope.tenant.pk
                    field.help_text = "Set from the current tenant."
                form.base_fields["tenant"] = field
        return form

    def save_form(self, request, form, change):
        obj = super().save_form(request, form, change)
        scope = admin_scope(request)
        if scope.tenant_admin and self.scope_path() == "tenant":
            # The disabled field already says so; this holds for forms that set it otherwise.
            obj.tenant = scope.tenant
        return obj

    def get_inlines(self, request, obj):
        inlines = super().get_inlines(request, obj)
        if admin_scope(request).platform:
            return inlines
        return [inline for inline in inlines if issubclass(inline, ScopedAdminMixin)]


class TenantScopedInline(ScopedAdminMixin, InlineBase):
    """The same for inlines (mix in before admin.TabularInline or admin.StackedInline)."""

    def has_view_permission(self, request, obj=None):
        allowed = self.scope_allows(request, "view")
        return super().has_view_permission(request, obj) if allowed is None else allowed

    # An inline's takes the parent object, a model admin's does not (Django's signatures).
    def has_add_permission(self, request, obj):  # type: ignore[override]
        allowed = self.scope_allows(request, "add")
        return super().has_add_permission(request, obj) if allowed is None else allowed

    def has_change_permission(self, request, obj=None):
        allowed = self.scope_allows(request, "change")
        return super().has_change_permission(request, obj) if allowed is None else allowed

    def has_delete_permission(self, request, obj=None):
        allowed = self.scope_allows(request, "delete")
        return super().has_delete_permission(request, obj) if allowed is None else allowed


# The admin's index (and its side bar), grouped by what an admin does rather than by the app
# that defines each model. A model not named here is listed under "Other".
ADMIN_SECTIONS: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "people",
        "People",
        (
            "tenants.Tenant",
            "tenants.Membership",
            "tenants.ApproverGroup",
            "tenants.User",
            "auth.Group",
            "account.EmailAddress",
            "mfa.Authenticator",
        ),
    ),
    (
        "agents",
        "Agents and policy",
        (
            "runtime.Agent",
            "runtime.ToolServer",
            "runtime.AnnotationPolicy",
            "runtime.Credential",
            "runtime.StandingRule",
            "notifications.Ladder",
            "runtime.ModelPrice",
            "connections.App",
        ),
    ),
    (
        "channels",
        "Channels",
        (
            "notifications.Channel",
            "notifications.Preference",
            "integrations.SlackApp",
            "integrations.SlackUser",
            "integrations.EmailLink",
            "runtime.PushSettings",
            "runtime.PushConfig",
        ),
    ),
    (
        "tokens",
        "Tokens and connections",
        (
            "tenants.ApiToken",
            "connections.Connection",
            "connections.TenantApp",
            "socialaccount.SocialApp",
            "socialaccount.SocialAccount",
            "socialaccount.SocialToken",
        ),
    ),
    (
        "records",
        "Records",
        (
            "runtime.AuditEvent",
            "runtime.Task",
            "runtime.Interaction",
            "runtime.Effect",
            "runtime.Receipt",
            "connections.ConnectionAuditEvent",
            "notifications.Delivery",
            "runtime.PushDelivery",
        ),
    ),
]
# Plain names on the index where a model's own reads like a table's ("deliverys") or names a
# section of its own; a model's verbose_name (its add and change pages' titles) is the rest.
ADMIN_NAMES = {
    "tenants.Tenant": "Tenants",
    "tenants.User": "Accounts",
    "runtime.AuditEvent": "Audit log",
    "notifications.Delivery": "Notification deliveries",
    "connections.App": "App catalog",
    "connections.ConnectionAuditEvent": "Connection audit log",
}


def admin_sections(app_list: list[dict], *, tenant_admin: bool) -> list[dict]:
    """Django admin's app list (the index, the side bar) regrouped into ADMIN_SECTIONS."""
    by_label = {
        f"{app['app_label']}.{entry['object_name']}": entry
        for app in app_list
        for entry in app["models"]
    }
    sections = []
    placed: set[str] = set()
    for slug, name, labels in [*ADMIN_SECTIONS, ("other", "Other", tuple(by_label))]:
        models = []
        for label in labels:
            entry = by_label.get(label)
            if entry is None or label in placed:
                continue
            placed.add(label)
            entry = dict(entry)
            entry["name"] = ADMIN_NAMES.get(label, entry["name"])
            if tenant_admin and label == "tenants.Tenant":
                entry["name"] = "Tenant settings"
            models.append(entry)
        if models:
            sections.append(
                {
                    "name": name,
                    "app_label": slug,
                    "app_url": "",
                    "has_module_perms": True,
                    "models": models,
                }
            )
    return sections


class CountersignAdminSite(admin.AdminSite):
    site_header = "Countersign administration"
    site_title = "Countersign admin"
    index_title = "Administration"

    def register(self, model_or_iterable, admin_class=None, **options):
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, TenantScopedAdmin):
            # Registered without the scoping (a third-party app's admin): platform staff's
            # only. Its Django permissions would otherwise reach every tenant's rows.
            admin_class = type(
                admin_class.__name__,
                (TenantScopedAdmin, admin_class),
                {"tenant_path": None, "__module__": admin_class.__module__},
            )
        return super().register(model_or_iterable, admin_class, **options)

    def get_app_list(self, request, app_label=None):
        app_list = super().get_app_list(request, app_label)
        if app_label is not None:
            # An app's own page lists that app's models, by the same plain names.
            for app in app_list:
                for entry in app["models"]:
                    label = f"{app['app_label']}.{entry['object_name']}"
                    entry["name"] = ADMIN_NAMES.get(label, entry["name"])
            return app_list
        return admin_sections(app_list, tenant_admin=admin_scope(request).tenant_admin)

    def each_context(self, request):
        context = super().each_context(request)
        context["admin_scope"] = admin_scope(request)
        return context

    def index(self, request, extra_context=None):
        scope = admin_scope(request)
        if not scope.platform and scope.tenant is None:
            membership = getattr(request, "membership", None)
            where = f"of {membership.tenant.name}" if membership else "of any tenant"
            messages.warning(
                request,
                f"You are not an admin {where}: Django admin shows a tenant's admins that "
                "tenant (switch tenant above), and platform staff every tenant.",
            )
        return super().index(request, extra_context)
