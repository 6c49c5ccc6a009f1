"""Notifications in Django admin: channels (secrets set, never shown), ladders, deliveries
with their attempts, members' preferences."""

import json

from django import forms
from django.contrib import admin

from notifications.channel_settings import ChannelError, channel_check, channel_save
from notifications.ladders import ROLES, steps_clean, steps_stored
from notifications.models import Attempt, Channel, Delivery, Ladder, Preference
from notifications.services import channel_test
from runtime.decisions.decision_models import Interaction
from tenants.admin_scope import TenantScopedAdmin, TenantScopedInline


class ChannelAdminForm(forms.ModelForm):
    url = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Incoming webhook URL (stored encrypted; empty keeps the current one).",
    )

    class Meta:
        model = Channel
        fields = [
            "tenant",
            "name",
            "kind",
            "enabled",
            "email_roles",
            "email_addresses",
            "slack_channel",
            "kinds",
            "agents",
            "tools",
            "omit_arguments",
        ]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if self.errors:
            return data
        for name in ("email_roles", "email_addresses", "kinds", "agents", "tools"):
            value = data.get(name) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                self.add_error(name, "A JSON list of texts.")
        allowed = {"email_roles": set(ROLES), "kinds": set(Interaction.Kind.values)}
        for name, values in allowed.items():
            value = data.get(name) or []
            if isinstance(value, list) and not set(value) <= values:
                self.add_error(name, f"Each one of: {', '.join(sorted(values))}.")
        if self.errors:
            return data
        try:
            channel_check(
                tenant=data["tenant"],
                channel=Channel.objects.get(pk=self.instance.pk) if self.instance.pk else None,
                name=data["name"],
                kind=data["kind"],
                email_roles=data.get("email_roles") or [],
                email_addresses=data.get("email_addresses") or [],
                url=data.get("url", ""),
                slack_channel=data.get("slack_channel", ""),
            )
        except ChannelError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(Channel)
class ChannelAdmin(TenantScopedAdmin):
    form = ChannelAdminForm
    list_display = ["name", "tenant", "kind", "enabled", "omit_arguments", "url_hint"]
    list_filter = ["kind", "enabled", "tenant"]
    readonly_fields = ["public_id", "url_hint"]
    actions = ["send_test"]

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        try:
            _, secret = channel_save(
                tenant=data["tenant"],
                channel=Channel.objects.get(pk=obj.pk) if change else None,
                name=data["name"],
                kind=data["kind"],
                enabled=data["enabled"],
                email_roles=data["email_roles"] or [],
                email_addresses=data["email_addresses"] or [],
                url=data.get("url", ""),
                slack_channel=data.get("slack_channel", ""),
                kinds=data["kinds"] or [],
                agents=data["agents"] or [],
                tools=data["tools"] or [],
                omit_arguments=data["omit_arguments"],
            )
        except ChannelError as exc:
            self.message_user(request, f"Not saved: {exc}", level="error")
            return
        if secret:
            # Not shown here: admin messages travel in a cookie. The settings page shows a
            # new secret once, on its own response.
            self.message_user(
                request,
                'A signing secret was made. To see one, use "New signing secret" on the '
                "channel's page under Notifications.",
            )

    @admin.action(description="Send a test notification")
    def send_test(self, request, queryset):
        for channel in queryset:
            channel_test(channel=channel)
        self.message_user(request, f"{queryset.count()} test notification(s) queued.")


class LadderAdminForm(forms.ModelForm):
    class Meta:
        model = Ladder
        fields = ["tenant", "agent", "tool", "steps"]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        agent, tenant = data.get("agent"), data.get("tenant")
        if agent is not None and tenant is not None and agent.tenant_id != tenant.pk:
            self.add_error("agent", "This agent belongs to another tenant.")
        return data

    def clean_steps(self):
        try:
            cleaned = steps_clean(self.cleaned_data["steps"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return steps_stored(cleaned)


@admin.register(Ladder)
class LadderAdmin(TenantScopedAdmin):
    form = LadderAdminForm
    list_display = ["tenant", "agent", "tool", "steps_text"]
    list_filter = ["tenant"]

    @admin.display(description="steps")
    def steps_text(self, obj):
        return json.dumps(obj.steps)


class AttemptInline(TenantScopedInline, admin.TabularInline):
    model = Attempt
    tenant_admin_may = ("view",)
    extra = 0
    can_delete = False
    readonly_fields = ["number", "at", "ok", "status_code", "error"]


@admin.register(Delivery)
class DeliveryAdmin(TenantScopedAdmin):
    list_display = ["channel", "interaction", "event", "step", "state", "attempts", "created_at"]
    list_filter = ["state", "event", "tenant"]
    readonly_fields = [f.name for f in Delivery._meta.fields]
    inlines = [AttemptInline]
    tenant_admin_may = ("view",)

    def has_add_permission(self, request):
        return False


@admin.register(Preference)
class PreferenceAdmin(TenantScopedAdmin):
    list_display = ["membership", "email_enabled", "digest_minutes", "last_digest_at"]
