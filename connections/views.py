import secrets
import time

from django.conf import settings
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from connections.forms import TokenForm
from connections.models import App
from connections.oauth import (
    OAuthEndpoints,
    OAuthError,
    oauth_authorize_url,
    oauth_client_for,
    oauth_endpoints,
    oauth_token_exchange,
    pkce_pair,
)
from connections.selectors import app_for_member, catalog_for_tenant, connection_events_for_tenant
from connections.services import (
    ConnectError,
    connection_connect_oauth,
    connection_connect_token,
    connection_disconnect,
)
from tenants.access import member_required, require_decider
from tenants.models import Membership

# Pending OAuth2 flows in the session, by state. The state is the callback's CSRF defence
# (RFC 6749 section 10.12): only this browser's session knows it, and it is used once.
OAUTH_PENDING_KEY = "connections_oauth_pending"
OAUTH_PENDING_MAX = 5


def _app_or_404(slug: str, method: str) -> App:
    app = app_for_member(slug=slug)
    if app is None or app.method != method:
        raise Http404("No such app.")
    return app


def _render_index(request, *, forms: dict | None = None, status: int = 200):
    tenant = request.membership.tenant
    forms = forms or {}
    entries = [
        {
            "entry": entry,
            "form": forms.get(entry.app.pk) or TokenForm(prefix=entry.app.slug),
        }
        for entry in catalog_for_tenant(tenant=tenant)
    ]
    context = {
        "nav": "connections",
        "entries": entries,
        "events": connection_events_for_tenant(tenant=tenant),
        "can_decide": request.membership.can_decide,
        # A tenant admin is sent to the tenant's OAuth apps (Django admin) to set one up.
        "is_tenant_admin": request.membership.role == Membership.Role.ADMIN
        and request.user.is_staff,
    }
    return render(request, "connections/index.html", context, status=status)


@require_GET
@member_required
def index(request):
    return _render_index(request)


@require_POST
@member_required
def connect_token(request, slug: str):
    require_decider(request.membership)
    app = _app_or_404(slug, App.Method.TOKEN)
    form = TokenForm(request.POST, prefix=app.slug)
    if form.is_valid():
        try:
            connection_connect_token(
                tenant=request.membership.tenant,
                app=app,
                token=form.cleaned_data["token"],
                by=request.user,
            )
        except ConnectError as exc:
            form.add_error("token", str(exc))
        else:
            messages.success(request, f"Connected {app.name}.")
            return redirect("connections:index")
    return _render_index(request, forms={app.pk: form}, status=400)


@require_POST
@member_required
def disconnect(request, slug: str):
    require_decider(request.membership)
    app = app_for_member(slug=slug)
    if app is None:
        raise Http404("No such app.")
    if connection_disconnect(tenant=request.membership.tenant, app=app, by=request.user):
        messages.success(request, f"Disconnected {app.name}.")
    else:
        messages.info(request, f"{app.name} was not connected.")
    return redirect("connections:index")


def _redirect_uri(request) -> str:
    path = reverse("connections:oauth_callback")
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL + path
    return request.build_absolute_uri(path)


@require_POST
@member_required
def oauth_start(request, slug: str):
    require_decider(request.membership)
    app = _app_or_404(slug, App.Method.OAUTH2)
    client = oauth_client_for(tenant=request.membership.tenant, app=app)
    if client is None:
        messages.error(
            request,
            f"{app.name} is not set up yet: a tenant admin must set its OAuth app "
            "(client id and secret) under the tenant's OAuth apps in Django admin.",
        )
        return redirect("connections:index")
    try:
        endpoints = oauth_endpoints(client=client)
    except OAuthError as exc:
        messages.error(request, f"Cannot connect {app.name}: {exc}")
        return redirect("connections:index")
    state = secrets.token_urlsafe(32)
    verifier, challenge = pkce_pair()
    redirect_uri = _redirect_uri(request)
    pending = dict(request.session.get(OAUTH_PENDING_KEY) or {})
    pending[state] = {
        # The tenant is fixed now: switching tenants in another tab mid-flow must not make
        # the callback connect the app for a different tenant.
        "tenant_id": request.membership.tenant_id,
        "app_id": app.pk,
        "user_id": request.user.pk,
        "verifier": verifier,
        "redirect_uri": redirect_uri,
        "token_url": endpoints.token_url,
        "basic_auth": endpoints.basic_auth,
        # Whose client the code is for: the callback redeems it with the same one.
        "client_id": client.client_id,
        "started": time.time(),
    }
    newest = sorted(pending.items(), key=lambda item: item[1]["started"])[-OAUTH_PENDING_MAX:]
    request.session[OAUTH_PENDING_KEY] = dict(newest)
    return redirect(
        oauth_authorize_url(
            client=client,
            endpoints=endpoints,
            redirect_uri=redirect_uri,
            state=state,
            code_challenge=challenge,
        )
    )


def _oauth_refused(request, reason: str, status: int = 400):
    return render(
        request,
        "connections/oauth_refused.html",
        {"nav": "connections", "reason": reason},
        status=status,
    )


@require_GET
@member_required
def oauth_callback(request):
    state = request.GET.get("state", "")
    pending = dict(request.session.get(OAUTH_PENDING_KEY) or {})
    flow = pending.pop(state, None) if state else None
    # Used once, whatever happens next: a replayed callback finds nothing.
    request.session[OAUTH_PENDING_KEY] = pending
    if (
        not isinstance(flow, dict)
        or flow.get("user_id") != request.user.pk
        or time.time() - flow.get("started", 0) > settings.CONNECTIONS_OAUTH_STATE_TTL
    ):
        return _oauth_refused(
            request, "This connection attempt is unknown or has expired. Start it again."
        )
    membership = (
        Membership.objects.filter(
            user=request.user, tenant_id=flow["tenant_id"], tenant__active=True
        )
        .select_related("tenant")
        .first()
    )
    if membership is None:
        raise Http404("No such tenant.")
    require_decider(membership)
    app = (
        App.objects.filter(pk=flow["app_id"], active=True, method=App.Method.OAUTH2)
        .select_related("social_app")
        .first()
    )
    client = oauth_client_for(tenant=membership.tenant, app=app) if app is not None else None
    if app is None or client is None:
        raise Http404("No such app.")
    if client.client_id != flow.get("client_id"):
        # The tenant's OAuth app changed mid-flow: the code is for the client that was.
        return _oauth_refused(
            request, f"The OAuth app of {app.name} changed while connecting. Start again."
        )
    if request.GET.get("error"):
        # The person declined at the provider, or the provider refused the request.
        messages.error(request, f"{app.name} was not connected ({request.GET['error'][:100]}).")
        return redirect("connections:index")
    code = request.GET.get("code", "")
    if not code:
        return _oauth_refused(request, f"{app.name} sent no authorization code. Start again.")
    endpoints = OAuthEndpoints(
        authorize_url="", token_url=flow["token_url"], basic_auth=flow["basic_auth"]
    )
    try:
        # The provider call happens here, outside any transaction: no row is locked while
        # we wait on the network.
        tokens = oauth_token_exchange(
            client=client,
            endpoints=endpoints,
            code=code,
            redirect_uri=flow["redirect_uri"],
            code_verifier=flow["verifier"],
        )
        connection_connect_oauth(
            tenant=membership.tenant,
            app=app,
            access_token=tokens.access_token,
            refresh_token=tokens.refresh_token,
            expires_in=tokens.expires_in,
            granted_scopes=tokens.scope,
            by=request.user,
        )
    except (OAuthError, ConnectError) as exc:
        return _oauth_refused(request, str(exc), status=502 if isinstance(exc, OAuthError) else 400)
    messages.success(request, f"Connected {app.name} for {membership.tenant.name}.")
    return redirect("connections:index")
