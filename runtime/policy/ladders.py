"""Reminder ladders: what happens to an open interaction while nobody decides it.

A ladder is a list of steps, each counted from when the interaction opened. A step is
written as a sentence (AGENT.md, and Django admin's "Ladders" too) or as a mapping:

    remind after 15m                    {after: 15m, action: remind}
    escalate to admins after 1h         {after: 1h, action: escalate, roles: [admin]}
    escalate to operators and admins after 2h, widen to admins
                                        {..., widen_to: admin}
    expire after 24h                    {after: 24h, action: expire}

Every parsed step has the same keys: ``after`` (as written), ``seconds``, ``action``
(remind, escalate, expire), ``roles`` (whom an escalation reaches; empty otherwise) and
``widen_to`` (the role an escalation lets decide too, or None). ``widen_to`` is carried for
the approvers' rules (runtime.decisions.approvers): nothing here acts on it.

The notifications app takes the remind and escalate steps (beat); the expire step is read
when the interaction opens, so that its expiry is exact from the start (``expiry_seconds``).
It lives in the core, below runtime.agents.agentfile and notifications, which both parse with it.
"""

import logging
import re

logger = logging.getLogger(__name__)

ACTIONS = ("remind", "escalate", "expire")
ROLES = ("admin", "operator", "viewer")
# Viewers see but never decide: a ladder cannot make them deciders.
WIDEN_ROLES = ("admin", "operator")
MAX_STEPS = 10
# Durations as written elsewhere in the product: 30s, 15m, 1h, 2d.
_DURATION = re.compile(r"^(\d{1,6})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_ROLE_WORDS = {**{r: r for r in ROLES}, **{f"{r}s": r for r in ROLES}}
_SENTENCE = re.compile(
    r"^(?:(?P<remind>remind)|(?P<expire>expire)|escalate\s+to\s+(?P<roles>.+?))"
    r"\s+after\s+(?P<after>\S+)"
    r"(?:\s*,\s*widen\s+to\s+(?P<widen>\S+))?$",
    re.IGNORECASE,
)
STEP_FIELDS = ("after", "action", "roles", "widen_to")


class LadderError(ValueError):
    """A ladder or step that cannot be used; ``path`` leads to the value inside it."""

    def __init__(self, path: list, message: str):
        self.path, self.message = list(path), message
        where = ".".join(map(str, path))
        super().__init__(f"{where}: {message}" if where else message)


def duration_seconds(text) -> int:
    """ "15m" -> 900; raise ValueError saying what is wrong."""
    match = _DURATION.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 30s, 15m, 1h or 2d")
    return int(match.group(1)) * _UNIT[match.group(2)]


def _role(word: str, *, allowed=ROLES) -> str:
    role = _ROLE_WORDS.get(word.strip().lower())
    if role is None or role not in allowed:
        names = ", ".join(f"{r}s" for r in allowed)
        raise ValueError(f"{word.strip()!r} is not a role ({names})")
    return role


def _sentence(text: str) -> dict:
    match = _SENTENCE.match(" ".join(text.split()))
    if not match:
        raise LadderError(
            [],
            f"{text!r} is not a step such as 'remind after 15m', "
            "'escalate to admins after 1h' or 'expire after 24h'",
        )
    step: dict = {"after": match["after"]}
    if match["remind"]:
        step["action"] = "remind"
    elif match["expire"]:
        step["action"] = "expire"
    else:
        step["action"] = "escalate"
        words = re.split(r"\s*,\s*|\s+and\s+", match["roles"].strip())
        try:
            step["roles"] = [_role(w) for w in words if w]
        except ValueError as exc:
            raise LadderError([], str(exc)) from None
    if match["widen"]:
        if step["action"] != "escalate":
            raise LadderError([], "only an escalation widens who may decide")
        try:
            step["widen_to"] = _role(match["widen"], allowed=WIDEN_ROLES)
        except ValueError as exc:
            raise LadderError([], f"widen to: {exc}") from None
    return step


def step_parse(step) -> dict:
    """One step, a sentence or a mapping, as a mapping with every key (see the module)."""
    if isinstance(step, str):
        step = _sentence(step)
    elif not isinstance(step, dict):
        raise LadderError([], "must be a step such as 'remind after 15m' (or a mapping)")
    unknown = set(step) - {*STEP_FIELDS, "seconds"}
    if unknown:
        raise LadderError([], f"unknown fields: {', '.join(sorted(unknown))}")
    try:
        seconds = duration_seconds(step.get("after", ""))
    except ValueError as exc:
        raise LadderError(["after"], str(exc)) from None
    action = step.get("action")
    if action not in ACTIONS:
        raise LadderError(["action"], f"must be one of {', '.join(ACTIONS)}")
    roles = step.get("roles", ["admin"] if action == "escalate" else [])
    if not isinstance(roles, list) or any(r not in ROLES for r in roles):
        raise LadderError(["roles"], f"must be a list of {', '.join(ROLES)}")
    if action != "escalate" and roles:
        raise LadderError(["roles"], "only an escalation reaches roles")
    if action == "escalate" and not roles:
        raise LadderError(["roles"], "an escalation reaches at least one role")
    widen_to = step.get("widen_to")
    if widen_to is not None and (action != "escalate" or widen_to not in WIDEN_ROLES):
        raise LadderError(
            ["widen_to"], f"an escalation may widen to one of {', '.join(WIDEN_ROLES)}"
        )
    return {
        "after": str(step["after"]).strip(),
        "seconds": seconds,
        "action": action,
        "roles": list(dict.fromkeys(roles)),
        "widen_to": widen_to,
    }


def steps_parse(steps, *, expire: bool = True) -> list[dict]:
    """A ladder's steps, parsed and checked as a whole; errors name the step's index.

    ``expire=False``: a ladder that may not carry an expire step (Django admin's: the expiry
    is the agent's, see docs/how-to/ladders.md)."""
    if not isinstance(steps, list) or not steps:
        raise LadderError([], "a ladder is a non-empty list of steps")
    if len(steps) > MAX_STEPS:
        raise LadderError([], f"a ladder has at most {MAX_STEPS} steps")
    parsed = []
    for index, step in enumerate(steps):
        try:
            parsed.append(step_parse(step))
        except LadderError as exc:
            # A sentence has no fields of its own: its errors are the step's.
            inner = [] if isinstance(step, str) else exc.path
            raise LadderError([index, *inner], exc.message) from None
    for index, step in enumerate(parsed):
        if index and step["seconds"] < parsed[index - 1]["seconds"]:
            raise LadderError([index], "steps must come in order of time")
        if step["action"] == "expire":
            if not expire:
                raise LadderError(
                    [index, "action"],
                    "expiry is the agent's (its AGENT.md ladder or interactionTtlSeconds), "
                    "not a step here",
                )
            if index != len(parsed) - 1:
                raise LadderError([index + 1], "no step can follow expire")
    return parsed


def steps_stored(parsed: list[dict]) -> list[dict]:
    """Parsed steps as stored (JSON): after, action, roles, and widen_to when there is one
    (the shape Django admin's ladders have always had)."""
    return [
        {k: v for k, v in step.items() if k != "seconds" and (k != "widen_to" or v)}
        for step in parsed
    ]


def ladder_parse(value) -> dict:
    """An AGENT.md ``ladder``: a list of steps (the agent's), or ``{steps, tools}`` where
    ``tools`` maps "server/tool" or "server" to a list of steps. Returns ``{"steps": [...],
    "tools": {key: [...]}}`` as stored (steps_stored), or raises LadderError with the path."""
    if value is None:
        return {}
    if isinstance(value, list):
        value = {"steps": value}
    if not isinstance(value, dict):
        raise LadderError([], "must be a list of steps, or a mapping with steps and tools")
    unknown = set(value) - {"steps", "tools"}
    if unknown:
        raise LadderError([sorted(unknown)[0]], "unknown field (steps, tools)")
    ladder: dict = {}
    if value.get("steps") is not None:
        try:
            ladder["steps"] = steps_stored(steps_parse(value["steps"]))
        except LadderError as exc:
            raise LadderError(["steps", *exc.path], exc.message) from None
    tools = value.get("tools")
    if tools is not None:
        if not isinstance(tools, dict):
            raise LadderError(["tools"], "must be a mapping of 'server/tool' or 'server' to steps")
        ladder["tools"] = {}
        for key, steps in tools.items():
            if not isinstance(key, str) or not re.fullmatch(r"[^/\s]+(/[^/\s]+)?", key):
                raise LadderError(["tools", key], "must be 'server/tool' or 'server'")
            try:
                ladder["tools"][key] = steps_stored(steps_parse(steps))
            except LadderError as exc:
                raise LadderError(["tools", key, *exc.path], exc.message) from None
    if not ladder:
        raise LadderError([], "has neither steps nor tools")
    return ladder


def expiry_seconds(agent, *, tool: str = "", steps: list | None = None) -> int:
    """How long an interaction of this agent (and tool) stays open: the expire step of its
    most specific ladder that has one (``steps``: the ladder of the policy rule that held
    the call, runtime.policy.rules; then AGENT.md's for the tool, its server, the agent),
    else ``interactionTtlSeconds``."""
    ladder = getattr(agent, "ladder", None) or {}
    tools = ladder.get("tools") or {}
    candidates: list = [steps] if steps else []
    candidates += [tools.get(tool), tools.get(tool.partition("/")[0])] if tool else []
    for steps in [*candidates, ladder.get("steps")]:
        if not steps:
            continue
        try:
            last = steps_parse(steps)[-1]
        except LadderError:
            # Stored around its checks (load_agents and the admin form parse it): a pause
            # never fails on it; the TTL holds and the log says why.
            logger.warning("agent %s: its ladder cannot be read; expiry from the TTL", agent.pk)
            break
        if last["action"] == "expire":
            return last["seconds"]
    return agent.interaction_ttl_seconds
