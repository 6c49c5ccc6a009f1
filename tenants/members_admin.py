"""Django admin's "Members": a tenant's admin invites people (e-mail, role, approver groups;
the invitation sent on save, by the service ``manage.py members invite`` uses), sees what
became of each invitation, resends and revokes it, changes a member's role, groups, access
and account, and removes them, with the shell's rules (tenants.services)."""

from copy import deepcopy

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.urls import reverse

from tenants.admin_scope import TenantScopedAdmin, admin_scope
from tenants.models import ApproverGroup, Membership, User
from tenants.profile_views import DelegateField, delegates_for
from tenants.services import (
    InvitationStatus,
    MemberError,
    active_change_problem,
    away_clear,
    away_problem,
    away_set,
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
)


def site_base_url(request) -> str:
    """Where links in e-mails point: PUBLIC_BASE_URL, else the address this request came to."""
    return settings.PUBLIC_BASE_URL or request.build_absolute_uri("/").rstrip("/")


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
    # Out of office, set by an admin for the member (tenants.services.away_set, audited).
    away_start = forms.DateTimeField(
        label="Away from", required=False, help_text="Empty: from now (when until is set)."
    )
    away_end = forms.DateTimeField(
        label="Away until",
        required=False,
        help_text="Empty: not away. Meanwhile they are told of nothing; their delegate is.",
    )
    away_delegate = DelegateField(
        label="Delegate",
        queryset=Membership.objects.none(),
        required=False,
        help_text="A member of the same tenant who may decide; never wider rights.",
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
            self.fields["away_start"].initial = self.instance.away_from
            self.fields["away_end"].initial = self.instance.away_until
            self.fields["away_delegate"].initial = self.instance.delegate_id
            delegate = self.fields["away_delegate"]
            assert isinstance(delegate, DelegateField)
            # The member's own tenant's people who may decide, never the member.
            delegate.queryset = delegates_for(self.instance)

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
        self._away_clean(data)
        return data

    def _away_clean(self, data) -> None:
        if not {"away_start", "away_end", "away_delegate"} & set(self.changed_data):
            return
        if data.get("away_end") is None:
            if data.get("away_delegate") is not None or data.get("away_start") is not None:
                self.add_error("away_end", "Say until when they are away (or clear all three).")
            return
        problem = away_problem(
            membership=self.instance,
            until=data["away_end"],
            starts=data.get("away_start"),
            delegate=data.get("away_delegate"),
        )
        if problem:
            self.add_error("away_end" if problem[0] == "until" else "away_delegate", problem[1])


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
            "away_start",
            "away_end",
            "away_delegate",
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
            if {"away_start", "away_end", "away_delegate"} & set(form.changed_data):
                if data.get("away_end") is None:
                    away_clear(membership=obj, actor=actor)
                else:
                    away_set(
                        membership=obj,
                        until=data["away_end"],
                        starts=data.get("away_start"),
                        delegate=data.get("away_delegate"),
                        actor=actor,
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
