"""A tenant admin sets a member's out of office over REST (``/api/v1/members/<id>/away``:
GET, PUT, DELETE; ``<id>``: the member's id, as Django admin's Members shows it): for a
member who is away without having said so. The same body and service as ``/api/v1/me/away``
(tenants.services.away_set, away_clear; audited with the admin as the actor). Only a signed-in
admin of the member's tenant: a token (a program, or a partner) and another role are refused
(403); another tenant's member is a missing one (404)."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework.decorators import api_view, parser_classes
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.response import Response

from tenants.away_api import AWAY, AWAY_BODY, REFUSED, AwaySetSerializer, away_schema, away_wire
from tenants.models import Membership
from tenants.services import MemberError, away_clear, away_set

NOT_ADMIN = "Only the tenant's admins set another member's out of office (signed in)."


def _admin(request) -> Membership:
    if getattr(request.user, "identity", None) is not None or not request.user.is_authenticated:
        raise PermissionDenied(NOT_ADMIN)
    membership = getattr(request, "membership", None)
    if membership is None or membership.role != Membership.Role.ADMIN:
        raise PermissionDenied(NOT_ADMIN)
    return membership


def _member_of(admin: Membership, member_id: int) -> Membership:
    """The admin's tenant's member ``member_id``; another tenant's is a missing one (and an
    id beyond a bigint names nothing, rather than failing in PostgreSQL)."""
    if member_id > 2**63 - 1:
        raise NotFound("No such member.")
    member = (
        Membership.objects.select_related("user", "tenant", "delegate__user")
        .filter(tenant_id=admin.tenant_id, pk=member_id)
        .first()
    )
    if member is None:
        raise NotFound("No such member.")
    return member


EXAMPLES = [
    OpenApiExample("Away", AWAY, response_only=True, status_codes=["200"]),
    OpenApiExample("Not an admin", {"detail": NOT_ADMIN}, response_only=True, status_codes=["403"]),
    OpenApiExample(
        "Another tenant's member",
        {"detail": "No such member."},
        response_only=True,
        status_codes=["404"],
    ),
]
READ = {200: AWAY_BODY, 403: OpenApiResponse(REFUSED), 404: OpenApiResponse(REFUSED)}


@away_schema("member", READ, EXAMPLES)
@api_view(["GET", "PUT", "DELETE"])
@parser_classes([JSONParser])
def member_away(request, member_id: int):
    """A member's out of office, as their tenant's admin sets it: read it (GET), set it (PUT:
    until, and since and delegate) or end it (DELETE)."""
    admin = _admin(request)
    member = _member_of(admin, member_id)
    actor = request.user.subject
    if request.method == "PUT":
        body = AwaySetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        delegate = None
        if data.get("delegate"):
            delegate = (
                Membership.objects.select_related("user")
                .filter(tenant_id=member.tenant_id, user__email__iexact=data["delegate"])
                .first()
            )
            if delegate is None:
                raise ValidationError(
                    {"detail": "The delegate must be a member of the same tenant."}
                )
        try:
            away_set(
                membership=member,
                until=data["until"],
                starts=data.get("since"),
                delegate=delegate,
                actor=actor,
            )
        except MemberError as exc:
            raise ValidationError({"detail": str(exc)}) from None
    elif request.method == "DELETE":
        away_clear(membership=member, actor=actor)
    return Response(away_wire(member))
