from django.contrib import admin
from django.urls import include, path
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView

from a2a_endpoint import views as a2a_views
from config import health, metrics, outbox_views
from integrations.slack import settings_views as slack_settings_views
from tenants import away_api, member_away_api, profile_views
from tenants import views as tenant_views

urlpatterns = [
    path("", tenant_views.home, name="home"),
    path("favicon.ico", tenant_views.favicon, name="favicon"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    # The keys that sign receipts (runtime.decisions.signing): anyone may fetch them.
    path(".well-known/jwks.json", a2a_views.jwks, name="jwks"),
    path("tenant/switch", tenant_views.tenant_switch, name="tenant_switch"),
    path("me/", profile_views.profile, name="profile"),
    path("me/away", profile_views.profile_away, name="profile_away"),
    path("me/back", profile_views.profile_back, name="profile_back"),
    # Development's kept e-mails (config.outbox): 404 unless DEBUG.
    path("dev/outbox/", outbox_views.outbox_list, name="dev_outbox"),
    path("dev/outbox/<str:name>/", outbox_views.outbox_mail, name="dev_outbox_mail"),
    path("dev/outbox/<str:name>/html", outbox_views.outbox_html, name="dev_outbox_html"),
    path("", include("approvals.urls")),
    path("connections/", include("connections.urls")),
    path(
        "settings/notifications/slack",
        slack_settings_views.slack_app_settings,
        name="slack_app_settings",
    ),
    path(
        "settings/notifications/slack/remove",
        slack_settings_views.slack_app_remove,
        name="slack_app_remove",
    ),
    path("settings/notifications/", include("notifications.urls")),
    path("integrations/", include("integrations.urls")),
    path("a2a/", include("a2a_endpoint.urls")),
    path("gateways/", include("mcp_gateway.urls")),
    path(
        "accounts/invitation/<str:key>/",
        tenant_views.invitation_accept,
        name="invitation_accept",
    ),
    path("accounts/", include("allauth.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/whoami", tenant_views.whoami, name="api_whoami"),
    path("api/v1/me/away", away_api.me_away, name="api_me_away"),
    path(
        "api/v1/members/<int:member_id>/away",
        member_away_api.member_away,
        name="api_member_away",
    ),
    # The REST API's OpenAPI schema (YAML; ?format=json for JSON), at the trailing-slash path
    # every page uses and, as before, without it; and an explorer over it.
    path("api/schema/", SpectacularAPIView.as_view(), name="api_schema"),
    path("api/schema", SpectacularAPIView.as_view(), name="api_schema_unslashed"),
    path(
        "api/docs/",
        ensure_csrf_cookie(TemplateView.as_view(template_name="api/explorer.html")),
        name="api_docs",
    ),
]

# Django's error pages, reading a body it cannot parse first (config/error_views.py).
handler400 = "config.error_views.bad_request"
handler403 = "config.error_views.permission_denied"
handler404 = "config.error_views.page_not_found"
handler500 = "config.error_views.server_error"
