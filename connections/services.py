"""State changes of tenant connections. Each service is one transaction and writes its audit
row in it; the runtime hears of a new connection only after that transaction commits."""

import logging
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from connections.crypto import secret_encrypt
from connections.models import App, Connection, ConnectionAuditEvent
from connections.selectors import connection_secret_for  # noqa: F401  (re-exported for tools)
from connections.signals import app_connected
from tenants.models import Tenant, User
from tenants.signals import tenant_changed

logger = logging.getLogger(__name__)

# Longer than any real API token or OAuth2 access token we know of; refuses pasted essays.
TOKEN_MAX_LENGTH = 4096
# Ten years: a longer OAuth2 lifetime is as good as none, and would overflow datetime maths.
MAX_EXPIRES_IN = 10 * 365 * 24 * 3600


class ConnectError(Exception):
    """Why a connect was refused; the message is safe to show to the operator."""


def token_text_clean(token: str) -> str:
    """The pasted token without surrounding blanks, or ConnectError saying what is wrong."""
    token = (token or "").strip()
    if not token:
        raise ConnectError("Paste the token.")
    if len(token) > TOKEN_MAX_LENGTH:
        raise ConnectError(f"A token is at most {TOKEN_MAX_LENGTH} characters.")
    # Tokens are single printable words; a space or newline inside means a bad paste (two
    # tokens, a label copied along), which would only fail later at the app's API.
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise ConnectError("A token has no spaces, line breaks or control characters.")
    return token


def _audited(*, tenant: Tenant, app: App, action: str, actor: str, at, method: str = "") -> None:
    """A connection's change, recorded twice in its transaction: the row the connections
    page lists, and the tenant's audit log (``connection.connected``/``.disconnected``, by
    tenants.signals.tenant_changed), whose rows are hash-chained, so that ``audit verify``
    and evidence packs cover connections too."""
    ConnectionAuditEvent.objects.create(
        tenant=tenant, app=app, action=action, actor=actor, method=method, created_at=at
    )
    detail = {"app": app.slug, **({"method": method} if method else {})}
    tenant_changed.send(
        sender=Connection,
        tenant=tenant,
        actor=actor,
        action=f"connection.{action}",
        detail=detail,
        via="page" if actor.startswith("user:") else "system",
    )


def _connection_locked(*, tenant: Tenant, app: App) -> Connection:
    # Two operators may connect the same app at once: lock the row, and when it does not exist
    # yet let the unique constraint pick the winner and lock the row it made.
    connection = Connection.objects.select_for_update().filter(tenant=tenant, app=app).first()
    if connection is not None:
        return connection
    try:
        with transaction.atomic():
            return Connection.objects.create(
                tenant=tenant, app=app, status=Connection.Status.DISCONNECTED
            )
    except IntegrityError:
        return Connection.objects.select_for_update().get(tenant=tenant, app=app)


def _connected(
    *,
    connection: Connection,
    by: User,
    access_token: str,
    refresh_token: str,
    expires_at,
    granted_scopes: str,
) -> Connection:
    now = timezone.now()
    connection.status = Connection.Status.CONNECTED
    connection.connected_by = by
    connection.connected_at = now
    connection.disconnected_by = None
    connection.disconnected_at = None
    connection.access_token_encrypted = secret_encrypt(access_token)
    connection.refresh_token_encrypted = secret_encrypt(refresh_token) if refresh_token else ""
    connection.expires_at = expires_at
    connection.granted_scopes = granted_scopes[:500]
    connection.save(
        update_fields=[
            "status",
            "connected_by",
            "connected_at",
            "disconnected_by",
            "disconnected_at",
            "access_token_encrypted",
            "refresh_token_encrypted",
            "expires_at",
            "granted_scopes",
        ]
    )
    _audited(
        tenant=connection.tenant,
        app=connection.app,
        action=ConnectionAuditEvent.Action.CONNECTED,
        actor=by.subject,
        method=connection.app.method,
        at=now,
    )
    tenant, app_slug, subject = connection.tenant, connection.app.slug, by.subject
    # After commit, so that the resumed turns' next tool call finds the connection (the
    # runtime's receiver answers the tenant's open connection interactions for this app).
    # Robust: the connection is made whatever a receiver does; its failure is logged by
    # Django and must not turn the operator's successful connect into an error page.
    transaction.on_commit(
        lambda: app_connected.send_robust(Connection, tenant=tenant, app=app_slug, by=subject),
        robust=True,
    )
    return connection


def _app_check(*, app: App, method: str) -> None:
    if not app.active:
        raise ConnectError(f"{app.name} is not offered any more.")
    if app.method != method:
        raise ConnectError(f"{app.name} is not connected with {method}.")


def connection_connect_token(*, tenant: Tenant, app: App, token: str, by: User) -> Connection:
    """Connect (or reconnect) a token app for the tenant with a pasted token."""
    _app_check(app=app, method=App.Method.TOKEN)
    token = token_text_clean(token)
    with transaction.atomic():
        connection = _connection_locked(tenant=tenant, app=app)
        return _connected(
            connection=connection,
            by=by,
            access_token=token,
            refresh_token="",
            expires_at=None,
            granted_scopes="",
        )


def connection_connect_oauth(
    *,
    tenant: Tenant,
    app: App,
    access_token: str,
    refresh_token: str = "",
    expires_in: int | None = None,
    granted_scopes: str = "",
    by: User,
) -> Connection:
    """Connect (or reconnect) an OAuth2 app for the tenant with the tokens the provider gave."""
    _app_check(app=app, method=App.Method.OAUTH2)
    if not access_token:
        raise ConnectError(f"{app.name} sent no access token.")
    expires_at = (
        timezone.now() + timedelta(seconds=min(expires_in, MAX_EXPIRES_IN))
        if expires_in and expires_in > 0
        else None
    )
    with transaction.atomic():
        connection = _connection_locked(tenant=tenant, app=app)
        return _connected(
            connection=connection,
            by=by,
            access_token=access_token,
            refresh_token=refresh_token,
            expires_at=expires_at,
            granted_scopes=granted_scopes,
        )


# The actor of a token refresh in the connection audit: nobody connected anything, the
# stored refresh token was used.
TOKEN_REFRESH_ACTOR = "system:token-refresh"
TOKEN_REFRESH_METHOD = "refresh"


def connection_tokens_refreshed(
    *,
    connection: Connection,
    access_token: str,
    refresh_token: str = "",
    expires_in: int | None = None,
) -> bool:
    """Store the tokens a refresh_token grant gave (encrypted) with their audit row; False, and
    nothing stored, when the connection changed since ``connection`` was read (disconnected,
    reconnected, or refreshed by another worker: its tokens win)."""
    now = timezone.now()
    with transaction.atomic():
        current = (
            Connection.objects.select_for_update()
            .filter(pk=connection.pk, status=Connection.Status.CONNECTED)
            .first()
        )
        if current is None or current.refresh_token_encrypted != connection.refresh_token_encrypted:
            return False
        current.access_token_encrypted = secret_encrypt(access_token)
        if refresh_token:
            # A provider that rotates refresh tokens sends a new one; one that does not keeps
            # the old one valid (RFC 6749 section 6).
            current.refresh_token_encrypted = secret_encrypt(refresh_token)
        current.expires_at = (
            now + timedelta(seconds=min(expires_in, MAX_EXPIRES_IN))
            if expires_in and expires_in > 0
            else None
        )
        current.save(
            update_fields=["access_token_encrypted", "refresh_token_encrypted", "expires_at"]
        )
        _audited(
            tenant=current.tenant,
            app=current.app,
            action=ConnectionAuditEvent.Action.CONNECTED,
            actor=TOKEN_REFRESH_ACTOR,
            method=TOKEN_REFRESH_METHOD,
            at=now,
        )
    return True


def connection_disconnect(*, tenant: Tenant, app: App, by: User) -> bool:
    """Disconnect and forget the secrets; False when the app was not connected (no audit)."""
    now = timezone.now()
    with transaction.atomic():
        # The conditional update is the claim: of two operators disconnecting at once, one
        # wins and writes the single audit row.
        claimed = Connection.objects.filter(
            tenant=tenant, app=app, status=Connection.Status.CONNECTED
        ).update(
            status=Connection.Status.DISCONNECTED,
            disconnected_by=by,
            disconnected_at=now,
            access_token_encrypted="",
            refresh_token_encrypted="",
            expires_at=None,
            granted_scopes="",
        )
        if claimed != 1:
            return False
        _audited(
            tenant=tenant,
            app=app,
            action=ConnectionAuditEvent.Action.DISCONNECTED,
            actor=by.subject,
            at=now,
        )
    return True
