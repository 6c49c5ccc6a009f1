import json
import zoneinfo
from copy import deepcopy

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import validate_slug
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from tenants.admin_scope import TenantScopedAdmin, admin_scope
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
    InvitationStatus,
    MemberError,
    active_change_problem,
    email_normalised,
    invitation_domain_problem,
    invitation_revoke,
    invitation_send,
    invitation_status,
    last_admin_problem,
    member_active_set,
    member_groups_set,
    member_invite,
    member_staff_set,
    membership_remove,
    membership_role_set,
    staff_change_problem,
    tenant_active_set,
    tenant_settings_set,
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


def groups_field() -> forms.ModelMultipleChoiceField:
    # Its choices are set per request (MembershipAdmin.get_form): the tenant's groups only.
    return forms.ModelMultipleChoiceField(
        queryset=ApproverGroup.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Approver groups",
        help_text="Groups a tool policy can name as its approvers (approvers: [group:slug]).",
    )


class MemberAddForm(forms.ModelForm):
    """Invite a person to a tenant by e-mail address, with a role and groups."""

    email = forms.EmailField(
        label="E-mail address",
        help_text="Their login. Someone new gets an account without a password: the "
        "invitation's link sets one.",
    )
    groups = groups_field()
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
        fields = ["tenant", "email", "role", "groups", "staff", "send_invitation"]

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
        strangers = [g for g in data.get("groups") or [] if g.tenant_id != tenant.pk]
        if strangers:
            self.add_error(
                "groups", f"Groups of another tenant: {', '.join(str(g) for g in strangers)}."
            )
        problem = invitation_domain_problem(tenant=tenant, email=email)
        if problem:
            self.add_error("email", problem)
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
    groups = groups_field()
    staff = forms.BooleanField(
        label="Django admin access",
        required=False,
        help_text="With the admin role: they run this tenant in Django admin too.",
    )
    active = forms.BooleanField(
        label="Active account",
        required=False,
        help_text="Deactivated, they log in nowhere and their sessions end; nothing of theirs "
        "is deleted, and reactivating gives it all back.",
    )
    platform = False
    requested_by = None

    class Meta:
        model = Membership
        fields = ["role", "groups", "staff", "active"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["staff"].initial = self.instance.user.is_staff
            self.fields["active"].initial = self.instance.user.is_active
            self.fields["groups"].initial = list(self.instance.approver_groups.all())

    def clean(self):
        super().clean()
        data = self.cleaned_data
        member = self.instance
        mine = self.requested_by is not None and member.user_id == self.requested_by.pk
        if mine and "role" in self.changed_data:
            self.add_error("role", "You cannot change your own role; another admin can.")
        elif "role" in self.changed_data and data.get("role"):
            problem = last_admin_problem(membership=member, role=data["role"])
            if problem:
                self.add_error("role", problem)
        if "staff" in self.changed_data:
            if mine:
                self.add_error("staff", "You cannot change your own access.")
            else:
                problem = staff_change_problem(
                    user=member.user,
                    tenant=member.tenant,
                    staff=bool(data.get("staff")),
                    platform=self.platform,
                ) or last_admin_problem(membership=member, staff=bool(data.get("staff")))
                if problem:
                    self.add_error("staff", problem)
        if "active" in self.changed_data:
            problem = active_change_problem(
                membership=member,
                active=bool(data.get("active")),
                platform=self.platform,
                by=self.requested_by,
            )
            if problem:
                self.add_error("active", problem)
        return data


class InvitationStatusFilter(admin.SimpleListFilter):
    title = "invitation"
    parameter_name = "invitation"

    def lookups(self, request, model_admin):
        return [
            ("pending", "pending"),
            ("accepted", "accepted"),
            ("revoked", "revoked"),
            ("not_sent", "not sent"),
        ]

    def queryset(self, request, queryset):
        # "pending" here also lists expired ones: their status column says which.
        value = self.value()
        no_password = queryset.filter(user__password__startswith="!", user__last_login=None)
        if value == "revoked":
            return queryset.exclude(invitation_revoked_at=None)
        if value == "accepted":
            return queryset.filter(invitation_revoked_at=None).exclude(
                pk__in=no_password.values("pk")
            )
        if value == "pending":
            return no_password.filter(invitation_revoked_at=None).exclude(invited_at=None)
        if value == "not_sent":
            return no_password.filter(invitation_revoked_at=None, invited_at=None)
        return queryset


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    """A tenant's members: invite (by e-mail, with a role and groups), send the invitation
    again or revoke it, change role, groups and access, deactivate, remove (their sessions
    end; their audit history stays). The tenant always keeps an admin."""

    list_display = [
        "email",
        "tenant",
        "role",
        "admin_access",
        "account_active",
        "invitation",
        "last_login",
    ]
    list_filter = ["role", InvitationStatusFilter, "tenant"]
    search_fields = ["user__email", "user__first_name", "user__last_name"]
    list_select_related = ["user", "tenant", "invited_by"]
    actions = [
        "resend_invitation",
        "revoke_invitation",
        "deactivate_members",
        "reactivate_members",
    ]

    @admin.display(description="e-mail", ordering="user__email")
    def email(self, obj: Membership) -> str:
        return obj.user.email

    @admin.display(description="tenant")
    def tenant_name(self, obj: Membership) -> str:
        return f"{obj.tenant.name} ({obj.tenant.slug})"

    @admin.display(description="Django admin", boolean=True)
    def admin_access(self, obj: Membership) -> bool:
        return obj.user.is_staff

    @admin.display(description="active", boolean=True)
    def account_active(self, obj: Membership) -> bool:
        return obj.user.is_active

    @admin.display(description="invitation", ordering="invited_at")
    def invitation(self, obj: Membership) -> str:
        status = invitation_status(obj)
        if obj.invited_at is None or status == InvitationStatus.ACCEPTED:
            return status
        by = f" by {obj.invited_by.email}" if obj.invited_by else ""
        return f"{status}: sent {obj.invited_at:%Y-%m-%d %H:%M} UTC{by}"

    @admin.display(description="password set", boolean=True)
    def password_set(self, obj: Membership) -> bool:
        return obj.user.has_usable_password()

    @admin.display(description="last login", ordering="user__last_login")
    def last_login(self, obj: Membership):
        return obj.user.last_login

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = MemberChangeForm if obj is not None else MemberAddForm
        form = super().get_form(request, obj, change=change, **kwargs)
        scope = admin_scope(request)
        form.platform = scope.platform
        form.requested_by = request.user
        groups = ApproverGroup.objects.select_related("tenant")
        if obj is not None:
            groups = groups.filter(tenant_id=obj.tenant_id)
        elif not scope.platform:
            groups = groups.filter(tenant=scope.tenant) if scope.tenant else groups.none()
        field = deepcopy(form.base_fields["groups"])
        field.queryset = groups
        if scope.platform and obj is None:
            field.label_from_instance = lambda g: f"{g} ({g.tenant.slug})"
        form.base_fields["groups"] = field
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "email", "role", "groups", "staff", "send_invitation"]
        return [
            "email",
            "tenant_name",
            "role",
            "groups",
            "staff",
            "active",
            "invitation",
            "password_set",
            "created_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []  # the add form asks for the e-mail address
        return ["email", "tenant_name", "invitation", "password_set", "created_at"]

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

    def delete_view(self, request, object_id, extra_context=None):
        # The last admin is never removed: said on the page, before the confirmation.
        obj = self.get_object(request, object_id)
        if self.has_delete_permission(request, obj):
            problem = last_admin_problem(membership=obj, removing=True)
            if problem:
                self.message_user(request, problem, messages.ERROR)
                return HttpResponseRedirect(
                    reverse("admin:tenants_membership_change", args=[obj.pk])
                )
        return super().delete_view(request, object_id, extra_context)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        scope = admin_scope(request)
        actor = request.user.subject
        if not change:
            tenant = data["tenant"]
            try:
                membership, _ = member_invite(
                    tenant=tenant,
                    email=data["email"],
                    role=data["role"],
                    actor=actor,
                    by=request.user,
                    base_url=site_base_url(request),
                    groups=list(data.get("groups") or []),
                    staff=bool(data.get("staff")),
                    platform=scope.platform,
                    send=bool(data.get("send_invitation")),
                )
            except MemberError as exc:
                # The member is added; the mail failed: the list's status says "not sent".
                # (What else refuses an invitation, the form has said before.)
                found = (
                    Membership.objects.select_related("user", "tenant")
                    .filter(tenant=tenant, user__email=data["email"])
                    .first()
                )
                if found is None:
                    raise PermissionDenied(str(exc)) from exc
                membership = found
                self.message_user(request, str(exc), messages.ERROR)
            else:
                if data.get("send_invitation"):
                    self.message_user(
                        request,
                        f"Sent an invitation to {membership.user.email}.",
                        messages.SUCCESS,
                    )
            # The admin's redirect and history entry name the row the service made.
            obj.pk, obj.user, obj.tenant = membership.pk, membership.user, membership.tenant
            return
        try:
            membership_role_set(membership=obj, role=data["role"], actor=actor, by=request.user)
            member_groups_set(membership=obj, groups=list(data.get("groups") or []), actor=actor)
            if "staff" in form.changed_data:
                member_staff_set(
                    membership=obj, staff=bool(data["staff"]), platform=scope.platform, actor=actor
                )
            if "active" in form.changed_data:
                member_active_set(
                    membership=obj,
                    active=bool(data["active"]),
                    actor=actor,
                    platform=scope.platform,
                    by=request.user,
                )
        except MemberError as exc:  # a change made meanwhile by another admin
            self.message_user(request, str(exc), messages.ERROR)

    def save_related(self, request, form, formsets, change):
        # The groups are the services' (save_model): the form's own m2m save knows none.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

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
        try:
            membership_remove(membership=obj, actor=request.user.subject, by=request.user)
        except MemberError as exc:  # the last admin, removed meanwhile by another admin
            self.message_user(request, str(exc), messages.ERROR)

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

    @admin.action(description="Revoke the invitation (its link stops working)")
    def revoke_invitation(self, request, queryset):
        revoked: list[str] = []
        skipped: list[str] = []
        for membership in queryset.select_related("user", "tenant"):
            done = invitation_revoke(membership=membership, actor=request.user.subject)
            (revoked if done else skipped).append(membership.user.email)
        if revoked:
            self.message_user(
                request, f"Revoked the invitation to {', '.join(revoked)}.", messages.SUCCESS
            )
        if skipped:
            self.message_user(
                request,
                f"No pending invitation to revoke: {', '.join(skipped)}.",
                messages.WARNING,
            )

    def _active_set(self, request, queryset, active: bool) -> None:
        scope = admin_scope(request)
        done = []
        for membership in queryset.select_related("user", "tenant"):
            try:
                if member_active_set(
                    membership=membership,
                    active=active,
                    actor=request.user.subject,
                    platform=scope.platform,
                    by=request.user,
                ):
                    done.append(membership.user.email)
            except MemberError as exc:
                self.message_user(request, str(exc), messages.ERROR)
        if done:
            word = "Reactivated" if active else "Deactivated"
            self.message_user(request, f"{word} {', '.join(done)}.", messages.SUCCESS)

    @admin.action(description="Deactivate the selected members' accounts (they log in nowhere)")
    def deactivate_members(self, request, queryset):
        self._active_set(request, queryset, active=False)

    @admin.action(description="Reactivate the selected members' accounts")
    def reactivate_members(self, request, queryset):
        self._active_set(request, queryset, active=True)


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
