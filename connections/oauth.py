"""The OAuth2 authorization-code flow (with PKCE) for connection apps.

Our own small flow rather than allauth's "connect" process: allauth connects a provider
account to the *person* logged in and then fetches their profile, while a connection belongs
to the *tenant* and only needs the tokens.

Whose client credentials a flow uses (``oauth_client_for``): the tenant's own OAuth app
(TenantApp, set by the tenant's admin, its secret encrypted), else the platform's default
(the App's allauth SocialApp, set by platform staff, whose settings name the endpoints).
"""

import base64
import hashlib
import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx

from connections.crypto import InvalidToken, secret_decrypt
from connections.models import App, Connection, TenantApp
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


@dataclass(frozen=True)
class OAuthClient:
    """The client a flow uses for one tenant and app: its credentials, scopes and the
    settings that name the provider's endpoints (as a SocialApp's settings spell them:
    authorize_url, access_token_url, server_url, token_auth_method, auth_params)."""

    name: str
    client_id: str
    secret: str = field(repr=False)
    scopes: str
    config: dict
    # allauth's provider id, whose adapter may know the endpoints ("" for none).
    provider: str = ""
    # The tenant's own app (TenantApp), not the platform's default.
    tenant_own: bool = False


def _platform_config(app: App) -> dict:
    social_app = app.social_app if app.social_app_id else None
    config = social_app.settings if social_app is not None else {}
    return dict(config) if isinstance(config, dict) else {}


def tenant_app_client(tenant_app: TenantApp) -> OAuthClient:
    """A tenant's own app as a client: its endpoints where it gives them, else the platform
    app's; InvalidToken when its secret cannot be decrypted."""
    app = tenant_app.app
    config = _platform_config(app)
    own = {
        "server_url": tenant_app.server_url,
        "authorize_url": tenant_app.authorize_url,
        "access_token_url": tenant_app.token_url,
    }
    if tenant_app.server_url or (tenant_app.authorize_url and tenant_app.token_url):
        # Its own provider: none of the platform's endpoints mix in.
        config = {k: v for k, v in config.items() if k not in own}
        config |= {k: v for k, v in own.items() if v}
    config["token_auth_method"] = tenant_app.token_auth_method
    social_app = app.social_app if app.social_app_id else None
    return OAuthClient(
        name=app.name,
        client_id=tenant_app.client_id,
        secret=secret_decrypt(tenant_app.client_secret_encrypted),
        scopes=tenant_app.scopes or app.scopes,
        config=config,
        provider=social_app.provider if social_app is not None and not own["server_url"] else "",
        tenant_own=True,
    )


def oauth_client_for(*, tenant, app: App) -> OAuthClient | None:
    """The client the tenant connects ``app`` with: its own app when its admin set one (it
    wins), else the platform's default; None when neither is set up."""
    own = TenantApp.objects.filter(tenant=tenant, app=app).select_related("app__social_app").first()
    if own is not None and own.client_id and own.client_secret_encrypted:
        try:
            return tenant_app_client(own)
        except InvalidToken:
            logger.error(
                "the OAuth app %s of %s cannot be decrypted (was CONNECTIONS_ENCRYPTION_KEY "
                "changed?)",
                app.slug,
                tenant.slug,
            )
            return None
    social_app = app.social_app if app.oauth2_ready else None
    if social_app is None:
        return None
    return OAuthClient(
        name=social_app.name or app.name,
        client_id=social_app.client_id,
        secret=social_app.secret,
        scopes=app.scopes,
        config=_platform_config(app),
        provider=social_app.provider,
    )


def oauth_endpoints(*, client: OAuthClient) -> OAuthEndpoints:
    """The provider's endpoints, from the client's settings, discovery, or allauth's class."""
    # settings is admin-edited JSON: anything but an object is treated as empty.
    config = client.config
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
            with _client() as http:
                response = http.get(server_url)
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
        raise OAuthError(
            "The provider's discovery document names no authorization and token endpoints."
        )
    # A provider allauth knows (github, google, ...) when its app is installed: its adapter
    # class carries the endpoints as plain attributes.
    from allauth.socialaccount.providers import registry

    provider_class = registry.get_class(client.provider) if client.provider else None
    adapter_class = getattr(provider_class, "oauth2_adapter_class", None)
    authorize = _http_url(getattr(adapter_class, "authorize_url", None))
    token = _http_url(getattr(adapter_class, "access_token_url", None))
    if authorize and token:
        return OAuthEndpoints(authorize_url=authorize, token_url=token, basic_auth=basic)
    raise OAuthError(
        f"{client.name} names no endpoints: give the provider's issuer (server_url, for "
        "discovery), or its authorize and token URLs (authorize_url, access_token_url)."
    )


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge), RFC 7636."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def oauth_authorize_url(
    *,
    client: OAuthClient,
    endpoints: OAuthEndpoints,
    redirect_uri: str,
    state: str,
    code_challenge: str,
) -> str:
    extra = client.config.get("auth_params")
    params = {
        **{str(k): str(v) for k, v in (extra if isinstance(extra, dict) else {}).items()},
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
    }
    if client.scopes.strip():
        params["scope"] = " ".join(client.scopes.split())
    separator = "&" if urlsplit(endpoints.authorize_url).query else "?"
    return f"{endpoints.authorize_url}{separator}{urlencode(params)}"


@dataclass(frozen=True)
class OAuthTokens:
    access_token: str
    refresh_token: str
    expires_in: int | None
    scope: str


def oauth_token_exchange(
    *,
    client: OAuthClient,
    endpoints: OAuthEndpoints,
    code: str,
    redirect_uri: str,
    code_verifier: str,
) -> OAuthTokens:
    """Trade the authorization code for tokens at the provider's token endpoint."""
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": code_verifier,
    }
    return _token_request(
        client=client, endpoints=endpoints, data=data, what="the authorization code"
    )


def oauth_token_refresh(
    *, client: OAuthClient, endpoints: OAuthEndpoints, refresh_token: str
) -> OAuthTokens:
    """The refresh_token grant (RFC 6749 section 6): new tokens for an expired access token."""
    # No scope: the grant then keeps the scopes first granted (RFC 6749 section 6).
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    return _token_request(client=client, endpoints=endpoints, data=data, what="the refresh token")


def _token_post(*, client: OAuthClient, endpoints: OAuthEndpoints, data: dict) -> httpx.Response:
    """POST ``data`` to the token endpoint, authenticated as ``client`` (RFC 6749 section
    2.3.1); httpx.HTTPError or OutboundRefused when it cannot be reached."""
    auth: dict[str, Any] = {}  # the client's own (none) unless the provider wants Basic
    if endpoints.basic_auth:
        auth["auth"] = (client.client_id, client.secret)
    else:
        data = {**data, "client_id": client.client_id, "client_secret": client.secret}
    # Accept JSON: GitHub, for one, answers form-encoded unless asked.
    with _client() as http:
        return http.post(
            endpoints.token_url, data=data, headers={"Accept": "application/json"}, **auth
        )


def _token_request(
    *, client: OAuthClient, endpoints: OAuthEndpoints, data: dict, what: str
) -> OAuthTokens:
    try:
        response = _token_post(client=client, endpoints=endpoints, data=data)
    except (httpx.HTTPError, OutboundRefused) as exc:
        raise OAuthError(f"{client.name} could not be reached: {exc}") from exc
    body = _token_body(response)
    if response.status_code != 200 or "error" in body:
        reason = body.get("error_description") or body.get("error") or response.status_code
        raise OAuthError(f"{client.name} refused {what} ({reason}).")
    access_token = body.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise OAuthError(f"{client.name} answered without an access token.")
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


# What a token endpoint's refusal of the client-credentials grant says of the client:
# these errors come after the client authenticated (RFC 6749 section 5.2), so its id and
# secret were good even though the grant is not allowed; any other error says nothing.
_GRANT_REFUSED = ("unauthorized_client", "unsupported_grant_type", "invalid_scope")


@dataclass(frozen=True)
class ClientCheck:
    """What a check of an OAuth client found: ``ok`` and what to tell the admin."""

    ok: bool
    said: str


def oauth_client_check(client: OAuthClient) -> ClientCheck:
    """Check an OAuth client against its provider: its endpoints found (discovery when it
    names an issuer), then its id and secret sent to the token endpoint with the
    client-credentials grant (RFC 6749 section 4.4). Never raises: every failure is said in
    words."""
    try:
        endpoints = oauth_endpoints(client=client)
    except OAuthError as exc:
        return ClientCheck(False, str(exc))
    data: dict[str, str] = {"grant_type": "client_credentials"}
    try:
        response = _token_post(client=client, endpoints=endpoints, data=data)
    except (httpx.HTTPError, OutboundRefused) as exc:
        return ClientCheck(
            False, f"The token endpoint {endpoints.token_url} could not be reached: {exc}"
        )
    body = _token_body(response)
    error = str(body.get("error") or "")
    reason = str(body.get("error_description") or error or f"HTTP {response.status_code}")
    if response.status_code == 200 and body.get("access_token"):
        return ClientCheck(True, "The provider accepted the client id and secret.")
    if error in _GRANT_REFUSED:
        return ClientCheck(
            True,
            "The provider knows the client: it answered that this client may not use the "
            f"client-credentials grant ({reason}), which connecting does not need.",
        )
    if error == "invalid_client" or response.status_code == 401:
        return ClientCheck(False, f"The provider refused the client id or secret ({reason}).")
    return ClientCheck(False, f"The token endpoint answered with an error ({reason}).")


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
    client = oauth_client_for(tenant=tenant, app=connection.app)
    if client is None:
        raise OAuthError(f"The {app.name} token has expired and {app.name} is not set up.")
    endpoints = oauth_endpoints(client=client)
    try:
        tokens = oauth_token_refresh(
            client=client, endpoints=endpoints, refresh_token=refresh_token
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
