"""The syntax of a tool policy's ``approvers`` and ``required`` (AGENT.md and admin)."""

import re

ROLES = ("admin", "operator")
CALLER = "caller"
GROUP_PREFIX = "group:"
DEFAULT_APPROVERS = ("admin", "operator")
_GROUP_RE = re.compile(r"^group:[-a-zA-Z0-9_]{1,63}$")


def approver_problem(value) -> str | None:
    """Why one entry of ``approvers`` is not one, or None."""
    if not isinstance(value, str):
        return "must be admin, operator, caller or group:<name>"
    if value in ROLES or value == CALLER or _GROUP_RE.match(value):
        return None
    return f"{value!r} is not admin, operator, caller or group:<name>"


def approvers_problem(rule: dict) -> tuple[str, str] | None:
    """(field, message) for what is wrong with a policy entry's approvers and required."""
    approvers = rule.get("approvers")
    if approvers is not None:
        if not isinstance(approvers, list) or not approvers:
            return "approvers", "must be a non-empty list"
        for index, value in enumerate(approvers):
            problem = approver_problem(value)
            if problem:
                return f"approvers.{index}", problem
    required = rule.get("required", 1)
    if required not in (1, 2) or isinstance(required, bool):
        return "required", "must be 1 or 2"
    if required == 2 and CALLER in (approvers or ()):
        return "required", "two people must approve: the caller cannot be one of them"
    if required == 2 and approvers == [CALLER]:
        return "required", "two people must approve"
    return None
