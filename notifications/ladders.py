"""Ladder steps as admins write them: ``{"after": "15m", "action": "remind"}``."""

import re

ACTIONS = ("remind", "escalate")
ROLES = ("admin", "operator", "viewer")
WIDEN_ROLES = ("admin", "operator")  # viewers never decide
_DURATION = re.compile(r"^(\d{1,6})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int:
    """ "15m" -> 900; raise ValueError saying what is wrong."""
    match = _DURATION.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 30s, 15m, 1h or 2d")
    return int(match.group(1)) * _UNIT[match.group(2)]


def steps_clean(steps) -> list[dict]:
    """Check a ladder's steps; return them with ``seconds`` added, in order of time."""
    if not isinstance(steps, list) or not steps:
        raise ValueError("a ladder is a non-empty list of steps")
    if len(steps) > 10:
        raise ValueError("a ladder has at most 10 steps")
    cleaned = []
    for number, step in enumerate(steps, start=1):
        if not isinstance(step, dict):
            raise ValueError(f"step {number} is not an object")
        unknown = set(step) - {"after", "action", "roles", "seconds", "widen_to"}
        if unknown:
            raise ValueError(f"step {number} has unknown fields: {', '.join(sorted(unknown))}")
        seconds = duration_seconds(step.get("after", ""))
        action = step.get("action")
        if action not in ACTIONS:
            raise ValueError(f"step {number}: action must be one of {', '.join(ACTIONS)}")
        roles = step.get("roles", ["admin"] if action == "escalate" else [])
        if not isinstance(roles, list) or any(r not in ROLES for r in roles):
            raise ValueError(f"step {number}: roles must be a list of {', '.join(ROLES)}")
        # An escalation may widen who may decide an approval to these roles (runtime.approvers).
        widen_to = step.get("widen_to", [])
        if isinstance(widen_to, str):
            widen_to = [widen_to]
        if not isinstance(widen_to, list) or any(r not in WIDEN_ROLES for r in widen_to):
            raise ValueError(f"step {number}: widen_to must be a list of {', '.join(WIDEN_ROLES)}")
        if widen_to and action != "escalate":
            raise ValueError(f"step {number}: widen_to is for escalate steps only")
        clean = {"after": step["after"], "action": action, "roles": roles, "seconds": seconds}
        if widen_to:
            clean["widen_to"] = widen_to
        cleaned.append(clean)
    if [s["seconds"] for s in cleaned] != sorted(s["seconds"] for s in cleaned):
        raise ValueError("steps must come in order of time")
    return cleaned
