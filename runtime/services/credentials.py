"""Writing a tenant's credentials (the secrets model providers send), with their audit rows.

The audit rows name the credential, never its value."""

from django.db import transaction

from connections.crypto import secret_encrypt
from runtime.audit import audit_record
from runtime.credentials import credential_hint
from runtime.models import Credential


def credential_set(*, tenant, name: str, secret: str | None, by=None) -> tuple[Credential, str]:
    """Create the tenant's credential ``name`` or replace its secret; a blank ``secret`` leaves
    an existing one unchanged. Returns it and 'created', 'replaced' or 'unchanged'."""
    # Not durable: Django admin calls this inside the transaction of its change form.
    with transaction.atomic():
        credential = Credential.objects.select_for_update().filter(tenant=tenant, name=name).first()
        if credential is not None and not secret:
            return credential, "unchanged"
        if credential is None and not secret:
            raise ValueError(f"the credential {name!r} needs a secret")
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
