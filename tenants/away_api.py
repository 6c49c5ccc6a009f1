"""Out of office over REST (``/api/v1/me/away``): a signed-in member reads, sets and clears
their own "away from ... until ..." and delegate (tenants.services.away_set). A program (an
operator token) is no member: refused."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, parser_classes
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.response import Response

from tenants.models import Membership
from tenants.services import MemberError, away_clear, away_set


class AwaySetSerializer(serializers.Serializer):
    since = serializers.DateTimeField(
        required=False, help_text="From when (ISO 8601); now when not given."
    )
    until = serializers.DateTimeField(help_text="Until when (ISO 8601).")
    delegate = serializers.EmailField(
        required=False,
        allow_null=True,
        help_text="The e-mail of a member of the same tenant who may decide: what would reach "
        "you reaches them meanwhile.",
    )


AWAY_BODY = inline_serializer(
    "Away",
    {
        "away": serializers.BooleanField(),
        "since": serializers.DateTimeField(allow_null=True),
        "until": serializers.DateTimeField(allow_null=True),
        "delegate": serializers.EmailField(allow_null=True),
    },
)
AWAY = {
    "away": True,
    "since": "2026-10-06T09:00:00Z",
    "until": "2026-10-13T09:00:00Z",
    "delegate": "admin@demo.test",
}
REFUSED = inline_serializer("AwayRefusal", {"detail": serializers.CharField()})


def away_wire(membership: Membership) -> dict:
    def iso(at):
        return at.isoformat().replace("+00:00", "Z") if at else None

    delegate = membership.delegate
    return {
        "away": membership.away_at(),
        "since": iso(membership.away_from),
        "until": iso(membership.away_until),
        "delegate": delegate.user.email if delegate else None,
    }


def _member(request) -> Membership:
    if getattr(request.user, "identity", None) is not None or not request.user.is_authenticated:
        raise PermissionDenied("Out of office is a member's: sign in (a token is no member).")
    membership = getattr(request, "membership", None)
    if membership is None:
        raise PermissionDenied("You are not a member of any tenant.")
    return membership


AWAY_EXAMPLES = [
    OpenApiExample("Away", AWAY, response_only=True, status_codes=["200"]),
    OpenApiExample(
        "Back",
        {"away": False, "since": None, "until": None, "delegate": None},
        response_only=True,
        status_codes=["200"],
    ),
    OpenApiExample(
        "A token",
        {"detail": "Out of office is a member's: sign in (a token is no member)."},
        response_only=True,
        status_codes=["403"],
    ),
]
READ = {200: AWAY_BODY, 403: OpenApiResponse(REFUSED)}


def away_schema(prefix: str, read: dict, examples: list):
    """The OpenAPI of an out of office's GET, PUT and DELETE (``<prefix>_away_read``,
    ``_set``, ``_clear``): ``/api/v1/me/away`` and ``/api/v1/members/<id>/away`` take the same
    body and answer the same shape; ``read`` and ``examples`` say what each refuses."""

    def decorate(view):
        for schema in (
            extend_schema(
                methods=["DELETE"],
                operation_id=f"{prefix}_away_clear",
                request=None,
                responses=read,
                examples=examples,
            ),
            extend_schema(
                methods=["PUT"],
                operation_id=f"{prefix}_away_set",
                request=AwaySetSerializer,
                responses={**read, 400: REFUSED},
                examples=[
                    OpenApiExample(
                        "Away for a week",
                        {"until": "2026-10-13T09:00:00Z", "delegate": "admin@demo.test"},
                        request_only=True,
                    ),
                    *examples,
                    OpenApiExample(
                        "Not a member",
                        {"detail": "The delegate must be a member of the same tenant."},
                        response_only=True,
                        status_codes=["400"],
                    ),
                ],
            ),
            extend_schema(
                methods=["GET"],
                operation_id=f"{prefix}_away_read",
                responses=read,
                examples=examples,
            ),
        ):
            view = schema(view)
        return view

    return decorate


@away_schema("me", READ, AWAY_EXAMPLES)
@api_view(["GET", "PUT", "DELETE"])
@parser_classes([JSONParser])
def me_away(request):
    """Your out of office: read it (GET), set it (PUT: until, and since and delegate), or
    come back (DELETE). Meanwhile you are told of nothing; your delegate is told instead."""
    membership = _member(request)
    actor = request.user.subject
    if request.method == "PUT":
        body = AwaySetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        delegate = None
        if data.get("delegate"):
            delegate = (
                Membership.objects.select_related("user")
                .filter(tenant_id=membership.tenant_id, user__email__iexact=data["delegate"])
                .first()
            )
            if delegate is None:
                raise ValidationError(
                    {"detail": "The delegate must be a member of the same tenant."}
                )
        try:
            away_set(
                membership=membership,
                until=data["until"],
                starts=data.get("since"),
                delegate=delegate,
                actor=actor,
            )
        except MemberError as exc:
            raise ValidationError({"detail": str(exc)}) from None
    elif request.method == "DELETE":
        away_clear(membership=membership, actor=actor)
    return Response(away_wire(membership))
