"""The operator REST channel: list, read and answer interactions (/api/v1/interactions).

Programs authenticate with an operator token (ApiToken kind=operator) and act for the
token's subject; people in a browser use their session (CSRF enforced by DRF) and act as
``user:<email>`` in their current tenant. Partner tokens are refused: a partner answers
in-band over A2A, never here. The same services and the same audit as the pages.
"""

import binascii
from base64 import b64decode, b64encode
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qs, urlencode

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import permissions, serializers
from rest_framework.decorators import api_view, parser_classes, permission_classes
from rest_framework.exceptions import NotFound, ParseError, PermissionDenied
from rest_framework.pagination import BasePagination
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from approvals.forms import (
    ANSWER_MAX,
    ARGUMENTS_MAX,
    JSON_MAX_DEPTH,
    JSON_TEXT_PROBLEMS,
    REASON_MAX,
    json_text_problem,
)
from approvals.stepup import stepped_up
from runtime.decisions.approvers import Decider, effective_approvers
from runtime.decisions.decision_models import Interaction, StandingRule
from runtime.decisions.decision_selectors import (
    held_call_of,
    interaction_for_tenant,
    interactions_for_tenant,
    interactions_keyset_page,
    rule_for_tenant,
    rules_for_tenant,
)
from runtime.decisions.interactions import Asked, interaction_answer
from runtime.decisions.rules import DURATIONS, FOREVER, OPS, rule_check, rule_create, rule_revoke
from tenants.models import ApiToken
from tenants.tokens import TokenError, token_kind_check


@dataclass(frozen=True)
class Operator:
    tenant: object
    subject: str
    can_decide: bool
    # A token made with the step-up right may approve risk: high tools (issue 13); a browser
    # session may once its member re-authenticated (read when deciding: Operator.stepped_up).
    token_may_step_up: bool = False
    session: bool = False
    decider: Decider | None = None

    def stepped_up(self, request) -> bool:
        return self.token_may_step_up or (self.session and stepped_up(request))


def operator_for(request) -> Operator:
    """Who is asking, in which tenant; refuses partner tokens and people without a tenant."""
    user = request.user
    identity = getattr(user, "identity", None)
    if identity is not None:
        try:
            token_kind_check(identity, kind=ApiToken.Kind.OPERATOR)
        except TokenError as exc:
            # 403, not 401: the token is valid, it is only of the wrong kind for this channel.
            raise PermissionDenied(str(exc)) from None
        # A program with an operator token decides as an operator; it is in no group.
        return Operator(
            tenant=user.tenant,
            subject=user.subject,
            can_decide=True,
            token_may_step_up=identity.token.may_step_up,
            decider=Decider(subject=user.subject, role="operator"),
        )
    membership = getattr(request, "membership", None)
    if not membership:
        raise PermissionDenied("You are not a member of any tenant.")
    return Operator(
        tenant=membership.tenant,
        subject=user.subject,
        can_decide=membership.can_decide,
        session=True,
        decider=Decider.of_member(membership, user),
    )


class IsOperator(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        operator = operator_for(request)
        if request.method not in permissions.SAFE_METHODS and not operator.can_decide:
            raise PermissionDenied("Viewers can see but not decide.")
        request.operator = operator
        return True


# --- serializers ---------------------------------------------------------------------------


def wire_time(value: datetime | None) -> str | None:
    """A time as DRF's DateTimeField writes it: ISO 8601 in the current zone, UTC as "Z"."""
    if value is None:
        return None
    text = timezone.localtime(value).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class HeldCallSerializer(serializers.Serializer):
    server = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.JSONField()
    argumentsHash = serializers.CharField(  # noqa: N815 - the wire's spelling
        source="arguments_hash", help_text="SHA-256 of the canonical arguments (the receipt's)."
    )
    state = serializers.CharField()


class InteractionSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    kind = serializers.ChoiceField(choices=Interaction.Kind.choices)
    state = serializers.ChoiceField(choices=Interaction.State.choices)
    prompt = serializers.CharField()
    detail = serializers.JSONField()
    choices = serializers.SerializerMethodField()
    allowCustom = serializers.SerializerMethodField()
    agent = serializers.CharField(source="task.agent.slug")
    taskId = serializers.CharField(source="task.public_id")
    contextId = serializers.CharField(source="task.wire_context_id")
    subject = serializers.CharField(help_text="The caller the task runs for.")
    deciders = serializers.ChoiceField(choices=Interaction.Deciders.choices)
    approvers = serializers.SerializerMethodField(
        help_text="Who may decide an approval now: roles, group:<slug>, caller (empty for "
        "other kinds: any operator)."
    )
    approvalsRequired = serializers.IntegerField(
        source="approvals_required",
        help_text="How many distinct people must approve (2: the two-person rule).",
    )
    approvals = serializers.ListField(
        child=serializers.DictField(),
        help_text="The approvals recorded so far, [{by, via, at}], when more than one is required.",
    )
    createdAt = serializers.DateTimeField(source="created_at")
    expiresAt = serializers.DateTimeField(source="expires_at")
    answer = serializers.JSONField(allow_null=True)
    answeredBy = serializers.CharField(source="answered_by", allow_blank=True)
    answeredVia = serializers.CharField(source="answered_via", allow_blank=True)
    answeredAt = serializers.DateTimeField(source="answered_at", allow_null=True)

    def get_choices(self, obj) -> list[str]:
        return [str(c) for c in (obj.request or {}).get("choices") or []]

    def to_representation(self, instance) -> dict:
        # The same object the fields above describe (the schema reads them), built directly:
        # a page of 200 rows through DRF's per-field machinery costs more than its query.
        task = instance.task
        return {
            "id": instance.public_id,
            "kind": instance.kind,
            "state": instance.state,
            "prompt": instance.prompt,
            "detail": instance.detail,
            "choices": self.get_choices(instance),
            "allowCustom": self.get_allowCustom(instance),
            "agent": task.agent.slug,
            "taskId": task.public_id,
            "contextId": task.wire_context_id,
            "subject": instance.subject,
            "deciders": instance.deciders,
            "approvers": self.get_approvers(instance),
            "approvalsRequired": instance.approvals_required,
            "approvals": instance.approvals or [],
            "createdAt": wire_time(instance.created_at),
            "expiresAt": wire_time(instance.expires_at),
            "answer": instance.answer,
            "answeredBy": instance.answered_by,
            "answeredVia": instance.answered_via,
            "answeredAt": wire_time(instance.answered_at),
        }

    def get_approvers(self, obj) -> list[str]:
        return effective_approvers(obj) if obj.kind == Interaction.Kind.APPROVAL else []

    def get_allowCustom(self, obj) -> bool:  # noqa: N802 - the wire's spelling
        request = obj.request or {}
        return bool(request.get("allowCustom")) or not request.get("choices")


class InteractionDetailSerializer(InteractionSerializer):
    heldCall = serializers.SerializerMethodField(
        help_text="For an approval: the call it holds, with the exact arguments that will be sent."
    )

    @extend_schema_field(HeldCallSerializer(allow_null=True))
    def get_heldCall(self, obj) -> dict | None:  # noqa: N802 - the wire's spelling
        effect = held_call_of(obj)
        return HeldCallSerializer(effect).data if effect else None

    def to_representation(self, instance) -> dict:
        return {**super().to_representation(instance), "heldCall": self.get_heldCall(instance)}


class JSONOnlyParser(JSONParser):
    """JSON bodies only (any other media type is 415), and nesting that would exhaust the
    parser's recursion is a 400 like any other unreadable body."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None


class JSONBooleanField(serializers.BooleanField):
    """A JSON true or false: "yes", "on", 1 and "true" are not decisions."""

    default_error_messages = {
        "invalid": "Must be a JSON boolean, true or false.",
        "null": "Must be a JSON boolean, true or false.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class AnswerValueField(serializers.JSONField):
    """Any JSON, holding only text PostgreSQL can store, in strings as long as the page's."""

    default_error_messages = JSON_TEXT_PROBLEMS

    def to_internal_value(self, data):
        problem = json_text_problem(data, max_length=ANSWER_MAX)
        if problem:
            self.fail(problem, max_length=ANSWER_MAX, max_depth=JSON_MAX_DEPTH)
        return super().to_internal_value(data)


class ArgumentsField(serializers.JSONField):
    """Edited arguments: a JSON object holding only text PostgreSQL can store."""

    default_error_messages = {**JSON_TEXT_PROBLEMS, "not_object": "Must be a JSON object."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_object")
        problem = json_text_problem(data, max_length=ARGUMENTS_MAX)
        if problem:
            self.fail(problem, max_length=ARGUMENTS_MAX, max_depth=JSON_MAX_DEPTH)
        return super().to_internal_value(data)


class ConditionSerializer(serializers.Serializer):
    field = serializers.CharField(max_length=200)
    op = serializers.ChoiceField(choices=[(op, op) for op in OPS])
    value = AnswerValueField(help_text="equals: a value; in: a list of values; prefix: text.")


class AllowSimilarSerializer(serializers.Serializer):
    """ "Approve and allow similar calls" over REST (README "Standing rules")."""

    duration = serializers.ChoiceField(
        choices=[*DURATIONS, FOREVER], default="1d", help_text="forever: admins only"
    )
    callerOnly = serializers.BooleanField(default=True)
    conditions = ConditionSerializer(many=True, default=list)


class AnswerSerializer(serializers.Serializer):
    """The body of an answer; ``context["interaction"]`` says which fields its kind takes."""

    approved = JSONBooleanField(
        required=False, help_text="For an approval: true sends the held call; false denies it."
    )
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="For an approval: why; the agent's model sees it.",
    )
    allowSimilar = AllowSimilarSerializer(
        required=False,
        help_text="With approved: true, also make a standing rule for similar calls.",
    )
    value = AnswerValueField(
        required=False,
        help_text="For a question: the answer (one of its choices unless allowCustom). "
        "For a connection: true or false.",
    )
    arguments = ArgumentsField(
        required=False,
        help_text="For an approval of a tool whose policy says editable: true: the arguments "
        "to send instead (a JSON object, checked against the tool's schema).",
    )
    argumentsHash = serializers.RegexField(  # noqa: N815 - the wire's spelling
        r"^[0-9a-f]{64}$",
        required=False,
        help_text="The SHA-256 of the arguments you were shown (heldCall.argumentsHash); "
        "the decision is refused if the call's arguments are no longer those.",
    )

    def validate(self, attrs):
        interaction = self.context.get("interaction")
        kind = interaction.kind if interaction is not None else None
        if "approved" in attrs and "value" in attrs:
            raise serializers.ValidationError({"value": "Send either approved or value."})
        if kind == Interaction.Kind.APPROVAL:
            if "value" in attrs:
                raise serializers.ValidationError(
                    {"value": "An approval takes approved (and a reason), not value."}
                )
            if "approved" not in attrs:
                # A missing decision is never read as a denial (issue 15, finding 5).
                raise serializers.ValidationError(
                    {"approved": "Required for an approval: true or false."}
                )
            if "arguments" in attrs and attrs["approved"] is not True:
                raise serializers.ValidationError(
                    {"arguments": "Arguments are edited only when approving."}
                )
            if "allowSimilar" in attrs and attrs["approved"] is not True:
                raise serializers.ValidationError({"allowSimilar": "Only with approved: true."})
        elif "arguments" in attrs or "argumentsHash" in attrs:
            raise serializers.ValidationError(
                {"arguments": "Only an approval of a held call takes arguments."}
            )
        elif "allowSimilar" in attrs:
            raise serializers.ValidationError({"allowSimilar": "Only for an approval."})
        elif kind == Interaction.Kind.QUESTION and "value" not in attrs:
            raise serializers.ValidationError({"value": "Required for a question: the answer."})
        elif "approved" not in attrs and "value" not in attrs:
            raise serializers.ValidationError("Send either approved (with a reason) or value.")
        return attrs


class InteractionPageSerializer(serializers.Serializer):
    """A page of the list: follow ``next`` for older rows, ``previous`` for newer ones."""

    next = serializers.URLField(allow_null=True, help_text="The next (older) page, or null.")
    previous = serializers.URLField(
        allow_null=True, help_text="The previous (newer) page, or null."
    )
    results = InteractionSerializer(many=True)


class DecidedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    state = serializers.CharField()
    answeredBy = serializers.CharField()
    answeredVia = serializers.CharField()
    answeredAt = serializers.DateTimeField(allow_null=True)


class ErrorSerializer(serializers.Serializer):
    """What approvals/api_errors.py answers for a refused request."""

    detail = serializers.CharField()
    field = serializers.CharField(required=False, help_text="The field at fault, when one is.")
    reason = serializers.CharField(
        required=False, help_text="A machine-readable reason, e.g. STEP_UP_REQUIRED."
    )
    errors = serializers.JSONField(
        required=False, help_text="Every validation error, keyed by field."
    )


# --- views ---------------------------------------------------------------------------------


class InteractionKeyset(BasePagination):
    """Keyset pages of interactions, newest first, by (created_at, id).

    The cursor is opaque to programs: base64 of ``p=<time>~<id>`` (``&r=1`` to page back
    towards newer rows). Each page is one query that reads ``limit + 1`` rows through an
    index, however deep it is; ``next`` and ``previous`` are links (null at either end).
    """

    page_size = 50
    max_page_size = 200
    invalid_cursor_message = "Invalid cursor"

    def decode_cursor(self, request) -> tuple[tuple[datetime, int], bool] | None:
        raw = request.query_params.get("cursor")
        if not raw:
            return None
        try:
            query = parse_qs(b64decode(raw.encode("ascii"), validate=True).decode("ascii"))
            ts, _, pk = query["p"][0].rpartition("~")
            when, pk = parse_datetime(ts), int(pk)
            back = query.get("r", ["0"])[0] == "1"
        except (KeyError, ValueError, UnicodeError, binascii.Error):
            raise NotFound(self.invalid_cursor_message) from None
        # Only a position we could have written: an aware time and a bigint id.
        if when is None or when.tzinfo is None or not 0 < pk < 2**63:
            raise NotFound(self.invalid_cursor_message)
        return (when, pk), back

    def page_limit(self, request) -> int:
        try:
            limit = int(request.query_params.get("limit", self.page_size))
        except ValueError:
            return self.page_size
        return min(max(limit, 1), self.max_page_size)

    def link(self, position: Interaction, *, back: bool) -> str:
        fields = {"p": f"{position.created_at.isoformat()}~{position.pk}"}
        text = urlencode({**fields, "r": "1"} if back else fields)
        cursor = b64encode(text.encode("ascii")).decode("ascii")
        return replace_query_param(self.base_url, "cursor", cursor)

    def paginate_queryset(self, queryset, request, view=None):
        decoded = self.decode_cursor(request)
        self.base_url = request.build_absolute_uri()
        position, back = decoded if decoded else (None, False)
        page, more = interactions_keyset_page(
            queryset,
            after=None if back else position,
            before=position if back else None,
            size=self.page_limit(request),
        )
        # Going back, there is an older page (the one we came from); going forward from a
        # cursor, a newer one. Either way, "more" speaks for the direction taken.
        has_older = more if not back else position is not None
        has_newer = more if back else position is not None
        self.next_link = self.link(page[-1], back=False) if page and has_older else None
        self.previous_link = self.link(page[0], back=True) if page and has_newer else None
        return page

    def get_paginated_response(self, data):
        return Response({"next": self.next_link, "previous": self.previous_link, "results": data})


class InteractionFilters(serializers.Serializer):
    state = serializers.ChoiceField(choices=Interaction.State.choices, required=False)
    kind = serializers.ChoiceField(choices=Interaction.Kind.choices, required=False)
    agent = serializers.SlugField(required=False, help_text="An agent's slug.")


def _interaction_or_404(request, public_id: str) -> Interaction:
    interaction = interaction_for_tenant(tenant=request.operator.tenant, public_id=public_id)
    if interaction is None:
        # The same answer for another tenant's id as for a missing one.
        raise NotFound("No such interaction.")
    return interaction


@extend_schema(
    operation_id="interactions_list",
    parameters=[
        InteractionFilters,
        OpenApiParameter("limit", int, description="Page size (at most 200)."),
        OpenApiParameter("cursor", str, description="The cursor of the next or previous page."),
    ],
    responses={200: InteractionPageSerializer, 400: ErrorSerializer, 403: ErrorSerializer},
)
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def interaction_list(request):
    """The tenant's interactions, newest first; filter by state, kind and agent."""
    filters = InteractionFilters(data=request.query_params)
    filters.is_valid(raise_exception=True)
    rows = interactions_for_tenant(
        tenant=request.operator.tenant,
        state=filters.validated_data.get("state"),
        kind=filters.validated_data.get("kind"),
        agent_slug=filters.validated_data.get("agent"),
    )
    paginator = InteractionKeyset()
    page = paginator.paginate_queryset(rows, request)
    return paginator.get_paginated_response(InteractionSerializer(page, many=True).data)


@extend_schema(
    operation_id="interactions_retrieve",
    responses={200: InteractionDetailSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
)
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def interaction_detail(request, public_id: str):
    """One interaction, with the call an approval holds."""
    return Response(InteractionDetailSerializer(_interaction_or_404(request, public_id)).data)


@extend_schema(
    operation_id="interactions_answer",
    request=AnswerSerializer,
    responses={
        200: InteractionDetailSerializer,
        400: ErrorSerializer,
        403: OpenApiResponse(
            ErrorSerializer,
            description="A viewer, a partner token, or (reason STEP_UP_REQUIRED) an approval of "
            "a risk: high tool by a token without the step-up right.",
        ),
        404: ErrorSerializer,
        409: OpenApiResponse(DecidedSerializer, description="Someone else decided first."),
        415: OpenApiResponse(ErrorSerializer, description="The body is not JSON."),
    },
)
@api_view(["POST"])
@parser_classes([JSONOnlyParser])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def interaction_answer_view(request, public_id: str):
    """Decide: {approved, reason} for an approval, {value} for a question or a connection."""
    operator = request.operator
    allow_similar = None

    def asked(interaction: Interaction) -> Asked:
        # The body is read against the interaction the service has just read under the task's
        # lock (what it may hold depends on its kind): no read of the row before that one.
        nonlocal allow_similar
        body = AnswerSerializer(data=request.data, context={"interaction": interaction})
        body.is_valid(raise_exception=True)
        answer = dict(body.validated_data)
        arguments = answer.pop("arguments", None)
        shown_hash = answer.pop("argumentsHash", None)
        allow_similar = answer.pop("allowSimilar", None)
        if allow_similar is not None:
            # A rule that cannot be made is refused before anything is approved.
            rule_check(
                interaction=interaction,
                decider=operator.decider,
                conditions=allow_similar["conditions"],
                duration=allow_similar["duration"],
            )
        return Asked(answer=answer, arguments=arguments, shown_hash=shown_hash)

    # The core's faults (missing, already decided, invalid, step-up) are answered by
    # api_errors.py; a missing interaction is a 404 before its body is read.
    decided = interaction_answer(
        tenant=operator.tenant,
        interaction_id=public_id,
        by=operator.subject,
        via="rest",
        stepped_up=operator.stepped_up(request),
        decider=operator.decider,
        asked=asked,
    )
    if allow_similar is not None and decided.state == Interaction.State.ANSWERED:
        # The approval stands on its own; a rule that cannot be made is answered as such.
        rule = rule_create(
            tenant=operator.tenant,
            interaction_id=decided.public_id,
            decider=operator.decider,
            caller_only=allow_similar["callerOnly"],
            conditions=allow_similar["conditions"],
            duration=allow_similar["duration"],
            via="rest",
        )
        return Response({**InteractionDetailSerializer(decided).data, "rule": rule_wire(rule)})
    # The service hands back the decided row with its task and agent: nothing to read again.
    return Response(InteractionDetailSerializer(decided).data)


# --- standing rules ------------------------------------------------------------------------


class RuleSerializer(serializers.Serializer):
    id = serializers.CharField()
    agent = serializers.CharField()
    server = serializers.CharField()
    tool = serializers.CharField()
    caller = serializers.CharField(help_text="Only this caller's calls; empty: any caller.")
    conditions = ConditionSerializer(many=True)
    createdBy = serializers.CharField()
    createdFrom = serializers.CharField(allow_null=True)
    createdAt = serializers.DateTimeField()
    expiresAt = serializers.DateTimeField(allow_null=True)
    revokedAt = serializers.DateTimeField(allow_null=True)
    revokedBy = serializers.CharField(allow_blank=True)
    uses = serializers.IntegerField()
    active = serializers.BooleanField()


def rule_wire(rule: StandingRule) -> dict:
    return {
        "id": rule.public_id,
        "agent": rule.agent.slug,
        "server": rule.server,
        "tool": rule.tool,
        "caller": rule.caller,
        "conditions": rule.conditions,
        "createdBy": rule.created_by,
        "createdFrom": rule.created_from.public_id if rule.created_from_id else None,
        "createdAt": wire_time(rule.created_at),
        "expiresAt": wire_time(rule.expires_at),
        "revokedAt": wire_time(rule.revoked_at),
        "revokedBy": rule.revoked_by,
        "uses": rule.uses,
        "active": rule.is_active(),
    }


@extend_schema(
    operation_id="rules_list",
    responses={200: RuleSerializer(many=True), 403: ErrorSerializer},
)
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def rule_list(request):
    """The tenant's standing rules, newest first (at most 500)."""
    rows = rules_for_tenant(tenant=request.operator.tenant)
    return Response([rule_wire(rule) for rule in rows])


@extend_schema(
    operation_id="rules_revoke",
    request=None,
    responses={
        200: RuleSerializer,
        403: ErrorSerializer,
        404: ErrorSerializer,
        409: ErrorSerializer,
    },
)
@api_view(["POST"])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def rule_revoke_view(request, public_id: str):
    """Revoke a standing rule: its calls are held again."""
    if rule_for_tenant(tenant=request.operator.tenant, public_id=public_id) is None:
        raise NotFound("No such rule.")
    rule = rule_revoke(
        tenant=request.operator.tenant, rule_id=public_id, by=request.operator.subject, via="rest"
    )
    return Response(rule_wire(rule))
