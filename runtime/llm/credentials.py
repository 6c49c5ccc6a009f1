"""Credentials for model providers and agent URLs, referenced by name from AGENT.md
(``model.credential``). Never logged, never in an error message, never on the wire.

A tenant's own credential (runtime.agents.agent_models.Credential, set in Django admin,
stored encrypted) comes first. Otherwise a single-tenant install may give it in the environment, but only for
the names settings.CREDENTIAL_ENV_NAMES lists: an agent's file names its credential, and an
open lookup would let any tenant's agent send, say, SECRET_KEY or DATABASE_URL to a model URL
of its choosing.
"""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from config.env import env_secret
from connections.crypto import InvalidToken, secret_decrypt, secret_encrypt
from runtime.agents.agent_models import Credential
from runtime.agents.agent_store import credential_secret_read
from runtime.kernel.audit import audit_record


class CredentialMissing(Exception):
    """The named credential is not set for this tenant (the message names it, not its value)."""


def credential_value(*, tenant, name: str, environment: bool = True) -> str:
    """The secret a provider sends for ``name``: the tenant's own credential of that name,
    else (when ``environment``) the environment variable of that name (single-tenant installs).

    A provider that sends the secret to a URL a tenant entered passes ``environment=False``:
    the installer's key goes only where the installer said (OPENAI_BASE_URL or the provider's
    own endpoint), never to a tenant's server."""
    if not name:
        raise CredentialMissing("no credential is named")
    encrypted = None
    if tenant is not None:
        encrypted = credential_secret_read(tenant=tenant, name=name)
    if encrypted is not None:
        try:
            return secret_decrypt(encrypted)
        except InvalidToken:
            # The encryption key changed since it was set; the row is unreadable, and falling
            # back to the environment would quietly use another secret than the admin set.
            raise CredentialMissing(
                f"the credential {name!r} cannot be decrypted (the encryption key changed?); "
                "set it again in admin"
            ) from None
    try:
        # NAME_FILE (a file holding the secret) works as for every other secret setting.
        value = env_secret(name) if environment and name in env_names() else ""
    except ImproperlyConfigured:
        raise CredentialMissing(f"the credential {name!r}: {name}_FILE cannot be read") from None
    if not value:
        raise CredentialMissing(f"the credential {name!r} is not set")
    return value


def env_names() -> frozenset[str]:
    """The credential names that may come from the environment (CREDENTIAL_ENV_NAMES)."""
    return frozenset(getattr(settings, "CREDENTIAL_ENV_NAMES", ()))


def credential_hint(secret: str) -> str:
    """What admin may show of a secret once it is set: its last four characters when it is
    long enough (32 or more) that they give nothing away, else nothing."""
    return f"…{secret[-4:]}" if len(secret) >= 32 else ""


def credential_set(*, tenant, name: str, secret: str | None, by=None) -> tuple[Credential, str]:
    """Create the tenant's credential ``name`` or replace its secret; a blank ``secret`` leaves
    an existing one unchanged. Returns it and 'created', 'replaced' or 'unchanged'."""
    # Not durable: Django admin calls this inside the transaction of its change form.
    with transaction.atomic():
        credential = Credential.objects.select_for_update().filter(tenant=tenant, name=name).first()
        if not secret:
            if credential is None:
                raise ValueError(f"the credential {name!r} needs a secret")
            return credential, "unchanged"
        fields = {
            "secret_encrypted": secret_encrypt(secret),
            "secret_hint": credential_hint(secret),
        }
        if credential is None:
            credential = Credential(tenant=tenant, name=name, created_by=by, **fields)
            credential.full_clean()
            credential.save()
            outcome = "created"
        else:
            for key, value in fields.items():
                setattr(credential, key, value)
            credential.save(update_fields=[*fields, "updated_at"])
            outcome = "replaced"
        audit_record(
            tenant_id=tenant.pk,
            actor=by.subject if by is not None else "system",
            action=f"credential_{outcome}",
            via="admin",
            detail={"credential": name},
        )
        return credential, outcome


def credential_delete(*, credential: Credential, by=None) -> None:
    """Remove a credential; agents that name it fail their turns until it is set again."""
    with transaction.atomic():
        audit_record(
            tenant_id=credential.tenant_id,
            actor=by.subject if by is not None else "system",
            action="credential_deleted",
            via="admin",
            detail={"credential": credential.name},
        )
        credential.delete()
