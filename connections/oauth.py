"""The OAuth2 authorization-code flow (with PKCE) for connection apps.

Our own small flow rather than allauth's "connect" process: allauth connects a provider
account to the *person* logged in and then fetches their profile, while a connection belongs
to the *tenant* and only needs the tokens. allauth still keeps the client credentials: each
OAuth2 App links a SocialApp, configured in Django admin, whose settings name the endpoints.
"""

import base64
import hashlib
import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
from allauth.socialaccount.models import SocialApp

from connections.crypto import InvalidToken, secret_decrypt
from connections.models import App, Connection
from connections.outbound import OutboundRefused, guarded_client
from connections.services import MAX_EXPIRES_IN, connection_tokens_refreshed

HTTP_TIMEOUT = httpx.Timeout(10.0)

logger = logging.getLogger(__name__)


class OAuthError(Exception):
    """Why the OAuth2 flow failed; the message is safe to show to the operator."""


@dataclass(frozen=True)
class OAuthEndpoints:
    authorize_url: str
    token_url: str
    # client_secret_basic (HTTP Basic) or client_secret_post (in the form body); RFC 6749
    # section 2.3.1 forbids sending both.
    basic_auth: bool = False


def _client() -> httpx.Client:
    # Through the outbound guard like every request, but with private addresses allowed:
    # these endpoints come from an installer (a SocialApp that staff set in Django admin, or
    # discovery at the server_url they gave), never from a partner or a tenant member, and an
    # identity provider inside the company network (or the tests' provider on 127.0.0.1) is
    # a real setup. PUSH_ALLOW_PRIVATE_HOSTS guards URLs partners choose and stays off in
    # production. The guard still refuses cloud metadata and link-local addresses.
    return guarded_client(timeout=HTTP_TIMEOUT, max_connections=1, allow_private=True)


def _http_url(url: object) -> str | None:
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def oauth_endpoints(*, social_app: SocialApp) -> OAuthEndpoints:
    """The provider's endpoints, from the SocialApp's settings, discovery, or allauth's class."""
    # settings is admin-edited JSON: anything but an object is treated as empty.
    config = social_app.settings if isinstance(social_app.settings, dict) else {}
    basic = config.get("token_auth_method") == "client_secret_basic"
    authorize, token = (
        _http_url(config.get("authorize_url")),
        _http_url(config.get("access_token_url")),
    )
    if authorize and token:
        return OAuthEndpoints(authorize_url=authorize, token_url=token, basic_auth=basic)
    server_url = _http_url(config.get("server_url"))
    if server_url:
        # The same setting allauth's openid_connect provider uses, read the same way.
        if "/.well-known/" not in server_url:
            server_url = server_url.rstrip("/") + "/.well-known/openid-configuration"
        try:
            with _client() as client:
                response = client.get(server_url)
            response.raise_for_status()
            discovered = response.json()
        except (httpx.HTTPError, OutboundRefused, ValueError) as exc:
            raise OAuthError(f"The provider's discovery document could not be read: {exc}") from exc
        if not isinstance(discovered, dict):
            raise OAuthError("The provider's discovery document is not a JSON object.")
        authorize = _http_url(discovered.get("authorization_endpoint"))
        token = _http_url(discovered.get("token_endpoint"))
        if authorize and token:
            if "token_auth_method" not in config:
                methods = discovered.get("token_endpoint_auth_methods_supported") or []
                basic = "client_secret_post" not in methods and "client_secret_basic" in methods
            return OAuthEndpoints(authorize_url=authorize, token_url=token, basic_auth=basic)
    # A provider allauth knows (github, google, ...) when its app is installed: its adapter
    # class carries the endpoints as plain attributes.
    from allauth.socialaccount.providers import registry

    provider_class = registry.get_class(social_app.provider)
    adapter_class = getattr(provider_class, "oauth2_adapter_class", None)
    authorize = _http_url(getattr(adapter_class, "authorize_url", None))
    token = _http_url(getattr(adapter_class, "access_token_url", None))
    if authorize and token:
        return OAuthEndpoints(authorize_url=authorize, token_url=token, basic_auth=basic)
    raise OAuthError(
        "The social application names no endpoints: set authorize_url and access_token_url, "
        "or server_url, in its settings."
    )


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge), RFC 7636."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def oauth_authorize_url(
    *, app: App, endpoints: OAuthEndpoints, redirect_uri: str, state: str, code_challenge: str
) -> str:
    social_app = _social_app(app)
    config = social_app.settings if isinstance(social_app.settings, dict) else {}
    extra = config.get("auth_params")
    params = {
        **{str(k): str(v) for k, v in (extra if isinstance(extra, dict) else {}).items()},
        "response_type": "code",
        "client_id": social_app.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
    }
    if app.scopes.strip():
        params["scope"] = " ".join(app.scopes.split())
    separator = "&" if urlsplit(endpoints.authorize_url).query else "?"
    return f"{endpoints.authorize_url}{separator}{urlencode(params)}"


@dataclass(frozen=True)
class OAuthTokens:
    access_token: str
    refresh_token: str
    expires_in: int | None
    scope: str


def oauth_token_exchange(
    *, app: App, endpoints: OAuthEndpoints, code: str, redirect_uri: str, code_verifier: str
) -> OAuthTokens:
    """Trade the authorization code for tokens at the provider's token endpoint."""
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": code_verifier,
    }
    return _token_request(app=app, endpoints=endpoints, data=data, what="the authorization code")


def oauth_token_refresh(*, app: App, endpoints: OAuthEndpoints, refresh_token: str) -> OAuthTokens:
    """The refresh_token grant (RFC 6749 section 6): new tokens for an expired access token."""
    # No scope: the grant then keeps the scopes first granted (RFC 6749 section 6).
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    return _token_request(app=app, endpoints=endpoints, data=data, what="the refresh token")


def _social_app(app: App) -> SocialApp:
    if app.social_app is None:
        raise OAuthError(f"{app.name} has no OAuth2 social application.")
    return app.social_app


def _token_request(*, app: App, endpoints: OAuthEndpoints, data: dict, what: str) -> OAuthTokens:
    social_app = _social_app(app)
    auth: dict[str, Any] = {}  # the client's own (none) unless the provider wants Basic
    if endpoints.basic_auth:
        auth["auth"] = (social_app.client_id, social_app.secret)
    else:
        data |= {"client_id": social_app.client_id, "client_secret": social_app.secret}
    try:
        # Accept JSON: GitHub, for one, answers form-encoded unless asked.
        with _client() as client:
            response = client.post(
                endpoints.token_url,
                data=data,
                headers={"Accept": "application/json"},
                **auth,
            )
    except (httpx.HTTPError, OutboundRefused) as exc:
        raise OAuthError(f"{app.name} could not be reached: {exc}") from exc
    body = _token_body(response)
    if response.status_code != 200 or "error" in body:
        reason = body.get("error_description") or body.get("error") or response.status_code
        raise OAuthError(f"{app.name} refused {what} ({reason}).")
    access_token = body.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise OAuthError(f"{app.name} answered without an access token.")
    expires_in = body.get("expires_in")
    try:
        expires_in = int(expires_in) if expires_in is not None and expires_in != "" else None
    except (TypeError, ValueError):
        expires_in = None
    refresh_token = body.get("refresh_token")
    scope = body.get("scope")
    return OAuthTokens(
        access_token=access_token,
        refresh_token=refresh_token if isinstance(refresh_token, str) else "",
        # Clamped: a provider's absurd lifetime must not overflow the datetime arithmetic.
        expires_in=min(expires_in, MAX_EXPIRES_IN) if expires_in and expires_in > 0 else None,
        scope=scope if isinstance(scope, str) else "",
    )


def _token_body(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError):
        body = dict(parse_qsl(response.text))
    return body if isinstance(body, dict) else {}


def connection_access_token(*, tenant, app: App) -> str | None:
    """The token a tool server is called with: the tenant's pasted token, or its OAuth2 access
    token, renewed with the refresh token when it has expired. None when the app is not
    connected (or its row cannot be decrypted); OAuthError when an expired token could not be
    renewed. Network I/O happens with no row locked; the new tokens are stored encrypted and
    audited (connection_tokens_refreshed)."""
    connection = (
        Connection.objects.filter(
            tenant=tenant, app=app, app__active=True, status=Connection.Status.CONNECTED
        )
        .select_related("app__social_app")
        .first()
    )
    if connection is None or not connection.access_token_encrypted:
        return None
    try:
        if not connection.is_expired():
            return secret_decrypt(connection.access_token_encrypted)
        if not (connection.app.is_oauth2 and connection.refresh_token_encrypted):
            raise OAuthError(f"The {app.name} token has expired and there is no refresh token.")
        refresh_token = secret_decrypt(connection.refresh_token_encrypted)
    except InvalidToken:
        logger.error(
            "connection %s of %s cannot be decrypted (was CONNECTIONS_ENCRYPTION_KEY changed?)",
            app.slug,
            tenant.slug,
        )
        return None
    endpoints = oauth_endpoints(social_app=connection.app.social_app)
    try:
        tokens = oauth_token_refresh(
            app=connection.app, endpoints=endpoints, refresh_token=refresh_token
        )
    except OAuthError:
        # Another worker may have refreshed first with the same refresh token (providers that
        # rotate refresh tokens refuse the second use): its tokens are as good as ours.
        again = Connection.objects.filter(
            pk=connection.pk, status=Connection.Status.CONNECTED
        ).first()
        if again is not None and again.access_token_encrypted and not again.is_expired():
            return secret_decrypt(again.access_token_encrypted)
        raise
    if not connection_tokens_refreshed(
        connection=connection,
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_in=tokens.expires_in,
    ):
        logger.info("connection %s of %s changed during a token refresh", app.slug, tenant.slug)
    else:
        logger.info("refreshed the %s token of %s", app.slug, tenant.slug)
    return tokens.access_token
