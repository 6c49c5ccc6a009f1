"""Django admin's tenants: platform staff make, rename, deactivate and reactivate them; a
tenant's admin sets their own tenant's settings here.

The settings are the tenant's own (tenants.services.TENANT_SETTINGS: display name, time zone,
who may be invited, whether an expiry may approve, how long the audit is kept) and its
default ladder, one sentence such as "remind after 1h; warn 30m before expiry; expire after
24h, then deny", checked by the parser every ladder goes through (runtime.policy.ladders) and
kept by notifications.tenant_ladder. That is why this module sits above the apps it edits
(tests/test_architecture.py: Django admin's pages of the tenant).
"""

import zoneinfo

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from notifications.tenant_ladder import (
    TenantLadderError,
    tenant_ladder_parse,
    tenant_ladder_set,
    tenant_ladder_text,
)
from tenants.admin_scope import TenantScopedAdmin, admin_scope
from tenants.models import AUDIT_RETENTION_FLOOR_DAYS, Membership, Tenant, invitation_domains_parse
from tenants.services import TENANT_SETTINGS, tenant_active_set, tenant_settings_set

# What a tenant's admin edits on an existing tenant, in the page's order.
SETTINGS_FIELDS = [
    "name",
    "time_zone",
    "invitation_domains",
    "default_ladder",
    "expiry_may_approve",
    "audit_retention_days",
    "ai_summaries",
]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]
    fields = ["user", "role"]


def time_zone_choices() -> list[tuple[str, str]]:
    return [("", "The site's time zone (TIME_ZONE)")] + [
        (name, name) for name in sorted(zoneinfo.available_timezones())
    ]


class TenantForm(forms.ModelForm):
    default_ladder = forms.CharField(
        label="Default expiry and reminders",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80, "spellcheck": "false"}),
        help_text="Steps separated by semicolons, e.g. \u201cremind after 1h; escalate to "
        "admins after 4h; warn 30m before expiry; expire after 24h, then deny\u201d. The "
        "expire step is the default expiry of every agent that sets none of its own (a policy "
        "rule\u2019s expires, then the agent\u2019s, win over it); empty: 24 hours, then deny.",
    )

    class Meta:
        model = Tenant
        fields = [
            "slug",
            "name",
            "time_zone",
            "invitation_domains",
            "expiry_may_approve",
            "audit_retention_days",
            "ai_summaries",
        ]
        labels = {
            "name": "Display name",
            "invitation_domains": "Invitation domains",
            "expiry_may_approve": "An expiry may approve",
            "audit_retention_days": "Keep the audit for (days)",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields.get("time_zone")
        if field is not None:
            field.widget = forms.Select(choices=time_zone_choices())
        retention = self.fields.get("audit_retention_days")
        if retention is not None:
            retention.widget.attrs["min"] = AUDIT_RETENTION_FLOOR_DAYS
        if "default_ladder" in self.fields and self.instance.pk:
            self.fields["default_ladder"].initial = tenant_ladder_text(self.instance)

    def clean_invitation_domains(self):
        try:
            return ", ".join(invitation_domains_parse(self.cleaned_data["invitation_domains"]))
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from None

    def clean_default_ladder(self):
        text = " ".join((self.cleaned_data.get("default_ladder") or "").split())
        try:
            tenant_ladder_parse(text)
        except TenantLadderError as exc:
            raise forms.ValidationError(str(exc)) from None
        return text

    def clean(self):
        data = super().clean() or {}
        text = data.get("default_ladder")
        if text and "expiry_may_approve" in self.fields:
            _, expire = tenant_ladder_parse(text)
            outcome = (expire.get("on_expiry") or {}).get("action")
            if outcome == "approve" and not data.get("expiry_may_approve"):
                self.add_error(
                    "default_ladder",
                    "\u201cthen approve\u201d needs \u201cAn expiry may approve\u201d on "
                    "(and approves only calls whose rule says risk: low).",
                )
        return data


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    """Platform staff make, rename, deactivate and reactivate tenants; a tenant's admin sets
    their own tenant's settings here (see the module), and manages its members under
    "Members"."""

    form = TenantForm

    list_display = ["slug", "name", "active", "deactivated_at", "deactivated_by", "created_at"]
    list_filter = ["active"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]
    readonly_fields = [
        "other_ladders",
        "audit_pruned",
        "active",
        "deactivated_at",
        "deactivated_by",
        "created_at",
    ]
    actions = ["deactivate", "reactivate"]
    tenant_admin_may = ("view", "change")

    @admin.display(description="Agents' and tools' own ladders")
    def other_ladders(self, obj):
        # Named by URL: an agent's or a tool's ladder is edited under Notifications.
        try:
            url = reverse("admin:notifications_ladder_changelist")
        except NoReverseMatch:
            return "—"
        return format_html(
            'An agent or a tool may have reminders of its own: see <a href="{}">Ladders</a>.',
            url,
        )

    @admin.display(description="Audit pruned")
    def audit_pruned(self, obj):
        if not obj.audit_pruned_seq:
            return "Nothing pruned yet."
        return (
            f"Rows 1 to {obj.audit_pruned_seq} pruned; the chain is checked from there "
            f"(hash {obj.audit_pruned_hash[:12]}\u2026)."
        )

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["slug", "name", "time_zone", "invitation_domains"]
        return [
            "slug",
            *SETTINGS_FIELDS,
            "other_ladders",
            "audit_pruned",
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
        others = [
            n for n in form.changed_data if n not in TENANT_SETTINGS and n != "default_ladder"
        ]
        if others:
            obj.save(update_fields=others)
        if values:
            tenant_settings_set(tenant=obj, actor=request.user.subject, **values)
        if "default_ladder" in form.changed_data:
            tenant_ladder_set(
                tenant=obj, text=form.cleaned_data["default_ladder"], actor=request.user.subject
            )

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
