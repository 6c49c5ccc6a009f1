"""The syntax of a tool policy's ``approvers``, ``required`` and ``stages`` (AGENT.md and admin)."""

import re

ROLES = ("admin", "operator")
CALLER = "caller"
GROUP_PREFIX = "group:"
DEFAULT_APPROVERS = ("admin", "operator")
_GROUP_RE = re.compile(r"^group:[-a-zA-Z0-9_]{1,63}$")
# The most distinct people one approval (or one of its stages) may ask for, and stages.
MAX_REQUIRED = 20
MAX_STAGES = 5
STAGE_KEYS = ("approvers", "required", "title")


def approver_problem(value) -> str | None:
    """Why one entry of ``approvers`` is not one, or None."""
    if not isinstance(value, str):
        return "must be admin, operator, caller or group:<name>"
    if value in ROLES or value == CALLER or _GROUP_RE.match(value):
        return None
    return f"{value!r} is not admin, operator, caller or group:<name>"


def _required_problem(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REQUIRED:
        return f"must be a whole number from 1 to {MAX_REQUIRED}"
    return None


def _approvers_list_problem(approvers) -> tuple[str, str] | None:
    if not isinstance(approvers, list) or not approvers:
        return "approvers", "must be a non-empty list"
    for index, value in enumerate(approvers):
        problem = approver_problem(value)
        if problem:
            return f"approvers.{index}", problem
    return None


def approvers_problem(rule: dict) -> tuple[str, str] | None:
    """(field, message) for what is wrong with a policy entry's approvers, required and
    stages (``field`` is a dotted path inside the entry)."""
    approvers = rule.get("approvers")
    if approvers is not None:
        problem = _approvers_list_problem(approvers)
        if problem:
            return problem
    required = rule.get("required", 1)
    why = _required_problem(required)
    if why:
        return "required", why
    if required > 1 and CALLER in (approvers or ()):
        return "required", f"{required} people must approve: the caller cannot be one of them"
    if "stages" in rule:
        return stages_problem(rule)
    return None


def stages_problem(rule: dict) -> tuple[str, str] | None:
    """(field, message) for what is wrong with an entry's ``stages``: decided in order, each
    by its approvers (roles or groups: people of the organisation, never the caller)."""
    stages = rule["stages"]
    if any(key in rule for key in ("approvers", "required", "deciders")):
        return "stages", "give either stages or approvers, required and deciders"
    if not isinstance(stages, list) or not 1 <= len(stages) <= MAX_STAGES:
        return "stages", f"must be a list of 1 to {MAX_STAGES} stages"
    for index, stage in enumerate(stages):
        where = f"stages.{index}"
        if not isinstance(stage, dict):
            return where, "must be a mapping of approvers and required"
        extra = sorted(set(stage) - set(STAGE_KEYS))
        if extra:
            return f"{where}.{extra[0]}", f"is not a field of a stage ({', '.join(STAGE_KEYS)})"
        if "approvers" not in stage:
            return f"{where}.approvers", "is required"
        problem = _approvers_list_problem(stage["approvers"])
        if problem:
            return f"{where}.{problem[0]}", problem[1]
        if CALLER in stage["approvers"]:
            return (
                f"{where}.approvers",
                "a stage is decided by the organisation's people: not the caller",
            )
        why = _required_problem(stage.get("required", 1))
        if why:
            return f"{where}.required", why
        if "title" in stage and not isinstance(stage["title"], str):
            return f"{where}.title", "must be a string"
    return None
