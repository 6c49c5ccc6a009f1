"""What the turn loop sends a call to, and what comes back: the protocol every tool
server implements (a demo server, a tenant's MCP or HTTP server), its errors, and a call
still open while its server asks a person something."""

from dataclasses import dataclass
from typing import Any, Protocol


class ToolError(Exception):
    """The tool ran and failed; the model sees the message."""


class ToolOutcomeLost(ToolError):
    """The call was sent and no answer came in time: it may have run. The turn loop marks
    its effect uncertain (effects/v1) for an operator to resolve, as after a crash."""


@dataclass(frozen=True)
class CallContext:
    tenant: Any
    effect_id: str
    subject: str
    # Seconds the call may take (the policy's ``timeout``); None: the server's own.
    timeout: float | None = None
    # The run's MCP sessions (runtime.tools.mcp_sessions.ToolSessions): one per tool server
    # for the whole run of the turn. None: a call in a session of its own.
    sessions: Any = None


class ToolAsks:
    """A call still open whose server asks a person something before it answers (MCP's
    elicitation, runtime.tools.mcp_sessions): what ``ToolServer.call`` returns then.
    ``answer`` gives the person's answer (MCP's ElicitResult: ``{action: accept | decline |
    cancel, content?}``) to the server and waits for what comes next: the call's result (or
    ToolError, ToolOutcomeLost), or another question."""

    message: str
    mode: str  # form (a schema to fill in) | url (a page to open)
    schema: dict
    url: str

    def answer(self, result: dict) -> "dict | ToolAsks":
        raise NotImplementedError


class ToolServer(Protocol):
    """What the turn loop sends a call to: a demo server here, or a tenant's MCP or HTTP
    server (runtime.tools.servers); ``server_for`` there picks one."""

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> "dict | ToolAsks": ...
