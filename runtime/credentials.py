"""Credentials for model providers and agent URLs, referenced by name from AGENT.md
(``model.credential``). Never logged, never in an error message, never on the wire."""

import os


class CredentialMissing(Exception):
    """The named credential is not set for this tenant (the message names it, not its value)."""


def credential_value(*, tenant, name: str) -> str:
    """The secret a provider sends for ``name``: the tenant's own credential of that name,
    else the environment variable of that name (single-tenant installs)."""
    value = os.environ.get(name, "") if name else ""
    if not value:
        raise CredentialMissing(f"the credential {name!r} is not set")
    return value
