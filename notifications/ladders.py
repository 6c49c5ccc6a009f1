"""Ladders as tenant admins set them in Django admin ("Ladders"): the steps of
runtime.policy.ladders (sentences such as ``remind after 15m`` or mappings such as
``{"after": "15m", "action": "remind"}``), without an expire step: expiry is the agent's."""

from runtime.policy.ladders import ROLES, LadderError, duration_seconds, steps_parse, steps_stored

__all__ = ["ROLES", "duration_seconds", "steps_clean", "steps_stored"]


def steps_clean(steps) -> list[dict]:
    """Check an admin ladder's steps; return them parsed (with ``seconds``), in time order.

    Raises ValueError saying which step is wrong and why."""
    try:
        return steps_parse(steps, expire=False)
    except LadderError as exc:
        if not exc.path:
            raise ValueError(exc.message) from None
        where = f"step {exc.path[0] + 1}"
        field = " ".join(str(p) for p in exc.path[1:] if p != "after")
        message = f"{where}: {field} {exc.message}" if field else f"{where}: {exc.message}"
        raise ValueError(message) from None


def rule_ladder(kind: str, request) -> list | None:
    """The steps of the policy rule's own ladder an approval opened with (its ``request``,
    runtime.decisions.approval_groups.approval_request), or None."""
    steps = (request or {}).get("ladder") if kind == "approval" else None
    return steps if isinstance(steps, list) and steps else None
