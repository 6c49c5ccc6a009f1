"""E-mail's one-time links in Django admin: read-only, hashes only."""

from django.contrib import admin

from integrations.email.models import EmailLink
from tenants.admin_scope import TenantScopedAdmin


@admin.register(EmailLink)
class EmailLinkAdmin(TenantScopedAdmin):
    list_display = ["email", "interaction", "tenant", "created_at", "expires_at", "used_at"]
    readonly_fields = [
        "tenant",
        "interaction",
        "membership",
        "email",
        "created_at",
        "expires_at",
        "used_at",
        "used_for",
    ]
    exclude = ["token_hash"]
    tenant_admin_may = ("view",)

    def has_add_permission(self, request):
        return False
