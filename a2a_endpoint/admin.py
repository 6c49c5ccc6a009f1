from django.contrib import admin, messages

from a2a_endpoint.models import PushAttempt, PushConfig, PushDelivery, PushSettings
from a2a_endpoint.push_configs import push_secret_rotate


@admin.register(PushSettings)
class PushSettingsAdmin(admin.ModelAdmin):
    list_display = ["tenant", "rotated_at", "previous_valid_until"]
    fields = ["tenant", "allowed_hosts", "secret", "previous_valid_until", "rotated_at"]
    readonly_fields = ["secret", "previous_valid_until", "rotated_at"]
    actions = ["rotate_secret"]

    @admin.action(
        description="Rotate the push signing secret (the old one stays valid for the grace period)"
    )
    def rotate_secret(self, request, queryset):
        for found in queryset.select_related("tenant"):
            push_secret_rotate(tenant=found.tenant)
        messages.success(request, f"Rotated {queryset.count()} push secret(s).")


class PushAttemptInline(admin.TabularInline):
    model = PushAttempt
    extra = 0
    can_delete = False
    readonly_fields = ["at", "status_code", "error", "duration_ms"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(PushDelivery)
class PushDeliveryAdmin(admin.ModelAdmin):
    list_display = ["config", "seq", "state", "attempts", "next_attempt_at", "last_error"]
    list_filter = ["state", "tenant"]
    readonly_fields = [f.name for f in PushDelivery._meta.fields]
    inlines = [PushAttemptInline]

    def has_add_permission(self, request):
        return False


@admin.register(PushConfig)
class PushConfigAdmin(admin.ModelAdmin):
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
    readonly_fields = [
        "tenant",
        "task",
        "subject",
        "receiver",
        "activated",
        "lease_owner",
        "lease_until",
    ]

    def has_add_permission(self, request):
        return False
