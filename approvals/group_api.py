"""The REST channel for approval groups (runtime.decisions.approval_groups): the held calls of
one model reply, read together and decided at once (/api/v1/groups/<id>). Each call is also an
interaction of its own (/api/v1/interactions/<id>, its ``groupId`` set), answered call by call
as any approval. Authentication, the decider and the errors are the interactions' (approvals
/api.py, approvals/api_errors.py).
"""

from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import APIException, NotFound
from rest_framework.response import Response

from approvals import api_examples
from approvals.api import IsOperator, answer_endpoint
from approvals.api_serializers import (
    ErrorSerializer,
    InteractionFactsSerializer,
    JSONBooleanField,
)
from approvals.forms import REASON_MAX
from runtime.decisions.call_summaries import call_summaries_for
from runtime.decisions.flow import REST, Decision
from runtime.decisions.group_flow import GroupFacts, group_decision_take, group_facts

MAX_CALLS = 100


class GroupDecisionSerializer(serializers.Serializer):
    """What the credentials asking may do with the whole group at once."""

    mayDecide = serializers.BooleanField(help_text="You may decide every open call at once.")
    refusal = serializers.CharField(allow_null=True, help_text="Why not (the first call's).")
    mayApprove = serializers.BooleanField()
    approveRefusal = serializers.CharField(allow_null=True)
    stepUpRequired = serializers.BooleanField(
        help_text="Approving needs a step-up you have not made (a call is risk: high)."
    )


class GroupSerializer(serializers.Serializer):
    id = serializers.CharField()
    state = serializers.ChoiceField(
        choices=[("open", "open"), ("decided", "decided")],
        help_text="open while any call of it waits for a decision.",
    )
    taskId = serializers.CharField()  # noqa: N815 - the wire's spelling
    agent = serializers.CharField()
    interactions = InteractionFactsSerializer(
        many=True, help_text="Each call, in the reply's order, as /api/v1/interactions/<id>."
    )
    decision = GroupDecisionSerializer()


class GroupAnswerSerializer(serializers.Serializer):
    approved = JSONBooleanField(help_text="true approves every open call; false denies them.")
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="Why: the agent's model sees it with each call.",
    )
    argumentsHashes = serializers.DictField(  # noqa: N815 - the wire's spelling
        child=serializers.RegexField(r"^[0-9a-f]{64}$"),
        required=False,
        allow_empty=False,
        help_text="{interaction id: heldCall.argumentsHash} of every call you were shown: the "
        "decision binds exactly those (a call decided since is 409, an open one left out is "
        "400, a call whose arguments changed is 400).",
    )

    def validate(self, attrs: dict) -> dict:
        # A key a group's answer does not take is refused, never dropped: an edit, a rule or
        # a binding left out silently would approve what the client did not mean.
        for key in self.initial_data:
            if key not in self.fields:
                raise serializers.ValidationError({str(key)[:64]: _not_for_a_group(str(key))})
        return attrs

    def validate_argumentsHashes(self, value: dict) -> dict:  # noqa: N802 - DRF's naming
        if len(value) > MAX_CALLS:
            raise serializers.ValidationError(f"At most {MAX_CALLS} calls.")
        for key in value:
            # Ids are ASCII: a NUL or a lone surrogate is no id (and no text PostgreSQL takes).
            if not key or len(key) > 64 or not key.isascii() or "\x00" in key:
                raise serializers.ValidationError(f"{key[:64]!r} is not an interaction id.")
        return value


# What an answer to one call takes and a group's does not, and where it goes instead.
_ONE_CALL_ONLY = {
    "value": "a group of approvals takes approved (and a reason), not value",
    "arguments": "a group is decided as its calls stand: edit a call's arguments with its own "
    "answer (/api/v1/interactions/<id>/answer)",
    "allowSimilar": "a standing rule is made from one call's approval "
    "(/api/v1/interactions/<id>/answer)",
    "argumentsHash": "a group binds each of its calls: argumentsHashes, {interaction id: "
    "heldCall.argumentsHash} of every call shown",
}


def _not_for_a_group(key: str) -> str:
    return _ONE_CALL_ONLY.get(
        key, "is not a field of a group's answer (approved, reason, argumentsHashes)"
    )


def group_wire(facts: GroupFacts, *, tenant) -> dict:
    calls = facts.calls
    task = calls[0].interaction.task
    summaries = call_summaries_for(tenant=tenant, interaction_ids=[f.interaction.pk for f in calls])
    return {
        "id": facts.group_id,
        "state": "open" if facts.waiting else "decided",
        "taskId": task.public_id,
        "agent": task.agent.slug,
        "interactions": [
            InteractionFactsSerializer(
                f.interaction, context={"facts": f, "summaries": summaries}
            ).data
            for f in calls
        ],
        "decision": {
            "mayDecide": facts.may_decide,
            "refusal": facts.refusal,
            "mayApprove": facts.may_approve,
            "approveRefusal": facts.approve_refusal,
            "stepUpRequired": facts.step_up_needed,
        },
    }


def _group_or_404(request, group_id: str) -> GroupFacts:
    found = group_facts(
        tenant=request.operator.tenant,
        group_id=group_id,
        decider=request.operator.decider_for(request),
    )
    if found is None:
        # The same answer for another tenant's group as for a missing one.
        raise NotFound("No such group.")
    return found


@extend_schema(
    operation_id="groups_retrieve",
    responses={200: GroupSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    examples=api_examples.GROUP_DETAIL,
)
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def group_detail(request, public_id: str):
    """The calls of one model reply held together, each with what you may decide of it."""
    return Response(group_wire(_group_or_404(request, public_id), tenant=request.operator.tenant))


@answer_endpoint(
    "groups_answer",
    request=GroupAnswerSerializer,
    body=GroupSerializer,
    forbidden="A call of the group may not be decided by you (reason DECIDER_NOT_ALLOWED or "
    "STEP_UP_REQUIRED): nothing was decided.",
    conflict="A call was decided by someone else.",
    examples=api_examples.GROUP_ANSWER,
)
def group_answer_view(request, public_id: str):
    """Decide every open call of the group at once: all of them, or none (each call through
    the one decision flow: its checks, its audit row, its receipt)."""
    operator = request.operator
    try:
        body = GroupAnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
    except APIException:
        _group_or_404(request, public_id)  # a missing group is 404 whatever the body
        raise
    data = body.validated_data
    shown = data.get("argumentsHashes")
    decider = operator.decider_for(request)
    group_decision_take(
        tenant=operator.tenant,
        group_id=public_id,
        decider=decider,
        decision=Decision(approved=data["approved"], reason=data.get("reason", "")),
        channel=REST,
        shown=dict(shown) if shown is not None else None,
    )
    return Response(group_wire(_group_or_404(request, public_id), tenant=request.operator.tenant))
