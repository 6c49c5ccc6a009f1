"""The REST channel's errors, in one place: the core's faults and DRF's own refusals.

Set as REST_FRAMEWORK["EXCEPTION_HANDLER"], so a view calls a service and lets its fault
rise; the status and the body of each fault are decided here and nowhere else. Bodies follow
``ErrorSerializer`` in approvals/api.py: ``detail``, and ``field`` when one field is at fault.
"""

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from runtime.kernel.errors import (
    AlreadyDecided,
    ChannelRefused,
    DeciderRefused,
    DecisionMisfit,
    InvalidParams,
    NotAllowed,
    RuleRefused,
    RuntimeFault,
    StepUpRequired,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)


def _decided(exc: AlreadyDecided) -> Response:
    # Someone else decided first: say who, how and when, so the loser knows what happened.
    won = exc.interaction
    # Operators may know who decided (the error's own message, for partners, names only the
    # kind of decider).
    at = won.answered_at.isoformat() if won.answered_at else ""
    detail = (
        f"Interaction {won.public_id} was already {won.state} by {won.answered_by or 'someone'}"
        + (f" at {at}" if at else "")
        + "; this answer was not applied."
    )
    return Response(
        {
            "detail": detail,
            "state": won.state,
            "answeredBy": won.answered_by,
            "answeredVia": won.answered_via,
            "answeredAt": won.answered_at,
        },
        status=status.HTTP_409_CONFLICT,
    )


def fault_response(exc: RuntimeFault) -> Response | None:
    """The REST answer to a fault of the core; None for a fault it does not know (a 500)."""
    if isinstance(exc, AlreadyDecided):
        return _decided(exc)
    if isinstance(exc, RuleRefused):
        # The standing rule asked for with the approval cannot be made (nothing was
        # approved): answered as the fault that says why.
        return fault_response(exc.cause)
    if isinstance(exc, DecisionMisfit):
        # A body that does not fit the interaction's kind reads as any body DRF refuses:
        # the field at fault, its message, and every error keyed by field.
        errors = {exc.field or "non_field_errors": [exc.description]}
        return Response(
            validation_body(exceptions.ValidationError(errors)),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, DeciderRefused):
        # Authenticated and a decider, but not one this approval names (approvers, the
        # two-person rule): forbidden, with the reason.
        return Response(
            {"detail": exc.message, "reason": exc.reason}, status=status.HTTP_403_FORBIDDEN
        )
    if isinstance(exc, InvalidParams):
        return Response(
            {"detail": exc.description, "field": exc.field}, status=status.HTTP_400_BAD_REQUEST
        )
    if isinstance(exc, TaskNotFound):
        # The same answer for another tenant's id as for a missing one.
        return Response({"detail": exc.message}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, StepUpRequired):
        # The request is understood and the caller known, but it may not take this decision
        # as it is: a risk: high approval needs a token with the step-up right.
        return Response(
            {"detail": exc.message, "reason": exc.reason}, status=status.HTTP_403_FORBIDDEN
        )
    if isinstance(exc, NotAllowed | TaskNotCancelable | ChannelRefused):
        # The request was fine; the thing is no longer in a state that takes it.
        return Response({"detail": exc.message}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, UnsupportedOperation):
        return Response(
            {"detail": exc.message, "reason": exc.reason}, status=status.HTTP_400_BAD_REQUEST
        )
    return None


def _first_error(detail, path: str = "") -> tuple[str, str]:
    """(dotted field path, message) of the first error in a ValidationError's detail."""
    if isinstance(detail, dict):
        name, inner = next(iter(detail.items()))
        if name == "non_field_errors":
            return _first_error(inner, path)
        return _first_error(inner, f"{path}.{name}" if path else str(name))
    if isinstance(detail, list) and detail:
        return _first_error(detail[0], path)
    return path, str(detail)


def _sendable(value):
    """``value`` with every text (keys too) written so that it encodes as UTF-8: a lone
    surrogate that a client sent in a key (an argumentsHashes id, an answer's field) as
    ``\\udXXX``. Rendered as it is, it made the error itself fail, a 500."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value  # as it was (DRF's ErrorDetail keeps its code)
    if isinstance(value, dict):
        return {_sendable(k): _sendable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sendable(v) for v in value]
    return value


def validation_body(exc: exceptions.ValidationError) -> dict:
    field, message = _first_error(exc.detail)
    body: dict[str, object] = {"detail": f"{field}: {message}" if field else message}
    if field:
        body["field"] = field
    # Every error DRF found, keyed by field as DRF spells them, for programs that fix all.
    body["errors"] = exc.detail
    return _sendable(body)


def rest_exception_handler(exc, context) -> Response | None:
    """DRF's handler, plus the core's faults, with validation errors that name their field."""
    if isinstance(exc, RuntimeFault):
        return fault_response(exc)
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.ValidationError):
        response.data = validation_body(exc)
    return response
