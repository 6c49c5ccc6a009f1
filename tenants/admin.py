from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm

from tenants.admin_scope import TenantScopedAdmin

# Registers "Members" and the tenants with their settings (modules of their own: this one
# would be too long with them).
from tenants.members_admin import MembershipAdmin  # noqa: F401
from tenants.models import ApproverGroup, Membership, User
from tenants.settings_admin import TenantAdmin  # noqa: F401


class UserMembershipInline(admin.TabularInline):
    model = Membership
    fk_name = "user"
    extra = 1
    fields = ["tenant", "role"]


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
