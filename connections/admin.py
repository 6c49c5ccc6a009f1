from django import forms
from django.contrib import admin, messages

from connections.models import App, Connection, ConnectionAuditEvent, TenantApp
from connections.services import connection_disconnect
from connections.tenant_apps import FIELDS, tenant_app_check, tenant_app_remove, tenant_app_save
from tenants.admin_scope import TenantScopedAdmin


@admin.register(App)
class AppAdmin(TenantScopedAdmin):
    """The app catalog every tenant connects from: platform staff's. An OAuth2 app's social
    application holds the platform-wide default client; a tenant's admin may set the
    tenant's own under "OAuth apps of the tenant", which wins for that tenant."""

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


class TenantAppForm(forms.ModelForm):
    client_secret = forms.CharField(
        required=False,
        strip=True,
        max_length=2000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Stored encrypted and never shown again. Empty keeps the one set.",
    )
    # A URL typed without a scheme is https (Django 6's default, said now).
    server_url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        label="Server URL",
        help_text=TenantApp._meta.get_field("server_url").help_text,
    )
    authorize_url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        label="Authorize URL",
        help_text="With the token URL: the provider's own endpoints.",
    )
    token_url = forms.URLField(
        required=False, max_length=500, assume_scheme="https", label="Token URL"
    )

    class Meta:
        model = TenantApp
        fields = ["tenant", "app", *FIELDS]
        labels = {"client_id": "Client id"}

    def clean(self):
        data = super().clean() or {}
        if not self.instance.secret_set and not data.get("client_secret"):
            self.add_error("client_secret", "Give the client secret the provider issued.")
        if bool(data.get("authorize_url")) != bool(data.get("token_url")):
            field = "token_url" if data.get("authorize_url") else "authorize_url"
            self.add_error(field, "Give both the authorize URL and the token URL, or neither.")
        return data


@admin.register(TenantApp)
class TenantAppAdmin(TenantScopedAdmin):
    """A tenant's own OAuth client for a catalog app, set by its admin: the secret is set,
    never shown; "check" tries it at the provider."""

    form = TenantAppForm
    tenant_admin_may = ("view", "add", "change", "delete")
    list_display = ["app", "tenant", "client_id", "secret", "last_check", "updated_by"]
    list_select_related = ["tenant", "app"]
    list_filter = ["tenant"]
    search_fields = ["app__slug", "app__name", "client_id"]
    readonly_fields = ["secret", "last_check", "updated_by", "updated_at"]
    actions = ["check_at_provider"]

    def get_fields(self, request, obj=None):
        fields = ["tenant", "app", "client_id", "client_secret", *FIELDS[1:]]
        return fields + (["secret", "last_check", "updated_by", "updated_at"] if obj else [])

    def get_readonly_fields(self, request, obj=None):
        # The app is what the row is for: remove the row to set up another app.
        return [*self.readonly_fields, "app"] if obj is not None else self.readonly_fields

    @admin.display(description="client secret")
    def secret(self, obj: TenantApp) -> str:
        return "set" if obj.secret_set else "not set"

    @admin.display(description="last check")
    def last_check(self, obj: TenantApp) -> str:
        if obj.checked_at is None:
            return "not checked yet"
        return f"failed: {obj.check_problem}" if obj.check_problem else "passed"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        saved = tenant_app_save(
            tenant=obj.tenant,
            app=obj.app,
            actor=request.user.subject,
            secret=data.get("client_secret") or "",
            **{name: data.get(name) or "" for name in FIELDS},
        )
        obj.pk = saved.pk
        obj.client_secret_encrypted = saved.client_secret_encrypted

    def delete_model(self, request, obj):
        tenant_app_remove(tenant_app=obj, actor=request.user.subject)

    def delete_queryset(self, request, queryset):
        for obj in queryset.select_related("tenant", "app"):
            tenant_app_remove(tenant_app=obj, actor=request.user.subject)

    @admin.action(description="Check the selected OAuth apps at their providers")
    def check_at_provider(self, request, queryset):
        for tenant_app in queryset.select_related("tenant", "app__social_app"):
            result = tenant_app_check(tenant_app=tenant_app, actor=request.user.subject)
            self.message_user(
                request,
                f"{tenant_app.app.name}: {'passed' if result.ok else 'failed'}. {result.said}",
                messages.SUCCESS if result.ok else messages.ERROR,
            )
