"""JSON-RPC and A2A errors, each with the google.rpc.ErrorInfo detail (A2A §3.3.2, §9.5)."""

from a2a.utils import errors as sdk

from runtime.kernel import errors as domain

DOMAIN = "a2a-protocol.org"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def from_sdk(error_type: type[sdk.A2AError], message: str, reason: str = "", **kwargs):
    """An error with the JSON-RPC code and ErrorInfo reason that a2a-sdk's tables give
    ``error_type`` (a2a.utils.errors); ``reason`` overrides the reason (-32004's variants)."""
    code = sdk.JSON_RPC_ERROR_CODE_MAP[error_type]
    return RpcError(code, message, reason or sdk.A2A_ERROR_MAPPING[error_type].reason, **kwargs)


# Not from a2a-sdk: PARSE_ERROR (its tables have no reason for -32700), INTERNAL (they say
# INTERNAL_ERROR; ours is on the wire already) and this gateway's -32000 errors
# (UNAUTHENTICATED, AGENT_NOT_FOUND, TENANT_INACTIVE).


class RpcError(Exception):
    def __init__(
        self,
        code: int,
        message: str,
        reason: str,
        *,
        metadata=None,
        violations=None,
        http_status: int = 200,
    ):
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason
        self.metadata = {k: str(v) for k, v in (metadata or {}).items()}
        self.violations = violations or []
        self.http_status = http_status

    def body(self, request_id=None) -> dict:
        data = [
            {
                "@type": ERROR_INFO,
                "reason": self.reason,
                "domain": DOMAIN,
                "metadata": self.metadata,
            }
        ]
        if self.violations:
            data.append(
                {
                    "@type": BAD_REQUEST,
                    "fieldViolations": [{"field": f, "description": d} for f, d in self.violations],
                }
            )
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": self.code, "message": self.message, "data": data},
        }


def parse_error(detail: str) -> RpcError:
    return RpcError(-32700, f"Parse error: {detail}", "PARSE_ERROR")


def invalid_request(detail: str, http_status: int = 200) -> RpcError:
    return from_sdk(sdk.InvalidRequestError, f"Invalid request: {detail}", http_status=http_status)


def method_not_found(method: str) -> RpcError:
    return from_sdk(
        sdk.MethodNotFoundError, f"Method not found: {method}", metadata={"method": method}
    )


def invalid_params(field: str, description: str, **metadata) -> RpcError:
    return from_sdk(
        sdk.InvalidParamsError,
        f"Invalid parameters: {field}: {description}",
        metadata=metadata,
        violations=[(field, description)],
    )


def unsupported(message: str, reason: str = "", **metadata) -> RpcError:
    return from_sdk(sdk.UnsupportedOperationError, message, reason, metadata=metadata)


def push_not_supported() -> RpcError:
    return from_sdk(
        sdk.PushNotificationNotSupportedError, "Push notifications are not supported by this agent."
    )


def content_type_not_supported(content_type: str) -> RpcError:
    return from_sdk(
        sdk.ContentTypeNotSupportedError,
        f"Content type {content_type or '(none)'} is not supported; send application/json.",
        http_status=415,
    )


def version_not_supported(version: str) -> RpcError:
    return from_sdk(
        sdk.VersionNotSupportedError,
        f"A2A version {version or '0.3 (no A2A-Version header)'} is not supported; this endpoint serves A2A 1.0 "
        "(send the header A2A-Version: 1.0).",
        metadata={"supported": "1.0"},
    )


def unauthenticated(description: str, reason: str) -> RpcError:
    return RpcError(
        -32000, description, "UNAUTHENTICATED", metadata={"reason": reason}, http_status=401
    )


def agent_not_found() -> RpcError:
    # The same answer for an agent that does not exist, one in another tenant and one the
    # token may not call: nothing tells a caller which agents exist elsewhere.
    return RpcError(-32000, "No such agent.", "AGENT_NOT_FOUND", http_status=404)


def tenant_inactive(tenant_slug: str) -> RpcError:
    # Told only to callers the tenant let in (its tokens, anyone for its public agents): they
    # learn why their calls stop, strangers learn nothing new.
    return RpcError(
        -32000,
        f"The tenant {tenant_slug} is deactivated: its agents take no calls. Ask its "
        "administrators.",
        "TENANT_INACTIVE",
        metadata={"tenant": tenant_slug},
        http_status=403,
    )


def from_domain(exc: domain.RuntimeFault) -> RpcError:
    if isinstance(exc, domain.TaskNotFound):
        return from_sdk(sdk.TaskNotFoundError, exc.message, metadata=exc.metadata)
    if isinstance(exc, domain.TaskNotCancelable):
        return from_sdk(sdk.TaskNotCancelableError, exc.message, metadata=exc.metadata)
    if isinstance(exc, domain.InvalidParams):
        return invalid_params(exc.field, exc.description, **exc.metadata)
    if isinstance(exc, domain.UnsupportedOperation):
        return unsupported(exc.message, exc.reason, **exc.metadata)
    if isinstance(exc, domain.DeciderRefused):
        # The caller's subject may not decide (runtime.decisions.flow): the request is fine,
        # the operation is not this caller's.
        return unsupported(exc.message, exc.reason, **exc.metadata)
    if isinstance(exc, domain.AlreadyDecided):
        # -32004 as for any answer to a task that no longer waits for it; the ErrorInfo reason
        # and metadata say that someone else decided first, who, how and when.
        return unsupported(exc.message, exc.reason, **exc.metadata)
    return RpcError(-32603, "Internal error", "INTERNAL")


# --- the HTTP+JSON binding's errors (A2A §11.6, §5.4): google.rpc.Status (AIP-193) ----------

# JSON-RPC code -> (HTTP status, google.rpc.Code name): A2A §5.4's table for the A2A errors
# (the gRPC column names the status), and the usual mapping for the JSON-RPC ones.
HTTP_STATUS = {
    -32001: (404, "NOT_FOUND"),
    -32002: (409, "FAILED_PRECONDITION"),
    -32003: (400, "UNIMPLEMENTED"),
    -32004: (400, "UNIMPLEMENTED"),
    -32005: (415, "INVALID_ARGUMENT"),
    -32006: (502, "INTERNAL"),
    -32007: (400, "FAILED_PRECONDITION"),
    -32008: (400, "FAILED_PRECONDITION"),
    -32009: (400, "UNIMPLEMENTED"),
    -32700: (400, "INVALID_ARGUMENT"),
    -32600: (400, "INVALID_ARGUMENT"),
    -32601: (404, "NOT_FOUND"),
    -32602: (400, "INVALID_ARGUMENT"),
    -32603: (500, "INTERNAL"),
}
# This gateway's -32000 errors, by ErrorInfo reason.
HTTP_STATUS_BY_REASON = {
    "UNAUTHENTICATED": (401, "UNAUTHENTICATED"),
    "AGENT_NOT_FOUND": (404, "NOT_FOUND"),
    "TOO_MANY_STREAMS": (429, "RESOURCE_EXHAUSTED"),
}
STATUS_NAMES = {413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED"}


def http_status(error: RpcError) -> tuple[int, str]:
    """The HTTP status and google.rpc.Code name of ``error`` in the HTTP+JSON binding."""
    if error.reason in HTTP_STATUS_BY_REASON:
        return HTTP_STATUS_BY_REASON[error.reason]
    if error.http_status >= 400:  # a status the error set itself (413: the body is too big)
        return error.http_status, STATUS_NAMES.get(error.http_status, "INVALID_ARGUMENT")
    return HTTP_STATUS.get(error.code, (500, "INTERNAL"))


def status_body(error: RpcError) -> tuple[int, dict]:
    """``error`` as the HTTP+JSON binding writes it: (HTTP status, google.rpc.Status body),
    the same ErrorInfo (and BadRequest) details the JSON-RPC error carries in ``data``."""
    status, name = http_status(error)
    details = error.body()["error"]["data"]
    return status, {
        "error": {"code": status, "status": name, "message": error.message, "details": details}
    }
