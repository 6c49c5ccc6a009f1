"""The operator REST channel: list, read and answer interactions (/api/v1/interactions).

Programs authenticate with an operator token (ApiToken kind=operator) and act for the
token's subject; people in a browser use their session (CSRF enforced by DRF) and act as
``user:<email>`` in their current tenant. Partner tokens are refused: a partner answers
in-band over A2A, never here. An answer is read, taken by the one decision flow
(runtime.decisions.flow) and written back; the wire's bodies are approvals/api_serializers.py.
"""

import binascii
import codecs
import dataclasses
from base64 import b64decode, b64encode
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qs, urlencode

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions
from rest_framework.decorators import api_view, parser_classes, permission_classes
from rest_framework.exceptions import APIException, NotFound, ParseError, PermissionDenied
from rest_framework.pagination import BasePagination

# get_encoding: DRF's own charset check of a body (parsers.py), missing from its stubs.
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]
from rest_framework.response import Response
from rest_framework.utils import json as drf_json
from rest_framework.utils.urls import replace_query_param

from approvals import api_examples
from approvals.api_serializers import (
    AnswerSerializer,
    DecidedSerializer,
    ErrorSerializer,
    InteractionDetailSerializer,
    InteractionFactsSerializer,
    InteractionFilters,
    InteractionPageSerializer,
    InteractionRowSerializer,
    answer_decision,
)
from approvals.rule_bodies import RuleSerializer, rule_wire
from approvals.stepup import stepped_up
from runtime.decisions.approvers import Decider
from runtime.decisions.call_summaries import call_summaries_for
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import (
    interaction_for_tenant,
    interactions_for_tenant,
    interactions_keyset_page,
    rule_for_tenant,
    rules_for_tenant,
)
from runtime.decisions.facts import decision_facts
from runtime.decisions.flow import REST, Decision, decision_take
from runtime.decisions.standing_rules import rule_revoke
from tenants.models import ApiToken
from tenants.tokens import TokenError, token_kind_check


@dataclass(frozen=True)
class Operator:
    """Who asks, in which tenant, and who decides when they answer (``decider_for``)."""

    tenant: object
    subject: str
    can_decide: bool
    decider: Decider
    session: bool = False

    def decider_for(self, request) -> Decider:
        """The decider, with whether they stepped up: a token made with the step-up right
        (``may_step_up``) is so from the start; a browser session once its member re-authenticated
        (read only when it matters, as it reads the session and the member's authenticators)."""
        if not self.session:
            return self.decider
        return dataclasses.replace(self.decider, stepped_up=stepped_up(request))


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
        # A program with an operator token decides as an operator; it is in no group, and
        # never one of the people a two-person approval needs (docs/how-to/policy.md, "Who may
        # decide").
        return Operator(
            tenant=user.tenant,
            subject=user.subject,
            can_decide=True,
            decider=Decider.of_program(
                user.subject, may_step_up=identity.token.may_step_up, token_id=identity.token.pk
            ),
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


class JSONOnlyParser(JSONParser):
    """JSON bodies only (any other media type is 415), and nesting that would exhaust the
    parser's recursion is a 400 like any other unreadable body, as is an object that names
    a key twice: ``{"approved": true, "approved": false}`` means neither (JSON leaves the
    reading of a repeated name open, and Python's would take the last, a denial)."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})
        try:
            decoded = codecs.getreader(encoding)(stream)
            parse_constant = drf_json.strict_constant if self.strict else None
            return drf_json.loads(
                decoded.read(), parse_constant=parse_constant, object_pairs_hook=_keys_once
            )
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


def _keys_once(pairs: list) -> dict:
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key[:64]!r} is given twice in one object")
        found[key] = value
    return found


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
            ts, _, pk_text = query["p"][0].rpartition("~")
            when, pk = parse_datetime(ts), int(pk_text)
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


def interaction_or_404(request, public_id: str) -> Interaction:
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
    examples=api_examples.INTERACTIONS_LIST,
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
    summaries = call_summaries_for(
        tenant=request.operator.tenant, interaction_ids=[row.pk for row in page]
    )
    return paginator.get_paginated_response(
        InteractionRowSerializer(page, many=True, context={"summaries": summaries}).data
    )


@extend_schema(
    operation_id="interactions_retrieve",
    responses={200: InteractionFactsSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    examples=api_examples.INTERACTION_DETAIL,
)
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated, IsOperator])
def interaction_detail(request, public_id: str):
    """One interaction, with the call an approval holds, and what you may decide of it (the
    facts its decision page shows)."""
    interaction = interaction_or_404(request, public_id)
    facts = decision_facts(
        interaction=interaction,
        decider=request.operator.decider_for(request),
        with_receipts=False,
    )
    summaries = call_summaries_for(tenant=request.operator.tenant, interaction_ids=[interaction.pk])
    return Response(
        InteractionFactsSerializer(
            interaction, context={"facts": facts, "summaries": summaries}
        ).data
    )


def answer_endpoint(
    operation_id: str, *, request, body, forbidden: str, conflict: str, examples: list
):
    """A POST endpoint that decides, for an operator: JSON bodies only, and in the OpenAPI
    schema its body and the errors every answer shares (what 403 and 409 mean there)."""
    responses = {
        200: body,
        400: ErrorSerializer,
        403: OpenApiResponse(ErrorSerializer, description=forbidden),
        404: ErrorSerializer,
        409: OpenApiResponse(DecidedSerializer, description=conflict),
        415: OpenApiResponse(ErrorSerializer, description="The body is not JSON."),
    }

    def wrap(view):
        view = permission_classes([permissions.IsAuthenticated, IsOperator])(view)
        view = parser_classes([JSONOnlyParser])(view)
        view = api_view(["POST"])(view)
        return extend_schema(
            operation_id=operation_id, request=request, responses=responses, examples=examples
        )(view)

    return wrap


@answer_endpoint(
    "interactions_answer",
    request=AnswerSerializer,
    body=InteractionDetailSerializer,
    forbidden="A viewer, a partner token, or (reason STEP_UP_REQUIRED) an approval of a risk: "
    "high tool by a token without the step-up right.",
    conflict="Someone else decided first.",
    examples=api_examples.INTERACTION_ANSWER,
)
def interaction_answer_view(request, public_id: str):
    """Decide: {approved, reason} for an approval, {value} for a question or a connection."""
    operator = request.operator
    decision = _decision_read(request, public_id)
    # The flow's refusals (missing, misfit, already decided, who decides, step-up, the rule)
    # are answered by api_errors.py.
    decided = decision_take(
        tenant=operator.tenant,
        interaction_id=public_id,
        decider=operator.decider_for(request),
        decision=decision,
        channel=REST,
    )
    if decided.rule_refused is not None:
        # The approval stands on its own; a rule that cannot be made is answered as such.
        raise decided.rule_refused
    # The flow hands back the decided row with its task and agent: nothing to read again.
    body = InteractionDetailSerializer(decided.interaction).data
    if decided.rule is not None:
        body["rule"] = rule_wire(decided.rule)
    return Response(body)


def _decision_read(request, public_id: str) -> Decision:
    """The body as the flow's Decision. A body that does not read is refused (400, 415), but
    for a missing interaction the answer is 404, as if the body was never looked at: the one
    path that reads the row first."""
    try:
        body = AnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
    except APIException:
        interaction_or_404(request, public_id)
        raise
    return answer_decision(body.validated_data)


# --- standing rules ------------------------------------------------------------------------


@extend_schema(
    operation_id="rules_list",
    responses={200: RuleSerializer(many=True), 403: ErrorSerializer},
    examples=api_examples.RULES_LIST,
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
    examples=api_examples.RULE_REVOKE,
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
