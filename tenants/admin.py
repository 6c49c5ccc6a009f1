import json

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.core.validators import validate_slug
from django.template.response import TemplateResponse

from tenants.admin_scope import TenantScopedAdmin, admin_scope
from tenants.models import ApiToken, ApproverGroup, Membership, Tenant, User
from tenants.services import (
    MemberError,
    email_normalised,
    invitation_send,
    member_staff_set,
    membership_add,
    membership_remove,
    membership_role_set,
    staff_change_problem,
    tenant_active_set,
)
from tenants.tokens import api_token_revoke, token_issue


def site_base_url(request) -> str:
    """Where links in e-mails point: PUBLIC_BASE_URL, else the address this request came to."""
    return settings.PUBLIC_BASE_URL or request.build_absolute_uri("/").rstrip("/")


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


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    """Platform staff make, rename, deactivate and reactivate tenants; a tenant's admin sees
    their own tenant here, and its members under "Members"."""

    list_display = ["slug", "name", "active", "deactivated_at", "deactivated_by", "created_at"]
    list_filter = ["active"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]
    readonly_fields = ["active", "deactivated_at", "deactivated_by", "created_at"]
    actions = ["deactivate", "reactivate"]
    tenant_admin_may = ("view",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["slug", "name", "time_zone"]
        return [
            "slug",
            "name",
            "time_zone",
            "active",
            "deactivated_at",
            "deactivated_by",
            "created_at",
        ]

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


class MemberAddForm(forms.ModelForm):
    """Add a person to a tenant by e-mail address, with a role; they get an invitation."""

    email = forms.EmailField(
        label="E-mail address",
        help_text="Their login. Someone new gets an account without a password: the "
        "invitation's link sets one.",
    )
    staff = forms.BooleanField(
        label="Django admin access",
        required=False,
        help_text="With the admin role: they run this tenant in Django admin too.",
    )
    send_invitation = forms.BooleanField(
        label="Send the invitation now",
        required=False,
        initial=True,
        help_text="An e-mail saying who invited them, to which tenant and with what role, "
        f"with a link that sets their password (it expires after "
        f"{settings.INVITATION_LINK_DAYS} days).",
    )
    # Set by MembershipAdmin.get_form for the request: the scope of the person adding.
    platform = False

    class Meta:
        model = Membership
        fields = ["tenant", "email", "role", "staff", "send_invitation"]

    def clean_email(self):
        try:
            return email_normalised(self.cleaned_data["email"])
        except MemberError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        super().clean()
        data = self.cleaned_data
        tenant, email = data.get("tenant"), data.get("email")
        if tenant is None or not email:
            return data
        user = User.objects.filter(email__iexact=email).first()
        if user is not None and Membership.objects.filter(tenant=tenant, user=user).exists():
            self.add_error(
                "email",
                f"{email} is a member of {tenant.name} already: change their role on their page.",
            )
        if user is not None and data.get("staff"):
            problem = staff_change_problem(
                user=user, tenant=tenant, staff=True, platform=self.platform
            )
            if problem:
                self.add_error("staff", problem)
        return data

    def validate_unique(self):
        # The membership's user is made from the e-mail address on save; clean() has said
        # whether the person is a member already.
        pass


class MemberChangeForm(forms.ModelForm):
    staff = forms.BooleanField(
        label="Django admin access",
        required=False,
        help_text="With the admin role: they run this tenant in Django admin too.",
    )
    platform = False
    requested_by = None

    class Meta:
        model = Membership
        fields = ["role", "staff"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["staff"].initial = self.instance.user.is_staff

    def clean(self):
        super().clean()
        data = self.cleaned_data
        member = self.instance
        mine = self.requested_by is not None and member.user_id == self.requested_by.pk
        if mine and "role" in self.changed_data:
            self.add_error("role", "You cannot change your own role; another admin can.")
        if "staff" in self.changed_data:
            if mine:
                self.add_error("staff", "You cannot change your own access.")
            else:
                problem = staff_change_problem(
                    user=member.user,
                    tenant=member.tenant,
                    staff=bool(data.get("staff")),
                    platform=self.platform,
                )
                if problem:
                    self.add_error("staff", problem)
        return data


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    """A tenant's members: invite (by e-mail), change role, send the invitation again,
    remove (their sessions end; their audit history stays)."""

    list_display = [
        "email",
        "tenant",
        "role",
        "admin_access",
        "invitation",
        "password_set",
        "last_login",
    ]
    list_filter = ["role", "tenant"]
    search_fields = ["user__email", "user__first_name", "user__last_name"]
    list_select_related = ["user", "tenant", "invited_by"]
    readonly_fields = ["email", "tenant_name", "invitation", "password_set", "created_at"]
    actions = ["resend_invitation"]

    @admin.display(description="e-mail", ordering="user__email")
    def email(self, obj: Membership) -> str:
        return obj.user.email

    @admin.display(description="tenant")
    def tenant_name(self, obj: Membership) -> str:
        return f"{obj.tenant.name} ({obj.tenant.slug})"

    @admin.display(description="Django admin", boolean=True)
    def admin_access(self, obj: Membership) -> bool:
        return obj.user.is_staff

    @admin.display(description="invitation", ordering="invited_at")
    def invitation(self, obj: Membership) -> str:
        if obj.invited_at is None:
            return "not sent"
        by = f" by {obj.invited_by.email}" if obj.invited_by else ""
        return f"sent {obj.invited_at:%Y-%m-%d %H:%M} UTC{by}"

    @admin.display(description="password set", boolean=True)
    def password_set(self, obj: Membership) -> bool:
        return obj.user.has_usable_password()

    @admin.display(description="last login", ordering="user__last_login")
    def last_login(self, obj: Membership):
        return obj.user.last_login

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = MemberChangeForm if obj is not None else MemberAddForm
        form = super().get_form(request, obj, change=change, **kwargs)
        form.platform = admin_scope(request).platform
        form.requested_by = request.user
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "email", "role", "staff", "send_invitation"]
        return ["email", "tenant_name", "role", "staff", "invitation", "password_set", "created_at"]

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.user_id == request.user.pk:
            return False  # another admin removes you
        if obj is not None and obj.user.is_superuser and not admin_scope(request).platform:
            return False  # removing ends their sessions: platform staff's to decide
        return super().has_delete_permission(request, obj)

    def get_actions(self, request):
        actions = super().get_actions(request)
        found = actions.get("delete_selected")
        if found is not None:
            func, name, _ = found
            actions["delete_selected"] = (
                func,
                name,
                "Remove the selected members (their sessions end; their audit history stays)",
            )
        return actions

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        scope = admin_scope(request)
        actor = request.user.subject
        if not change:
            membership, _ = membership_add(
                tenant=data["tenant"], email=data["email"], role=data["role"], actor=actor
            )
            if data.get("staff"):
                member_staff_set(membership=membership, staff=True, platform=scope.platform)
            # The admin's redirect and history entry name the row the service made.
            obj.pk, obj.user, obj.tenant = membership.pk, membership.user, membership.tenant
            if data.get("send_invitation"):
                self.invite(request, membership)
            return
        membership_role_set(membership=obj, role=data["role"], actor=actor, by=request.user)
        if "staff" in form.changed_data:
            member_staff_set(membership=obj, staff=bool(data["staff"]), platform=scope.platform)

    def invite(self, request, membership: Membership) -> bool:
        try:
            invitation_send(membership=membership, by=request.user, base_url=site_base_url(request))
        except MemberError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return False
        self.message_user(
            request, f"Sent an invitation to {membership.user.email}.", messages.SUCCESS
        )
        return True

    def delete_model(self, request, obj):
        membership_remove(membership=obj, actor=request.user.subject, by=request.user)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("user", "tenant"):
            try:
                membership_remove(
                    membership=membership, actor=request.user.subject, by=request.user
                )
            except MemberError as exc:
                self.message_user(request, str(exc), messages.ERROR)

    @admin.action(
        description="Send the invitation again (a new link; the one before stops working)"
    )
    def resend_invitation(self, request, queryset):
        for membership in queryset.select_related("user", "tenant"):
            self.invite(request, membership)


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
