"""Which entry of an agent's tool policy, and which rule of it, holds one call
(docs/how-to/policy.md). Every reader of the policy (the turn holding a call, the decision flow,
the pages, receipts, standing rules) asks ``policy_rule_for``, so that they all agree on it.

An entry is written under ``server/tool`` or ``server`` (the more specific wins) as a
decision (``allow``, ``approve``, ``deny``), a mapping (``{action: approve, required: 3}``), or
a list of rules tried in order: each a mapping with ``when`` conditions over the call's
arguments (runtime.policy.conditions: the standing rules' language) and its own keys; the
first whose conditions hold is the call's, and a last rule without ``when`` is the default.
When no rule of a list holds, the call is treated as if that entry were not written: the
server's entry, then (for a tool of a tenant's tool server) the tenant's default for what
the tool's annotations say it does (runtime.agents.agent_models.AnnotationPolicy), else
approve: nothing risky runs without a person unless the policy says so.

A rule's ``version`` is the SHA-256 of its entry's key and the rule as written: what an
approval binds. Changing another tool's entry, or a rule that does not hold this call,
leaves it as it was; changing this rule (or which rule holds the call) makes a new one.
"""

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from runtime.agents.agent_models import GATE_DEFAULT_ENTRY, RESERVED_SERVER_NAMES, AnnotationPolicy
from runtime.agents.agent_models import ToolServer as ServerRow
from runtime.policy.conditions import conditions_hold, conditions_text

HINT_KINDS = tuple(kind for kind, _ in AnnotationPolicy.KINDS)
HINT_DEFAULTS = dict(AnnotationPolicy.KINDS)
HINT_WORDS = {
    "read_only": "read-only",
    "additive": "additive",
    "destructive": "destructive",
    "unknown": "without annotations",
}


@dataclass(frozen=True)
class Stage:
    """One stage of an approval: who may approve in it and how many distinct people."""

    approvers: tuple[str, ...] = ()
    required: int = 1
    title: str = ""

    def stored(self) -> dict:
        return {"approvers": list(self.approvers), "required": self.required, "title": self.title}

    @classmethod
    def of(cls, value) -> "Stage":
        """A stage as a policy or an interaction stores it (anything else: the default)."""
        value = value if isinstance(value, dict) else {}
        required = value.get("required", 1)
        return cls(
            approvers=tuple(str(a) for a in value.get("approvers") or ()),
            required=required if isinstance(required, int) and required >= 1 else 1,
            title=str(value.get("title") or ""),
        )


@dataclass(frozen=True)
class PolicyRule:
    """The entry (and rule of it) that holds a call: ``entry`` its key (``""``: none),
    ``index`` its place in a list of rules (None: the entry is no list), ``count`` how many
    rules the list has, ``rule`` the keys in force (with ``action``; ``when`` left out),
    ``when`` the conditions that held, ``source`` (``policy``, ``annotations`` or
    ``default``), ``hint`` the tool's annotation kind when they decided, and ``version``."""

    entry: str
    rule: dict
    version: str
    index: int | None = None
    count: int = 0
    when: tuple = ()
    source: str = "policy"
    hint: str = ""

    @property
    def action(self) -> str:
        return str(self.rule.get("action", "approve"))

    @property
    def title(self) -> str:
        title = self.rule.get("title")
        return str(title) if isinstance(title, str | int | float) else ""

    @property
    def number(self) -> int | None:
        """The rule's number in its list, from 1 (None: the entry is no list)."""
        return None if self.index is None else self.index + 1

    @property
    def conditional(self) -> bool:
        return self.index is not None

    def label(self) -> str:
        """Which rule held the call, as pages, receipts and the audit say it."""
        if self.source == "annotations":
            if self.hint == "unknown":
                return "the tenant's default for tools without annotations"
            words = HINT_WORDS.get(self.hint, self.hint)
            return f"the tenant's default for {words} tools (by the tool's annotations)"
        if self.source == "default":
            return "no policy entry (approve, the default)"
        if self.index is None:
            return self.entry
        text = f"{self.entry}, rule {self.index + 1} of {self.count}"
        if self.title:
            text += f" ({self.title})"
        if self.when:
            text += f": when {conditions_text(list(self.when))}"
        else:
            text += ": the default rule"
        return text

    def stored(self) -> dict:
        """As an interaction keeps it (server side: its conditions name argument values)."""
        return {
            "entry": self.entry,
            "rule": self.number,
            "title": self.title,
            "when": list(self.when),
            "source": self.source,
            "version": self.version,
            "label": self.label(),
        }


def _version(document: dict) -> str:
    return hashlib.sha256(
        json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _entry_rule(key: str, written, index: int | None = None, count: int = 0) -> PolicyRule:
    rule = {"action": written} if isinstance(written, str) else dict(written)
    when = rule.pop("when", None)
    rule.setdefault("action", "approve")
    return PolicyRule(
        entry=key,
        rule=rule,
        version=_version({"entry": key, "rule": written}),
        index=index,
        count=count,
        when=tuple(when) if isinstance(when, list) else (),
    )


def _rule_holds(rule, arguments) -> bool:
    if not isinstance(rule, dict):
        return False
    if "when" not in rule:
        return True
    when = rule["when"]
    # A ``when`` that is not a list of conditions (written around the checks) never holds.
    return (
        isinstance(when, list)
        and all(isinstance(c, dict) for c in when)
        and conditions_hold(when, arguments)
    )


def _entry_keys(agent, server: str, tool: str) -> tuple[str, ...]:
    """The keys an entry for ``server/tool`` is written under, the most specific first; a
    gate's policy also has a default entry (``*``) for the tools no other entry names."""
    if getattr(agent, "is_gate", False):
        return (f"{server}/{tool}", server, GATE_DEFAULT_ENTRY)
    return (f"{server}/{tool}", server)


def policy_entry(agent, server: str, tool: str) -> tuple[str, Any]:
    """(key, entry as written) of the tool's most specific entry: ``server/tool``, then
    ``server`` (then a gate's ``*``); ("", None) when the policy has none."""
    policy = agent.tool_policy or {}
    for key in _entry_keys(agent, server, tool):
        if key in policy:
            return key, policy[key]
    return "", None


def policy_rule_for(
    agent, server: str, tool: str, arguments: Any, *, shadow: bool = False
) -> PolicyRule:
    """The entry and rule of ``agent``'s tool policy that hold this call of ``server/tool``
    with these arguments (see the module); ``shadow``: with its ``mode: shadow`` rules too."""
    found = policy_rule_place(agent, server, tool, arguments, shadow=shadow)
    if found is None:
        return unwritten_rule(agent, server, tool)
    key, written, index = found
    if index is None:
        return _entry_rule(key, written)
    return _entry_rule(key, written[index], index, len(written))


def is_shadow(rule) -> bool:
    """A rule (or entry) written ``mode: shadow``: tried, recorded, never enforced."""
    return isinstance(rule, dict) and rule.get("mode") == "shadow"


def policy_rule_place(
    agent, server: str, tool: str, arguments: Any, *, shadow: bool = False
) -> tuple[str, Any, int | None] | None:
    """Where the rule that holds this call is written: (entry key, the entry as written, the
    rule's index in it, None when the entry is no list), or None when no entry holds it (see
    the module). What policy_rule_for reads; a reader of many calls (a policy's replay)
    keeps one PolicyRule per place instead of making one per call.

    A rule or entry written ``mode: shadow`` is passed over (as if it were not written)
    unless ``shadow``: the turn enforces the policy without them and records what the policy
    with them would have done (runtime.turn.calls)."""
    policy = agent.tool_policy or {}
    for key in _entry_keys(agent, server, tool):
        if key not in policy:
            continue
        written = policy[key]
        if not isinstance(written, list):
            if isinstance(written, str | dict) and (shadow or not is_shadow(written)):
                return key, written, None
            continue
        for index, rule in enumerate(written):
            if (shadow or not is_shadow(rule)) and _rule_holds(rule, arguments):
                return key, written, index
        # No rule holds: as if the entry were not written (docs/how-to/policy.md).
    return None


def unwritten_rule(agent, server: str, tool: str) -> PolicyRule:
    """The rule of a call no entry holds: the tenant's annotation default, else approve."""
    return annotation_rule(agent, server, tool) or PolicyRule(
        entry="",
        rule={"action": "approve"},
        version=_version({"entry": "", "rule": "approve"}),
        source="default",
    )


# --- tool annotations --------------------------------------------------------------------


def hint_kind(annotations) -> str:
    """What a tool's MCP annotations say it does: read_only, additive, destructive, unknown.

    MCP: ``destructiveHint`` is meaningful only when the tool is not read-only, and defaults
    to true then, so ``readOnlyHint: false`` alone is destructive."""
    hints = annotations if isinstance(annotations, dict) else {}
    read_only, destructive = hints.get("readOnlyHint"), hints.get("destructiveHint")
    if read_only is True:
        return "read_only"
    if destructive is False:
        return "additive"
    if destructive is True or read_only is False:
        return "destructive"
    return "unknown"


def hint_defaults(tenant_id: int) -> dict[str, str]:
    """The tenant's default decision per annotation kind (AnnotationPolicy, else the defaults)."""
    row = AnnotationPolicy.objects.filter(tenant_id=tenant_id).first()
    if row is None:
        return dict(HINT_DEFAULTS)
    return {kind: row.action_for(kind) for kind in HINT_KINDS}


def _hint_cache(agent) -> dict:
    # Kept on the agent as loaded for one turn or one decision: a call's policy is read a few
    # times (holding it, the rules, the page), its tool server's row and the defaults once.
    cache = agent.__dict__.get("_countersign_hint_rules")
    if cache is None:
        cache = agent.__dict__["_countersign_hint_rules"] = {}
    return cache


def annotation_rule(agent, server: str, tool: str) -> PolicyRule | None:
    """The tenant's annotation default for a tool of its own tool server that no entry names,
    or None (a demo server, a server or tool not found)."""
    if server in RESERVED_SERVER_NAMES or getattr(agent, "tenant_id", None) is None:
        return None
    if getattr(agent, "is_gate", False):
        return None  # a gate's tools are its callers', not the tenant's tool servers'.
    cache = _hint_cache(agent)
    if (server, tool) in cache:
        return cache[server, tool]
    tools = (
        ServerRow.objects.filter(tenant_id=agent.tenant_id, name=server, active=True)
        .values_list("tools", flat=True)
        .first()
    )
    found = next((t for t in tools or () if isinstance(t, dict) and t.get("name") == tool), None)
    rule = None
    if found is not None:
        kind = hint_kind(found.get("annotations"))
        action = hint_defaults(agent.tenant_id)[kind]
        rule = PolicyRule(
            entry="",
            rule={"action": action},
            version=_version({"entry": "", "annotations": kind, "rule": action}),
            source="annotations",
            hint=kind,
        )
    cache[server, tool] = rule
    return rule
