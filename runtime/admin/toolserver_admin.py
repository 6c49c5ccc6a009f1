"""Django admin's pages of a tenant's tool servers (discovery, signing secrets shown once)
and of its default policy by MCP tool annotations."""

from django.contrib import admin, messages
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from runtime.admin.record_admin import pretty
from runtime.agents.agent_models import AnnotationPolicy, ToolServer
from runtime.kernel.audit import audit_record
from runtime.policy.rules import HINT_KINDS, HINT_WORDS, hint_defaults, hint_kind
from runtime.tools.catalog import HINTS
from runtime.tools.servers import DiscoveryError, tool_server_refresh
from tenants.admin_scope import TenantScopedAdmin


@admin.register(ToolServer)
class ToolServerAdmin(TenantScopedAdmin):
    """A tenant's MCP and HTTP tool servers: tools discovered with "Refresh tools" and cached;
    an HTTP server's signing secret is made with the server and shown once."""

    list_display = ["name", "tenant", "kind", "url", "app", "active", "tool_count", "refreshed_at"]
    list_filter = ["kind", "active", "tenant"]
    search_fields = ["name", "url"]
    list_select_related = ["tenant", "app"]
    fields = [
        "tenant",
        "name",
        "kind",
        "url",
        "app",
        "timeout_seconds",
        "active",
        "signing_secret",
        "refreshed_at",
        "refresh_error",
        "discovered_tools",
        "created_at",
    ]
    readonly_fields = [
        "signing_secret",
        "refreshed_at",
        "refresh_error",
        "discovered_tools",
        "created_at",
    ]
    actions = ["refresh_tools", "rotate_signing_secret"]
    change_form_template = "runtime/admin/toolserver_change_form.html"

    @admin.display(description="tools")
    def tool_count(self, obj: ToolServer) -> int:
        return len(obj.tools or [])

    @admin.display(description="signing secret")
    def signing_secret(self, obj: ToolServer) -> str:
        # The secret itself is never rendered again; only whether there is one.
        return "set (shown once, when made)" if obj.signing_secret_encrypted else "—"

    @admin.display(description="discovered tools")
    def discovered_tools(self, obj: ToolServer):
        if not obj.tools:
            return "none yet: use Refresh tools"
        # What the tenant's annotation default makes of each tool that no agent's policy names.
        defaults = hint_defaults(obj.tenant_id)
        rows = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    tool.get("name", ""),
                    hints_text(tool.get("annotations")),
                    HINT_WORDS[hint_kind(tool.get("annotations"))],
                    defaults[hint_kind(tool.get("annotations"))],
                )
                for tool in obj.tools
            ),
        )
        return format_html(
            '<table class="tool-hints"><thead><tr><th>tool</th><th>annotations</th>'
            "<th>kind</th><th>default decision</th></tr></thead><tbody>{}</tbody></table>"
            '<p class="help">The default decision applies to calls of a tool that no entry of '
            "the agent's policy names (<code>{}/TOOL</code> or <code>{}</code>); it is the "
            "tenant's, set in Tool annotation defaults.</p>{}",
            rows,
            obj.name,
            obj.name,
            pretty(obj.tools),
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        # A server's tenant is its identity: its agents, policies and connection are that
        # tenant's; make a new server for another tenant.
        return [*self.readonly_fields, "tenant"]

    def save_model(self, request, obj, form, change):
        if not change:
            request._countersign_secret = obj.signing_secret_new()
        obj.save()

    def response_add(self, request, obj, post_url_continue=None):
        secret = getattr(request, "_countersign_secret", None)
        if obj.kind != ToolServer.Kind.HTTP or not secret:
            return super().response_add(request, obj, post_url_continue)
        return self.secrets_page(request, "Tool server created", [(obj, secret)])

    def secrets_page(self, request, title: str, secrets: list) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "secrets": secrets,
            "opts": self.model._meta,
        }
        # Rendered straight from the POST: the secret is in no session, log or URL.
        response = TemplateResponse(request, "runtime/admin/toolserver_secret.html", context)
        response["Cache-Control"] = "no-store"
        return response

    def get_urls(self):
        return [
            path(
                "<int:object_id>/refresh/",
                self.admin_site.admin_view(self.refresh_view),
                name="runtime_toolserver_refresh",
            ),
            *super().get_urls(),
        ]

    def refresh_one(self, request, server: ToolServer) -> bool:
        try:
            tools = tool_server_refresh(server=server)
        except DiscoveryError as exc:
            self.message_user(request, f"Tool server {server.name}: {exc}", messages.ERROR)
            return False
        names = ", ".join(t["name"] for t in tools) or "none"
        self.message_user(
            request,
            f"Tool server {server.name}: found {len(tools)} tool(s): {names}.",
            messages.SUCCESS,
        )
        return True

    def refresh_view(self, request, object_id: int):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        # The changelist's scope: another tenant's server is a 404, as a missing one.
        server = get_object_or_404(
            self.get_queryset(request).select_related("tenant", "app"), pk=object_id
        )
        if not self.has_change_permission(request, server):
            return HttpResponseRedirect(reverse("admin:index"))
        self.refresh_one(request, server)
        return HttpResponseRedirect(reverse("admin:runtime_toolserver_change", args=[server.pk]))

    @admin.action(description="Refresh tools (discover what the servers offer)")
    def refresh_tools(self, request, queryset):
        for server in queryset.select_related("tenant", "app"):
            self.refresh_one(request, server)

    @admin.action(description="Rotate the signing secret (HTTP servers; shown once)")
    def rotate_signing_secret(self, request, queryset):
        rotated = []
        for server in queryset.filter(kind=ToolServer.Kind.HTTP).select_related("tenant"):
            secret = server.signing_secret_new()
            server.save(update_fields=["signing_secret_encrypted"])
            rotated.append((server, secret))
        if not rotated:
            self.message_user(request, "No HTTP tool server was selected.", messages.WARNING)
            return None
        return self.secrets_page(request, "Signing secrets rotated", rotated)


def hints_text(annotations) -> str:
    """A tool's kept annotations as admin lists them: "readOnlyHint, openWorldHint: false"."""
    hints = annotations if isinstance(annotations, dict) else {}
    words = [name if hints[name] is True else f"{name}: false" for name in HINTS if name in hints]
    return ", ".join(words) or "none"


@admin.register(AnnotationPolicy)
class AnnotationPolicyAdmin(TenantScopedAdmin):
    """A tenant's default policy for its tool servers' tools by their MCP annotations
    (runtime.policy.rules): one row per tenant; without it, read-only tools run and the
    rest wait for a person. An agent's policy entry for the tool (or server) always wins."""

    list_display = ["tenant", "read_only", "additive", "destructive", "unknown", "updated_at"]
    list_select_related = ["tenant"]
    fields = ["tenant", "read_only", "additive", "destructive", "unknown", "updated_at"]
    readonly_fields = ["updated_at"]

    def save_model(self, request, obj, form, change):
        obj.save()
        # Inside the admin's transaction: who changed what tools run unasked is audited.
        audit_record(
            tenant_id=obj.tenant_id,
            actor=request.user.subject,
            action="annotation_policy.changed",
            via="admin",
            detail={kind: obj.action_for(kind) for kind in HINT_KINDS},
        )
