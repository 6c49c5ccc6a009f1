from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import SetPasswordForm
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from tenants.middleware import SESSION_KEY
from tenants.models import ApiToken
from tenants.selectors import memberships_for_user
from tenants.services import invitation_accept as invitation_accept_service
from tenants.services import invitation_days, invitation_for_key
from tenants.tokens import TokenError, token_kind_check


@require_GET
def home(request):
    if not request.user.is_authenticated:
        return redirect("account_login")
    return redirect("approvals:inbox")


@require_GET
def favicon(request):
    """Browsers ask for /favicon.ico whatever the page links (Django admin links none)."""
    return HttpResponseRedirect(static("favicon.ico"))


@login_required
@require_POST
def tenant_switch(request):
    slug = request.POST.get("tenant", "")
    membership = next(
        (m for m in memberships_for_user(user=request.user) if m.tenant.slug == slug), None
    )
    if membership is None:
        # Same answer for a tenant that does not exist and one the person is not in.
        raise Http404("No such tenant.")
    request.session[SESSION_KEY] = membership.tenant.slug
    messages.success(request, f"Now working in {membership.tenant.name}.")
    target = request.POST.get("next") or request.META.get("HTTP_REFERER") or "/"
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    # Never shortcuts.redirect: it would read a next without a slash as a view name to reverse
    # (and a NUL in it would be a 500); a bad next is only a bad relative URL.
    return HttpResponseRedirect(target)


@sensitive_post_parameters("new_password1", "new_password2")
@never_cache
@require_http_methods(["GET", "POST"])
def invitation_accept(request, key: str):
    """The invitation's link: the invited person chooses a password and is logged in."""
    membership, problem = invitation_for_key(key)
    if membership is None:
        return render(
            request,
            "tenants/invitation_invalid.html",
            {"problem": problem, "days": invitation_days()},
            status=404,
        )
    form = SetPasswordForm(membership.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = invitation_accept_service(
            membership=membership, password=form.cleaned_data["new_password1"]
        )
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        request.session[SESSION_KEY] = membership.tenant.slug
        messages.success(request, f"Welcome to {membership.tenant.name}.")
        return redirect("home")
    response = render(
        request, "tenants/invitation_accept.html", {"form": form, "membership": membership}
    )
    # The link is a secret until it is used: no other site may read it from a Referer. Not
    # "no-referrer": under it the browser sends the form's POST with "Origin: null", which
    # Django's CSRF check refuses (the invitation could never be accepted in a browser).
    response["Referrer-Policy"] = "same-origin"
    return response


@extend_schema(
    operation_id="whoami",
    responses={
        200: inline_serializer(
            "WhoAmI",
            {
                "tenant": serializers.CharField(allow_null=True),
                "subject": serializers.CharField(),
                "role": serializers.CharField(required=False, allow_null=True),
                "kind": serializers.ChoiceField(choices=["token", "session"]),
            },
        ),
        403: OpenApiResponse(
            inline_serializer("Refusal", {"detail": serializers.CharField()}),
            description="A partner token (the REST API takes operator tokens).",
        ),
    },
    examples=[
        OpenApiExample(
            "An operator token",
            value={"tenant": "demo", "subject": "program:demo-operator", "kind": "token"},
            response_only=True,
            status_codes=["200"],
        ),
        OpenApiExample(
            "A member's session",
            value={
                "tenant": "demo",
                "subject": "user:operator@demo.test",
                "role": "operator",
                "kind": "session",
            },
            response_only=True,
            status_codes=["200"],
        ),
        OpenApiExample(
            "A partner token",
            value={
                "detail": "This is a partner token: it calls agents over A2A; the REST API "
                "takes operator tokens."
            },
            response_only=True,
            status_codes=["403"],
        ),
    ],
)
@api_view(["GET"])
def whoami(request):
    """Who the presented credentials act for: the tenant and subject."""
    user = request.user
    identity = getattr(user, "identity", None)
    if identity is not None:
        # The operator REST channel's rule (approvals.api.operator_for): a partner token calls
        # agents over A2A and is refused here too, 403 with the reason (valid, wrong kind).
        try:
            token_kind_check(identity, kind=ApiToken.Kind.OPERATOR)
        except TokenError as exc:
            raise PermissionDenied(str(exc)) from None
        return Response({"tenant": user.tenant.slug, "subject": user.subject, "kind": "token"})
    membership = request.membership
    return Response(
        {
            "tenant": membership.tenant.slug if membership else None,
            "subject": user.subject,
            "role": membership.role if membership else None,
            "kind": "session",
        }
    )
