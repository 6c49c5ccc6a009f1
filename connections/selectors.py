"""Reads of tenant connections; every one takes the tenant."""

import logging
from dataclasses import dataclass

from connections.crypto import InvalidToken, secret_decrypt
from connections.models import App, Connection, ConnectionAuditEvent, TenantApp
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def connection_secret_for(*, tenant: Tenant, app_slug: str) -> str | None:
    """The decrypted token of the tenant's connection to the app, or None when not usable.

    For tool servers (``github`` / ``create_pull_request`` needs the tenant's github token).
    None means: not connected, the OAuth2 token has expired, or the row cannot be decrypted
    with the current CONNECTIONS_ENCRYPTION_KEY; the agent can then ask for a connection.
    """
    connection = (
        Connection.objects.filter(
            tenant=tenant,
            app__slug=app_slug,
            app__active=True,
            status=Connection.Status.CONNECTED,
        )
        .only("pk", "access_token_encrypted", "expires_at")
        .first()
    )
    if connection is None or not connection.access_token_encrypted:
        return None
    if connection.is_expired():
        # Tool servers renew it with connections.oauth.connection_access_token; this read
        # (the demo github server's) does no network I/O and treats it as not connected.
        logger.info("connection %s of %s has expired", app_slug, tenant.slug)
        return None
    try:
        return secret_decrypt(connection.access_token_encrypted)
    except InvalidToken:
        logger.error(
            "connection %s of %s cannot be decrypted (was CONNECTIONS_ENCRYPTION_KEY or "
            "SECRET_KEY changed?); connect it again",
            app_slug,
            tenant.slug,
        )
        return None


@dataclass(frozen=True)
class CatalogEntry:
    app: App
    connection: Connection | None
    # The tenant's own OAuth app for it (set by its admin), which wins over the platform's.
    tenant_app: TenantApp | None = None

    @property
    def connected(self) -> bool:
        return self.connection is not None and self.connection.is_connected

    @property
    def oauth2_ready(self) -> bool:
        """Whether a connect can start: the tenant's own client, or the platform's default."""
        own = self.tenant_app
        if own is not None and own.client_id and own.secret_set:
            return True
        return self.app.oauth2_ready

    @property
    def provider_name(self) -> str:
        """Whose sign-in the connect button names."""
        if self.tenant_app is not None and self.tenant_app.secret_set:
            return self.app.name
        social_app = self.app.social_app if self.app.social_app_id else None
        return social_app.name if social_app is not None else self.app.name


def catalog_for_tenant(*, tenant: Tenant) -> list[CatalogEntry]:
    """The active catalog apps, each with this tenant's connection and own OAuth app (or
    None): three queries whatever the catalog's size."""
    apps = list(App.objects.filter(active=True).select_related("social_app"))
    connections = {
        c.app_id: c
        for c in Connection.objects.filter(tenant=tenant, app__in=apps)
        .select_related("connected_by", "disconnected_by")
        .defer("access_token_encrypted", "refresh_token_encrypted")
    }
    own = {t.app_id: t for t in TenantApp.objects.filter(tenant=tenant, app__in=apps)}
    return [
        CatalogEntry(app=app, connection=connections.get(app.pk), tenant_app=own.get(app.pk))
        for app in apps
    ]


def connection_events_for_tenant(*, tenant: Tenant, limit: int = 20) -> list[ConnectionAuditEvent]:
    return list(ConnectionAuditEvent.objects.filter(tenant=tenant).select_related("app")[:limit])


def app_for_member(*, slug: str) -> App | None:
    """An active catalog app by slug (the catalog is global; connections are per tenant)."""
    return App.objects.filter(slug=slug, active=True).select_related("social_app").first()


def connected_app_slugs(*, tenant: Tenant) -> list[str]:
    """The slugs of the apps the tenant has connected (and not expired): what agents may use."""
    from django.db.models import Q
    from django.utils import timezone

    return list(
        Connection.objects.filter(
            tenant=tenant, status=Connection.Status.CONNECTED, app__active=True
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .values_list("app__slug", flat=True)
    )
