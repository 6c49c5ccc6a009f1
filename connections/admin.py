from django.contrib import admin, messages

from connections.models import App, Connection, ConnectionAuditEvent
from connections.services import connection_disconnect
from tenants.admin_scope import TenantScopedAdmin


@admin.register(App)
class AppAdmin(TenantScopedAdmin):
    """The app catalog every tenant connects from: platform staff's."""

    list_display = ["slug", "name", "method", "social_app", "active"]
    list_filter = ["method", "active"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    fields = [
        "slug",
        "name",
        "description",
        "method",
        "token_help",
        "social_app",
        "scopes",
        "active",
    ]


@admin.register(Connection)
class ConnectionAdmin(TenantScopedAdmin):
    """Read-only: connecting needs the secret, which only the connections page takes."""

    list_display = [
        "tenant",
        "app",
        "status",
        "connected_by",
        "connected_at",
        "disconnected_by",
        "disconnected_at",
    ]
    list_filter = ["status", "app", "tenant"]
    search_fields = ["tenant__slug", "app__slug", "connected_by__email"]
    list_select_related = ["tenant", "app", "connected_by", "disconnected_by"]
    # The encrypted columns are left out entirely, not just made read-only: even ciphertext
    # has no business on an admin page.
    readonly_fields = (
        "public_id",
        "tenant",
        "app",
        "status",
        "connected_by",
        "connected_at",
        "disconnected_by",
        "disconnected_at",
        "expires_at",
        "granted_scopes",
    )
    fields = readonly_fields
    actions = ["disconnect"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # A deleted row would leave no "disconnected" audit; disconnect instead.
        return False

    def get_queryset(self, request):
        return (
            super().get_queryset(request).defer("access_token_encrypted", "refresh_token_encrypted")
        )

    @admin.action(description="Disconnect the selected connections (audited)")
    def disconnect(self, request, queryset):
        done = sum(
            connection_disconnect(tenant=c.tenant, app=c.app, by=request.user)
            for c in queryset.select_related("tenant", "app")
        )
        self.message_user(request, f"Disconnected {done} connection(s).", messages.SUCCESS)


@admin.register(ConnectionAuditEvent)
class ConnectionAuditEventAdmin(TenantScopedAdmin):
    list_display = ["created_at", "tenant", "app", "action", "actor", "method"]
    list_filter = ["action", "app", "tenant"]
    search_fields = ["actor", "tenant__slug", "app__slug"]
    list_select_related = ["tenant", "app"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
