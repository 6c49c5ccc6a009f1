import zoneinfo

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.core.exceptions import ValidationError
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from tenants.admin_scope import TenantScopedAdmin, admin_scope

# Registers "Members" (a module of its own: this one would be too long with it).
from tenants.members_admin import MembershipAdmin  # noqa: F401
from tenants.models import (
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


# API tokens are in runtime.admin.token_admin: their form chooses from the tenant's agents.
