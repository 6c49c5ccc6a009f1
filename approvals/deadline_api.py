"""Extend an open item's deadline over REST (``POST /api/v1/interactions/<id>/extend`` with
``{"by": "30m"}``): an operator who may decide it; bounded, audited, the channels and the
caller told (runtime.decisions.deadline_moves)."""

from rest_framework import serializers
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from approvals import api_examples
from approvals.api import answer_endpoint, interaction_or_404
from approvals.api_serializers import InteractionDetailSerializer
from runtime.decisions.deadline_moves import interaction_extend
from runtime.decisions.flow import REST


class ExtendSerializer(serializers.Serializer):
    by = serializers.CharField(
        max_length=16, help_text="How much longer it stays open: a duration such as 30m or 2h."
    )


@answer_endpoint(
    "interactions_extend",
    request=ExtendSerializer,
    body=InteractionDetailSerializer,
    forbidden="A viewer, a partner token, or a member who may not decide this item.",
    conflict="It was decided (or expired) first.",
    examples=api_examples.INTERACTION_EXTEND,
)
def interaction_extend_view(request, public_id: str):
    """Extend an open item's deadline by ``by`` (at most INTERACTION_EXTEND_MAX_SECONDS in
    all over its life); the caller is told of the new deadline."""
    operator = request.operator
    try:
        body = ExtendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
    except APIException:
        interaction_or_404(request, public_id)
        raise
    interaction = interaction_extend(
        tenant=operator.tenant,
        interaction_id=public_id,
        by=body.validated_data["by"],
        decider=operator.decider_for(request),
        channel=REST,
    )
    return Response(InteractionDetailSerializer(interaction).data)
