"""What the tool policy says of one call: the rule that holds it (runtime.policy.rules)
read into what the turn and the decision flow act on (``Policy``), with the call's trust keys
(``ToolTrust``) and a rule's own ``timeout``. One reading answers every question a decision
asks of the policy."""

from dataclasses import dataclass
from typing import Any

from runtime.agents.agent_models import Agent
from runtime.policy.approver_syntax import MAX_REQUIRED, MAX_STAGES
from runtime.policy.ladders import duration_seconds
from runtime.policy.rules import PolicyRule, Stage, policy_rule_for


@dataclass(frozen=True)
class ToolTrust:
    """The trust keys of a call of a tool: ``editable: true`` lets an operator change the
    arguments before approving; ``risk: high`` asks the decider to have re-authenticated
    recently (step-up), and no standing rule ever approves such a call."""

    editable: bool = False
    risk: str = "normal"

    @property
    def high_risk(self) -> bool:
        return self.risk == "high"


@dataclass(frozen=True)
class Policy:
    """What the tool policy says of one call: the rule that holds it (runtime.policy.rules)
    read into what the turn and the decision flow act on."""

    action: str  # allow | approve | deny
    # Who decides a held call: the tenant's operators unless the policy entry says
    # ``deciders: either`` (the caller in band, or an operator) or ``caller``. The caller
    # never sees a call's arguments (interactions/v1's ``detail`` never carries them), so a
    # gateway in front of another company's agents holds its calls for its own people.
    deciders: str = "operators"  # either | operators (``caller`` is approvers: [caller])
    bulk: bool = True  # False: an operator decides each held call on its own page
    # Who may decide (runtime.decisions.approvers): roles, group:<slug>, caller; () is the
    # default. With stages: the first stage's.
    approvers: tuple[str, ...] = ()
    # How many distinct people approve, in all (the sum of the stages' numbers).
    required: int = 1
    # Seconds the call may take (``timeout: 60s``), instead of its tool server's timeout.
    timeout: float | None = None
    # The approval's stages, decided in order: one (``approvers``, ``required``) unless the
    # rule says ``stages``.
    stages: tuple[Stage, ...] = ()
    # The entry and rule that hold the call (None: a Policy made by hand).
    rule: PolicyRule | None = None
    # The call's trust keys (trust_of): ``editable``, ``risk``, read from the same rule and
    # the tool's own entry in AGENT.md.
    trust: ToolTrust = ToolTrust()


# A tool call's own timeout (the policy's ``timeout``): at most this long.
MAX_TOOL_TIMEOUT_SECONDS = 3600


def timeout_seconds(value) -> float:
    """A policy's ``timeout`` (``60s``, ``5m``, or a number of seconds) in seconds; ValueError
    saying what is wrong."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 30s or 5m")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = float(duration_seconds(value))
    if not 0 < seconds <= MAX_TOOL_TIMEOUT_SECONDS:
        raise ValueError(f"must be more than 0 and at most {MAX_TOOL_TIMEOUT_SECONDS}s")
    return seconds


def policy_for(agent: Agent, server: str, tool: str, arguments: Any) -> Policy:
    """What the policy says of this call: the rule of the most specific entry that holds
    for its arguments (runtime.policy.rules.policy_rule_for); undeclared means approve, so
    that nothing risky runs without a person unless the policy says so. With the call's trust
    keys: one reading of the policy serves every question a decision asks of it."""
    held = policy_rule_for(agent, server, tool, arguments)
    return policy_of(held, trust=trust_of(agent, server, tool, held))


def trust_of(agent: Agent, server: str, tool: str, held: PolicyRule) -> ToolTrust:
    """The trust keys of a call of the tool: ``editable`` from the policy rule that holds it
    (``held``: ``server/tool``, else ``server``, the rule of a conditional entry whose
    conditions hold); ``risk: high`` from that rule or from the tool's own entry in AGENT.md's
    ``tools`` list (``{server, tool}`` or the whole ``{server}``): either one saying it makes
    the call high-risk, for step-up as for standing rules."""
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


def _required(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return 1
    return min(value, MAX_REQUIRED)


def policy_of(match: PolicyRule, trust: ToolTrust | None = None) -> Policy:
    """The Policy of one rule (as policy_rule_for found it), with the call's ``trust``."""
    rule = match.rule
    approvers = tuple(str(a) for a in rule.get("approvers") or ())
    deciders = rule.get("deciders", "operators")
    if deciders == "caller" and not approvers:
        # The caller alone decides, in band: the approvers are the caller.
        approvers = ("caller",)
    if approvers:
        # Named approvers say whether the caller may answer in band: only with ``caller``.
        deciders = "either" if "caller" in approvers else "operators"
    written = rule.get("stages")
    if isinstance(written, list) and written:
        stages = tuple(Stage.of(stage) for stage in written[:MAX_STAGES])
        stages = tuple(Stage(s.approvers, min(s.required, MAX_REQUIRED), s.title) for s in stages)
        approvers = stages[0].approvers
    else:
        stages = (Stage(approvers, _required(rule.get("required", 1))),)
    required = sum(stage.required for stage in stages)
    if required > 1 or len(stages) > 1:
        deciders = "operators"  # people decide; a caller's answer is not one of them
    try:
        timeout = timeout_seconds(rule["timeout"]) if "timeout" in rule else None
    except ValueError:
        timeout = None  # refused when the agent was loaded; an edit by hand is ignored
    return Policy(
        action=match.action,
        deciders=deciders,
        bulk=rule.get("bulk", True) is not False,
        approvers=approvers,
        required=required,
        timeout=timeout,
        stages=stages,
        rule=match,
        trust=trust or ToolTrust(),
    )


def policy_rule(agent: Agent, server: str, tool: str) -> str | dict:
    """The policy's entry for the tool as written: ``server/tool``, then ``server``, else
    ``approve`` (a conditional entry is its list of rules: policy_rule_for picks the one
    that holds a call)."""
    rules = agent.tool_policy or {}
    return rules.get(f"{server}/{tool}", rules.get(server, "approve"))
