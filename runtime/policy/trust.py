"""The trust keys of a call of a tool: ``editable`` and ``risk: high``, from the policy
rule that holds it and from the tool's own entry in AGENT.md."""

from dataclasses import dataclass

from runtime.agents.agent_models import Agent
from runtime.policy.rules import PolicyRule, policy_rule_for


@dataclass(frozen=True)
class ToolTrust:
    """The trust keys of a tool's policy entry: ``editable: true`` lets an
    operator change the arguments before approving; ``risk: high`` asks the decider to have
    re-authenticated recently (step-up)."""

    editable: bool = False
    risk: str = "normal"

    @property
    def high_risk(self) -> bool:
        return self.risk == "high"


def tool_trust(agent: Agent, server: str, tool: str, arguments) -> ToolTrust:
    """The trust keys of a call of the tool: ``editable`` from the policy rule that holds it
    (runtime.policy.rules.policy_rule_for: ``server/tool``, else ``server``, the rule of a
    conditional entry whose conditions hold); ``risk: high`` from that rule or from the tool's
    own entry in AGENT.md's ``tools`` list (``{server, tool}`` or the whole ``{server}``):
    either one saying it makes the call high-risk, for step-up as for standing rules (no
    standing rule ever approves a high-risk call)."""
    return trust_of(agent, server, tool, policy_rule_for(agent, server, tool, arguments))


def trust_of(agent: Agent, server: str, tool: str, held: PolicyRule) -> ToolTrust:
    """``tool_trust`` of a call whose policy rule (``held``) the caller has found."""
    rule = held.rule
    declared = any(
        spec.get("risk") == "high"
        # (An agent read for its policy alone may carry no tools list.)
        for spec in getattr(agent, "tools", None) or []
        if spec.get("server") == server and spec.get("tool") in (tool, None)
    )
    return ToolTrust(
        editable=rule.get("editable") is True,
        risk="high" if declared or rule.get("risk") == "high" else "normal",
    )
