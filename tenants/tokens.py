"""API tokens: minting, revoking, and turning an ``Authorization`` header into an identity.

One function, ``authenticate_bearer``, serves the A2A endpoint and the REST API alike; each
says which kind of token it takes (``token_kind_check``), so a partner token never decides
over REST and an operator program's token never calls an agent as a partner.
"""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from tenants.lookup_cache import MISSING, LookupCache
from tenants.models import ApiToken, Tenant

TOKEN_RE = re.compile(r"^cs_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})$")
# last_used_at is a hint for admins, not an audit trail: write it at most once a minute so
# that the hot path of a busy caller does not write a row on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenError(Exception):
    """Why a request's credentials were refused; ``reason`` is one of REASONS."""

    REASONS = {
        "missing": "No Authorization header; send 'Authorization: Bearer <token>'.",
        "malformed": "The Authorization header is not 'Bearer <token>' with a Countersign token.",
        "unknown": "The token is not known.",
        "revoked": "The token has been revoked.",
        "expired": "The token has expired.",
        "inactive": "The token's tenant is not active.",
        # Refused for its kind: the reason names the kind the caller presented.
        "operator_token": "This is an operator token: it decides over the REST API "
        "(/api/v1/) and cannot call agents; partner agents call with a partner token.",
        "partner_token": "This is a partner token: it calls agents over A2A; "
        "the REST API takes operator tokens.",
    }

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(self.REASONS[reason])


@dataclass(frozen=True)
class BearerIdentity:
    tenant: Tenant
    subject: str
    token: ApiToken


def _hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def _new_plaintext() -> tuple[str, str]:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    prefix = "".join(secrets.choice(alphabet) for _ in range(12))
    return prefix, f"cs_{prefix}_{secrets.token_urlsafe(32)}"


def api_token_create(
    *,
    tenant: Tenant,
    subject: str,
    name: str,
    kind: str = ApiToken.Kind.PARTNER,
    all_agents: bool = True,
    agent_slugs: list[str] | None = None,
    expires_at: datetime | None = None,
    created_by=None,
    may_step_up: bool = False,
) -> tuple[ApiToken, str]:
    """Mint a token; return the row and the plaintext, which is never stored or shown again.

    ``may_step_up``: an operator token that may approve ``risk: high`` tools."""
    if may_step_up and kind != ApiToken.Kind.OPERATOR:
        raise ValidationError({"may_step_up": "Only operator tokens decide, so only they step up."})
    token = ApiToken(
        tenant=tenant,
        subject=subject,
        name=name,
        kind=kind,
        all_agents=all_agents,
        agent_slugs=list(agent_slugs or []),
        expires_at=expires_at,
        created_by=created_by,
        may_step_up=may_step_up,
    )
    plaintext = token_issue(token)
    token.full_clean()
    token.save()
    return token, plaintext


def token_issue(token: ApiToken) -> str:
    """Give an unsaved token its prefix and hash; return the plaintext (shown once)."""
    prefix, plaintext = _new_plaintext()
    token.prefix = prefix
    token.token_hash = _hash(plaintext)
    return plaintext


def api_token_revoke(*, token: ApiToken, by: str = "") -> bool:
    """Revoke a token; return False when it was already revoked (idempotent). ``by``: who
    revoked it (user:<email>, shell:<login>), which ``tokens list --all`` shows."""
    with transaction.atomic():
        updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=by[:200]
        )
    token.refresh_from_db(fields=["revoked_at", "revoked_by"])
    # An update() sends no post_save: forget the cached row here (other processes within
    # LOOKUP_CACHE_SECONDS).
    token_cache.invalidate()
    return updated == 1


def parse_bearer(header: str | None) -> tuple[str, str]:
    """Split a header into (prefix, plaintext) or raise TokenError('missing'|'malformed')."""
    if header is None or header.strip() == "":
        raise TokenError("missing")
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise TokenError("malformed")
    plaintext = credentials.strip()
    match = TOKEN_RE.match(plaintext)
    if not match:
        raise TokenError("malformed")
    return match.group(1), plaintext


def check_token(token: ApiToken | None, plaintext: str, now: datetime) -> BearerIdentity:
    # compare_digest on the hash even when the prefix matched, so that timing does not tell
    # a caller how much of a guessed token was right.
    if token is None or not hmac.compare_digest(token.token_hash, _hash(plaintext)):
        raise TokenError("unknown")
    if token.revoked_at is not None:
        raise TokenError("revoked")
    if token.is_expired(now):
        raise TokenError("expired")
    if not token.tenant.active:
        raise TokenError("inactive")
    return BearerIdentity(tenant=token.tenant, subject=token.subject, token=token)


def token_kind_check(identity: BearerIdentity, *, kind: str | None) -> BearerIdentity:
    """Refuse a valid token of another kind than ``kind`` (None takes every kind)."""
    if kind is not None and identity.token.kind != kind:
        raise TokenError(f"{identity.token.kind}_token")
    return identity


def _touch(token: ApiToken, now: datetime) -> None:
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


def authenticate_bearer(header: str | None, *, kind: str | None = None) -> BearerIdentity:
    """Turn ``Authorization: Bearer ...`` into (tenant, subject, token), or raise TokenError;
    with ``kind``, a valid token of another kind is refused too."""
    prefix, plaintext = parse_bearer(header)
    token = ApiToken.objects.select_related("tenant").filter(prefix=prefix).first()
    now = timezone.now()
    identity = token_kind_check(check_token(token, plaintext, now), kind=kind)
    _touch(identity.token, now)
    return identity


# The A2A endpoint's token rows (with their tenant), by prefix: see tenants.lookup_cache.
# Cleared by ApiToken and Tenant saves and deletes (tenants.apps) and by api_token_revoke.
token_cache = LookupCache()


def token_load(prefix: str) -> ApiToken | None:
    """Read the token row of ``prefix`` into the cache (a query: run it off the event loop)."""

    def query():
        return ApiToken.objects.select_related("tenant").filter(prefix=prefix).first()

    # Unknown prefixes are not kept: a token minted a moment later works at once.
    return token_cache.load(prefix, query, keep_none=False)


def bearer_check(plaintext: str, token: ApiToken | None, *, kind: str | None) -> BearerIdentity:
    """authenticate_bearer's checks on a token row already read (token_cache, token_load)."""
    return token_kind_check(check_token(token, plaintext, timezone.now()), kind=kind)


def authenticate_bearer_cached(header: str | None, *, kind: str | None = None) -> BearerIdentity:
    """authenticate_bearer on the token row cached per process (token_cache), as the A2A
    endpoint reads it: the REST API's calls (an operator program's decisions) no longer read
    the row on each request. The same bound holds: a revoked or expired token, or a
    deactivated tenant, is refused within LOOKUP_CACHE_SECONDS in every process, at once in
    the one that changed it; a refusal is checked against the database (the row may have
    been made or changed a moment ago)."""
    prefix, plaintext = parse_bearer(header)
    token = token_cache.get(prefix)
    if token is MISSING:
        identity = bearer_check(plaintext, token_load(prefix), kind=kind)
    else:
        try:
            identity = bearer_check(plaintext, token, kind=kind)
        except TokenError:
            identity = bearer_check(plaintext, token_load(prefix), kind=kind)
    if token_touch_due(identity.token):
        token_touch(identity.token)
    return identity


def token_touch_due(token: ApiToken) -> bool:
    """Whether last_used_at is due a write (at most once a minute, LAST_USED_RESOLUTION)."""
    return token.last_used_at is None or timezone.now() - token.last_used_at >= LAST_USED_RESOLUTION


def token_touch(token: ApiToken) -> None:
    """Write last_used_at (a query), also on the cached row so that it is written once."""
    now = timezone.now()
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
