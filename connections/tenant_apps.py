"""A tenant's own OAuth apps: the client (id, secret, scopes, endpoints) its admin sets for
a catalog app, which wins over the platform's default for the tenant's connections
(connections.oauth.oauth_client_for). The secret is stored encrypted and never shown again;
every change is audited (``oauth_app.set``, ``oauth_app.removed``: which fields changed,
never the secret), and a check tries the client at its provider with no row locked, audited
as ``oauth_app.checked`` with its outcome in words."""

from django.db import transaction
from django.utils import timezone

from connections.crypto import InvalidToken, secret_encrypt
from connections.models import App, TenantApp
from connections.oauth import ClientCheck, oauth_client_check, tenant_app_client
from tenants.models import Tenant
from tenants.signals import tenant_changed

# What a tenant's admin sets of a tenant app, besides its secret.
FIELDS = (
    "client_id",
    "scopes",
    "server_url",
    "authorize_url",
    "token_url",
    "token_auth_method",
)


def _audit(*, tenant: Tenant, actor: str, action: str, **detail) -> None:
    tenant_changed.send(sender=Tenant, tenant=tenant, actor=actor, action=action, detail=detail)


def tenant_app_save(
    *, tenant: Tenant, app: App, actor: str, secret: str = "", **values
) -> TenantApp:
    """Create or change the tenant's own OAuth app for ``app``; an empty ``secret`` keeps the
    one set. Audited as oauth_app.set with the fields changed (the secret only as "replaced")."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"Not a field of an OAuth app: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        row = TenantApp.objects.select_for_update().filter(tenant=tenant, app=app).first()
        created = row is None
        if row is None:
            row = TenantApp(tenant=tenant, app=app)
        changed = {
            name: [getattr(row, name) if not created else "", value]
            for name, value in values.items()
            if created or getattr(row, name) != value
        }
        for name, value in values.items():
            setattr(row, name, value)
        if secret:
            row.client_secret_encrypted = secret_encrypt(secret)
            changed["client_secret"] = ["set" if not created else "", "replaced"]
        if not changed:
            return row
        row.updated_by, row.updated_at = actor, timezone.now()
        # A changed client is checked anew.
        row.checked_at, row.check_problem = None, ""
        row.full_clean(exclude=["tenant", "app"])
        row.save()
        _audit(
            tenant=tenant,
            actor=actor,
            action="oauth_app.set",
            app=app.slug,
            created=created,
            changed=changed,
        )
    return row


def tenant_app_remove(*, tenant_app: TenantApp, actor: str) -> None:
    """Remove the tenant's own OAuth app (the platform's default applies again); audited."""
    with transaction.atomic():
        TenantApp.objects.filter(pk=tenant_app.pk, tenant=tenant_app.tenant).delete()
        _audit(
            tenant=tenant_app.tenant,
            actor=actor,
            action="oauth_app.removed",
            app=tenant_app.app.slug,
        )


def tenant_app_check(*, tenant_app: TenantApp, actor: str = "") -> ClientCheck:
    """Try the tenant's OAuth app at its provider (connections.oauth.oauth_client_check) and
    keep what was found on the row. The provider is called with no row locked. With ``actor``
    (a person), audited as ``oauth_app.checked``: the outcome and what the provider said, so
    the log keeps every check where the row keeps only the last (never the secret)."""
    secret = ""
    try:
        client = tenant_app_client(tenant_app)
    except InvalidToken:
        check = ClientCheck(
            False, "Its secret cannot be decrypted (the encryption key changed): set it again."
        )
    else:
        secret = client.secret
        check = oauth_client_check(client)
    if secret and secret in check.said:
        # A provider that echoes what it was sent: its words are kept (on the row, in the log,
        # on the admin's page), the secret is not.
        check = ClientCheck(check.ok, check.said.replace(secret, "[secret]"))
    said = check.said[:500]
    with transaction.atomic():
        TenantApp.objects.filter(pk=tenant_app.pk).update(
            checked_at=timezone.now(), check_problem="" if check.ok else said
        )
        if actor:
            _audit(
                tenant=tenant_app.tenant,
                actor=actor,
                action="oauth_app.checked",
                app=tenant_app.app.slug,
                outcome="passed" if check.ok else "failed",
                said=said,
            )
    return check
