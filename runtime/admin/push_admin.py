"""Django admin for push notifications: a tenant's push settings, configs, deliveries."""

from django.contrib import admin, messages

from runtime.kernel.push.push_configs import push_config_enable, push_secret_rotate
from runtime.kernel.push.push_models import (
    PushAttempt,
    PushConfig,
    PushDelivery,
    PushSettings,
    SecretUnreadable,
)
from tenants.admin_scope import TenantScopedAdmin, TenantScopedInline


@admin.register(PushSettings)
class PushSettingsAdmin(TenantScopedAdmin):
    list_display = ["tenant", "rotated_at", "previous_valid_until"]
    fields = ["tenant", "allowed_hosts", "signing_secret", "previous_valid_until", "rotated_at"]
    readonly_fields = ["signing_secret", "previous_valid_until", "rotated_at"]
    actions = ["rotate_secret"]

    @admin.display(description="Signing secret")
    def signing_secret(self, obj) -> str:
        # Stored encrypted; shown to whoever may view the settings, to set up a receiver.
        if obj.pk is None:
            return "made when the settings are saved"
        try:
            return obj.secret
        except SecretUnreadable as exc:
            return str(exc)

    @admin.action(
        description="Rotate the push signing secret (the old one stays valid for the grace period)"
    )
    def rotate_secret(self, request, queryset):
        for found in queryset.select_related("tenant"):
            push_secret_rotate(tenant=found.tenant)
        messages.success(request, f"Rotated {queryset.count()} push secret(s).")


class PushAttemptInline(TenantScopedInline, admin.TabularInline):
    model = PushAttempt
    tenant_admin_may = ("view",)
    extra = 0
    can_delete = False
    readonly_fields = ["at", "status_code", "error", "duration_ms"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(PushDelivery)
class PushDeliveryAdmin(TenantScopedAdmin):
    list_display = ["config", "seq", "state", "attempts", "next_attempt_at", "last_error"]
    list_filter = ["state", "tenant"]
    readonly_fields = [f.name for f in PushDelivery._meta.fields]
    inlines = [PushAttemptInline]

    def has_add_permission(self, request):
        return False


@admin.register(PushConfig)
class PushConfigAdmin(TenantScopedAdmin):
    ordering = ["-pk"]  # a stable order for pages and autocomplete
    list_display = [
        "public_id",
        "task",
        "tenant",
        "subject",
        "url",
        "disabled_at",
        "disabled_reason",
    ]
    list_filter = ["tenant", ("disabled_at", admin.EmptyFieldListFilter)]
    search_fields = ["public_id", "task__public_id", "url"]
    # Both are stored encrypted: the form would show (and save back) ciphertext.
    exclude = ["auth_credentials", "token"]
    # Whether a config is disabled changes through the action below, under the task's row
    # lock (push_config_enable), or by its deliveries (a 410, a URL that can never work).
    readonly_fields = [
        "tenant",
        "task",
        "subject",
        "receiver",
        "activated",
        "disabled_at",
        "disabled_reason",
        "lease_owner",
        "lease_until",
    ]
    actions = ["enable"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "url":
            kwargs["assume_scheme"] = "https"  # a URL typed without one (Django 6's default)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.action(description="Enable the selected push configs again (from their next event)")
    def enable(self, request, queryset):
        enabled = sum(push_config_enable(config) for config in queryset)
        messages.success(request, f"Enabled {enabled} push config(s).")

    def has_add_permission(self, request):
        return False
