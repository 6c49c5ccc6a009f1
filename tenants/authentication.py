"""DRF authentication with Countersign API tokens (the same function as the A2A endpoint)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from tenants.tokens import TokenError, authenticate_bearer_cached


class TokenUser:
    """The request.user of a program authenticated by token: a subject in one tenant."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False

    def __init__(self, identity):
        self.identity = identity
        self.tenant = identity.tenant
        self.subject = identity.subject

    def __str__(self) -> str:
        return self.subject


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if header is None:
            return None  # let session authentication have its turn
        try:
            identity = authenticate_bearer_cached(header)
        except TokenError as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        return TokenUser(identity), identity

    def authenticate_header(self, request) -> str:
        return self.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A Countersign API token (cs_…).",
        }
