import json
import zoneinfo

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from tenants.admin_scope import TenantScopedAdmin, admin_scope

# Registers "Members" (a module of its own: this one would be too long with it).
from tenants.members_admin import MembershipAdmin  # noqa: F401
from tenants.models import (
    ApiToken,
    ApproverGroup,
    Membership,
    Tenant,
    User,
    invitation_domains_parse,
)
from tenants.services import (
    TENANT_SETTINGS,
    tenant_active_set,
    tenant_settings_set,
)
from tenants.tokens import api_token_revoke, token_issue


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]
    fields = ["user", "role"]


class UserMembershipInline(admin.TabularInline):
    model = Membership
    fk_name = "user"
    extra = 1
    fields = ["tenant", "role"]


def time_zone_choices() -> list[tuple[str, str]]:
    return [("", "The site's time zone (TIME_ZONE)")] + [
        (name, name) for name in sorted(zoneinfo.available_timezones())
    ]


class TenantForm(forms.ModelForm):
    class Meta:
        model = Tenant
        fields = ["slug", "name", "time_zone", "invitation_domains"]
        labels = {"name": "Display name", "invitation_domains": "Invitation domains"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields.get("time_zone")
        if field is not None:
            field.widget = forms.Select(choices=time_zone_choices())

    def clean_invitation_domains(self):
        try:
            return ", ".join(invitation_domains_parse(self.cleaned_data["invitation_domains"]))
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from None


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    """Platform staff make, rename, deactivate and reactivate tenants; a tenant's admin sets
    their own tenant's settings here (display name, time zone, who may be invited), and
    manages its members under "Members"."""

    form = TenantForm

    list_display = ["slug", "name", "active", "deactivated_at", "deactivated_by", "created_at"]
    list_filter = ["active"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]
    readonly_fields = ["reminders", "active", "deactivated_at", "deactivated_by", "created_at"]
    actions = ["deactivate", "reactivate"]
    tenant_admin_may = ("view", "change")

    @admin.display(description="Reminders and escalation")
    def reminders(self, obj):
        # Named by URL, not imported: the ladders are the notifications app's, above this one.
        try:
            url = reverse("admin:notifications_ladder_changelist")
        except NoReverseMatch:
            return "—"
        return format_html(
            "The tenant's reminder ladder (every agent's approvals, unless an agent or tool "
            'has its own) is the ladder without agent and tool under <a href="{}">Ladders</a>.',
            url,
        )

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["slug", "name", "time_zone", "invitation_domains"]
        return [
            "slug",
            "name",
            "time_zone",
            "invitation_domains",
            "ai_summaries",
            "reminders",
            "active",
            "deactivated_at",
            "deactivated_by",
            "created_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and not admin_scope(request).platform:
            # A tenant's slug is in its URLs and tokens' paths: platform staff change it.
            return ["slug", *self.readonly_fields]
        return self.readonly_fields

    def save_model(self, request, obj, form, change):
        if not change:
            return super().save_model(request, obj, form, change)
        values = {n: form.cleaned_data[n] for n in TENANT_SETTINGS if n in form.changed_data}
        others = [n for n in form.changed_data if n not in TENANT_SETTINGS]
        if others:
            obj.save(update_fields=others)
        if values:
            tenant_settings_set(tenant=obj, actor=request.user.subject, **values)

    def get_prepopulated_fields(self, request, obj=None):
        return self.prepopulated_fields if obj is None else {}

    @admin.action(
        description="Deactivate the selected tenants (tokens and agents stop; nothing is deleted)",
        permissions=["platform"],
    )
    def deactivate(self, request, queryset):
        done = sum(
            tenant_active_set(tenant=t, active=False, actor=request.user.subject) for t in queryset
        )
        self.message_user(
            request,
            f"Deactivated {done} tenant(s): their tokens are refused, their agents answer "
            "that the tenant is deactivated, their members reach none of its pages.",
            messages.SUCCESS,
        )

    @admin.action(description="Reactivate the selected tenants", permissions=["platform"])
    def reactivate(self, request, queryset):
        done = sum(
            tenant_active_set(tenant=t, active=True, actor=request.user.subject) for t in queryset
        )
        self.message_user(request, f"Reactivated {done} tenant(s).", messages.SUCCESS)


class EmailUserCreationForm(AdminUserCreationForm):
    class Meta:
        model = User
        fields = ["email"]


class EmailUserChangeForm(UserChangeForm):
    class Meta:
        model = User
        fields = "__all__"


@admin.register(User)
class UserAdmin(TenantScopedAdmin, BaseUserAdmin):
    """People's accounts, across tenants: platform staff's. A tenant's admin manages the
    tenant's people under "Members" (invite, role, remove)."""

    tenant_path = None
    form = EmailUserChangeForm
    add_form = EmailUserCreationForm
    ordering = ["email"]
    list_display = ["email", "first_name", "last_name", "is_staff", "is_active", "last_login"]
    search_fields = ["email", "first_name", "last_name"]
    fieldsets = [
        (None, {"fields": ["email", "password"]}),
        ("Personal info", {"fields": ["first_name", "last_name"]}),
        (
            "Permissions",
            {"fields": ["is_active", "is_staff", "is_superuser", "groups", "user_permissions"]},
        ),
        ("Important dates", {"fields": ["last_login", "date_joined"]}),
    ]
    add_fieldsets = [
        (
            None,
            {"classes": ["wide"], "fields": ["email", "usable_password", "password1", "password2"]},
        ),
    ]
    inlines = [UserMembershipInline]


class ApproverGroupForm(forms.ModelForm):
    class Meta:
        model = ApproverGroup
        fields = ["tenant", "slug", "name", "members"]

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        tenant, members = cleaned.get("tenant"), cleaned.get("members")
        # A group names members of its own tenant only: approvers never cross tenants.
        if tenant is not None and members is not None:
            strangers = [m for m in members if m.tenant_id != tenant.pk]
            if strangers:
                raise forms.ValidationError(
                    f"Members of another tenant: {', '.join(str(m.user) for m in strangers)}."
                )
        return cleaned


@admin.register(ApproverGroup)
class ApproverGroupAdmin(TenantScopedAdmin):
    """Named groups of members a tool policy can name: ``approvers: [group:<slug>]``."""

    form = ApproverGroupForm
    list_display = ["slug", "name", "tenant", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["slug", "name"]
    list_select_related = ["tenant"]
    filter_horizontal = ["members"]


class EscapedJSONField(forms.JSONField):
    """Shown back with non-ASCII escaped: a lone surrogate typed as "\\ud800" cannot be
    encoded into the page, which was a 500 when the form came back with an error."""

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, cls=self.encoder)


# What an admin sets when making a token (the form and the add page show the same fields).
TOKEN_CREATE_FIELDS = (
    "tenant",
    "kind",
    "subject",
    "name",
    "all_agents",
    "agent_slugs",
    "may_step_up",
    "expires_at",
)


class ApiTokenForm(forms.ModelForm):
    agent_slugs = EscapedJSONField(
        required=False,
        initial=list,
        help_text='When "all agents" is off: a JSON list of agent slugs, e.g. ["support", "deployer"].',
    )

    class Meta:
        model = ApiToken
        fields = list(TOKEN_CREATE_FIELDS)

    def clean_agent_slugs(self):
        value = self.cleaned_data.get("agent_slugs") or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise forms.ValidationError("Give a JSON list of agent slugs.")
        # Checked as slugs (as long as Agent.slug at most) before the write: a NUL or a lone
        # surrogate in JSON text is a DataError in PostgreSQL's jsonb, else a 500.
        for slug in value:
            try:
                validate_slug(slug)
            except forms.ValidationError:
                raise forms.ValidationError(f"{slug!r} is not an agent slug.") from None
            if len(slug) > 63:
                raise forms.ValidationError("An agent slug is at most 63 characters.")
        return value

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if not data.get("all_agents") and not data.get("agent_slugs"):
            self.add_error("agent_slugs", "Name at least one agent, or allow all agents.")
        if data.get("may_step_up") and data.get("kind") != ApiToken.Kind.OPERATOR:
            self.add_error("may_step_up", "Only operator tokens decide, so only they step up.")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdmin):
    """A tenant's tokens: made here (the plaintext shown once), revoked here; a tenant's
    admin revokes rather than deletes, so that "who revoked it, when" stays."""

    form = ApiTokenForm
    tenant_admin_may = ("view", "add", "change")
    list_display = [
        "name",
        "kind",
        "subject",
        "tenant",
        "masked",
        "may_step_up",
        "scope",
        "expires_at",
        "revoked_at",
        "revoked_by",
        "last_used_at",
    ]
    list_filter = ["tenant", "kind", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "subject", "prefix"]
    list_select_related = ["tenant"]
    readonly_fields = [
        "masked",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    ]
    actions = ["revoke"]

    @admin.display(description="token")
    def masked(self, obj: ApiToken) -> str:
        # The prefix identifies the token in logs and support tickets; the secret is never kept.
        return f"cs_{obj.prefix}_…" if obj.prefix else "—"

    @admin.display(description="may call")
    def scope(self, obj: ApiToken) -> str:
        return "all agents" if obj.all_agents else ", ".join(obj.agent_slugs or []) or "no agent"

    def get_fields(self, request, obj=None):
        if obj is None:
            return list(TOKEN_CREATE_FIELDS)
        return [
            "masked",
            *TOKEN_CREATE_FIELDS,
            "revoked_at",
            "revoked_by",
            "last_used_at",
            "created_by",
            "created_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        # A token's tenant and subject are its identity; mint a new token to change them.
        # The step-up right is given when the token is made, never added later.
        return [*self.readonly_fields, "tenant", "kind", "subject", "may_step_up"]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
            request._countersign_plaintext = token_issue(obj)
        obj.save()

    def response_add(self, request, obj, post_url_continue=None):
        plaintext = getattr(request, "_countersign_plaintext", None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Token created",
            "token": obj,
            "plaintext": plaintext,
            "opts": self.model._meta,
        }
        # Rendered straight from the POST: the plaintext is in no session, log or URL, and no
        # later page can show it again.
        response = TemplateResponse(request, "tenants/admin/token_created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        revoked = sum(api_token_revoke(token=token, by=request.user.subject) for token in queryset)
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
