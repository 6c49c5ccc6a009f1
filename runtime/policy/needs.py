"""Who must approve, as data: an approval's stages as it opened, what it needs now
(``Needs``: the stricter of what it opened with and what the policy says today), and the
binding an approval records (the rule's version and the arguments' hash)."""

import hashlib
from dataclasses import dataclass

from runtime.decisions.decision_models import Interaction
from runtime.policy.approver_syntax import CALLER, DEFAULT_APPROVERS, GROUP_PREFIX
from runtime.policy.lookup import Policy
from runtime.policy.rules import PolicyRule, Stage


def opened_stages(interaction: Interaction) -> tuple[Stage, ...]:
    """The stages the approval opened with (or was tightened to since, by an approval it
    recorded): one, its approvers and number, unless its policy rule said ``stages``."""
    written = (interaction.request or {}).get("stages")
    if isinstance(written, list) and written:
        return tuple(Stage.of(stage) for stage in written)
    return (Stage(tuple(interaction.approvers or ()), interaction.approvals_required),)


def stage_at(stages, approved: int) -> int:
    """The index of the stage the next approval counts in, after ``approved`` approvals."""
    total = 0
    for index, stage in enumerate(stages):
        total += stage.required
        if approved < total:
            return index
    return len(stages) - 1


def approvers_text(approvers) -> str:
    """``["admin", "group:sre"]`` as people read it: "admins or members of group sre"."""
    words = []
    for value in approvers:
        if value == CALLER:
            words.append("the caller (in band)")
        elif value.startswith(GROUP_PREFIX):
            words.append(f"members of group {value[len(GROUP_PREFIX) :]}")
        else:
            words.append(f"{value}s")
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


@dataclass(frozen=True)
class Needs:
    """What an open approval needs now: the stricter of what it opened
    with (recorded on the interaction) and what the agent's policy says today, for the call's
    arguments (the rule that holds it, runtime.policy.rules). A tightened policy reaches
    open approvals; a loosened one never asks less than the approval showed.

    An approval is decided in stages, in order (one stage unless the rule says ``stages``):
    a decider must be allowed by both lists of approvers of the current stage (each with what
    escalation added); each stage's number of people is the larger; ``required`` is the
    number of people in all. The call is high-risk when either says so; the caller may
    answer in band only when both let it; ``bulk`` and ``editable`` are the policy's now.
    ``approved`` are the approvals that still count (they approved what ``binds`` says).
    """

    opened: tuple[str, ...]
    current: tuple[str, ...]
    required: int
    high_risk: bool
    caller_may: bool
    bulk: bool
    editable: bool
    server: str = ""
    tool: str = ""
    # The policy's action now: a tool it now denies is never approved (only denied).
    action: str = "approve"
    # The stages, each as stricter as above (``approvers`` the list to show), and the index
    # of the one being decided.
    stages: tuple[Stage, ...] = ()
    stage: int = 0
    approved: tuple[dict, ...] = ()
    binds: str = ""
    # The rule of the policy that holds the call now, and the one it opened under (as stored).
    rule: PolicyRule | None = None
    opened_rule: dict | None = None
    # What the policy says of the call now, as read once for the decision (its rule, trust
    # keys, stages): what the rest of the decision asks of the policy, it asks of this.
    policy: Policy | None = None

    @property
    def approvers(self) -> tuple[str, ...]:
        """The approvers to show: one list when one holds the other, else both in turn."""
        opened, current = set(self.opened), set(self.current)
        if opened <= current:
            return self.opened
        if current <= opened:
            return self.current
        return self.opened

    @property
    def named(self) -> bool:
        """Someone narrowed who decides (not just admins and operators, the default)."""
        return set(self.opened) != set(DEFAULT_APPROVERS) or set(self.current) != set(
            DEFAULT_APPROVERS
        )

    @property
    def staged(self) -> bool:
        return len(self.stages) > 1

    @property
    def stage_required(self) -> int:
        return self.stages[self.stage].required if self.stages else self.required

    def stage_text(self) -> str:
        """ "stage 1 of 2: operators" for an approval in stages; "" otherwise."""
        if not self.staged:
            return ""
        stage = self.stages[self.stage]
        who = approvers_text(self.approvers)
        title = f" ({stage.title})" if stage.title else ""
        return f"stage {self.stage + 1} of {len(self.stages)}{title}: {who}"


def stricter_stages(opened, current) -> tuple[tuple[Stage, Stage], ...]:
    """Each stage as it opened and as the policy says now, paired: where one list has more
    stages, its extra stages stand as they are."""
    pairs = []
    for index in range(max(len(opened), len(current))):
        was = opened[index] if index < len(opened) else current[index]
        now = current[index] if index < len(current) else opened[index]
        pairs.append((was, now))
    return tuple(pairs)


def approvers_shown(opened: tuple[str, ...], current: tuple[str, ...]) -> tuple[str, ...]:
    # As Needs.approvers: the list that holds the other, else the one the approval opened with.
    if set(opened) <= set(current):
        return opened
    if set(current) <= set(opened):
        return current
    return opened


def approval_binding(*, version: str, arguments_hash: str) -> str:
    """What an approval of a held call approves: the SHA-256 of the version of the policy
    rule that holds the call (runtime.policy.rules: the tool's own, not the whole
    policy's) and the call's arguments hash. Approvals count together only when they
    approved the same thing."""
    return hashlib.sha256(f"{version}:{arguments_hash}".encode()).hexdigest()
