"""The "model" of an MCP gateway (an agent with no model, AGENT.md ``gateway``): its turn is one
MCP client's held call. The caller's message carries the call as a data part, ``{"mcpCall":
{server, tool, arguments}}``; the gateway model makes that call as its first action, exactly as
a hosted model would (held, decided, sent under the agent's policy: runtime.turn.calls), and
ends the turn with a line saying what came of it once the call has its result. The MCP client
is given the call's outcome from its journal (runtime.gateway.held_calls), not this reply."""

from runtime.llm.actions import Action, CallTool, Fail, Reply, TurnView

MCP_CALL = "mcpCall"


def gateway_call_of(data: list) -> dict | None:
    """The held call a gateway turn's message carries, or None."""
    for part in data:
        call = part.get(MCP_CALL) if isinstance(part, dict) else None
        if (
            isinstance(call, dict)
            and isinstance(call.get("server"), str)
            and isinstance(call.get("tool"), str)
            and isinstance(call.get("arguments"), dict)
        ):
            return call
    return None


class GatewayModel:
    """One call, then the end of the turn (runtime.llm.actions.ModelProvider)."""

    in_process = True

    def __init__(self, model: dict):
        self.model = model

    def next_action(self, view: TurnView) -> Action:
        result = view.last_result
        if result is not None:
            if result.get("ok"):
                return Reply(text="The call was sent; its result is with the MCP client.")
            reason = result.get("reason") or result.get("error") or "not sent"
            return Reply(text=f"The call was not sent: {reason}.")
        if view.actions_taken:
            return Fail(text="The gateway's call has no result.")
        call = gateway_call_of(view.data)
        if call is None:
            # Only the gateway starts such turns; a message of anyone else names no call.
            return Fail(text="A gateway runs the calls of MCP clients only.", reject=True)
        return CallTool(server=call["server"], tool=call["tool"], arguments=call["arguments"])
