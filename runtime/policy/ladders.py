"""Reminder ladders: what happens to an open interaction while nobody decides it.

A ladder is a list of steps, each counted from when the interaction opened. A step is
written as a sentence (AGENT.md, and Django admin's "Ladders" too) or as a mapping:

    remind after 15m                    {after: 15m, action: remind}
    escalate to admins after 1h         {after: 1h, action: escalate, roles: [admin]}
    escalate to operators and admins after 2h, widen to admins
                                        {..., widen_to: admin}
    expire after 24h                    {after: 24h, action: expire}
    expire after 24h, then escalate     {after: 24h, action: expire, on_expiry: escalate}
    warn 30m before expiry              {before: 30m, action: warn}

Every parsed step has the same keys: ``after`` (as written; "" for a warning), ``seconds``
(after the opening; for a warning, before the deadline), ``action`` (remind, escalate,
expire, warn), ``roles`` (whom an escalation reaches; empty otherwise), ``widen_to`` (the
role an escalation lets decide too, or None), ``before`` (a warning's, as written; "" for
the others) and ``on_expiry`` (an expire step's outcome, ``expiry_outcome``, or None: deny).
``widen_to`` is carried for the approvers' rules (runtime.decisions.approvers): nothing here
acts on it.

The notifications app takes the remind, escalate and warn steps (beat; a warning counts
back from the deadline as it stands, so an extended deadline warns again); the expire step
is read when the interaction opens, so that its expiry is exact from the start
(``expiry_seconds``), and its outcome with it (``expiry_outcome_of``). A policy rule's
``expires``, ``warn`` and ``on_expiry`` are these same steps (``rule_deadline_steps``).
It lives in the core, below runtime.agents.agentfile and notifications, which both parse with it.
"""

import logging
import re

logger = logging.getLogger(__name__)

ACTIONS = ("remind", "escalate", "expire", "warn")
# What becomes of an item when its deadline passes (an expire step's ``on_expiry``).
OUTCOMES = ("deny", "escalate", "approve")
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
    r"(?:\s*,\s*widen\s+to\s+(?P<widen>\S+))?"
    r"(?:\s*,\s*then\s+(?P<outcome>\S+))?$",
    re.IGNORECASE,
)
_WARNING = re.compile(r"^warn\s+(?P<before>\S+)\s+before\s+expiry$", re.IGNORECASE)
STEP_FIELDS = ("after", "action", "roles", "widen_to", "before", "on_expiry")


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
    warning = _WARNING.match(" ".join(text.split()))
    if warning:
        return {"before": warning["before"], "action": "warn"}
    match = _SENTENCE.match(" ".join(text.split()))
    if not match:
        raise LadderError(
            [],
            f"{text!r} is not a step such as 'remind after 15m', "
            "'escalate to admins after 1h', 'expire after 24h' or 'warn 30m before expiry'",
        )
    step: dict = {"after": match["after"]}
    if match["outcome"]:
        if not match["expire"]:
            raise LadderError([], "only an expire step has an outcome (then deny, ...)")
        step["on_expiry"] = match["outcome"].lower()
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
    action = step.get("action")
    if action not in ACTIONS:
        raise LadderError(["action"], f"must be one of {', '.join(ACTIONS)}")
    if action == "warn":
        return _warning_parse(step)
    if step.get("before"):
        raise LadderError(["before"], "only a warning counts back from the deadline")
    try:
        seconds = duration_seconds(step.get("after", ""))
    except ValueError as exc:
        raise LadderError(["after"], str(exc)) from None
    outcome = step.get("on_expiry")
    if outcome is not None:
        if action != "expire":
            raise LadderError(["on_expiry"], "only an expire step has an outcome")
        try:
            outcome = expiry_outcome(outcome)
        except ValueError as exc:
            raise LadderError(["on_expiry"], str(exc)) from None
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
        "before": "",
        "on_expiry": outcome,
    }


def _warning_parse(step: dict) -> dict:
    """A warning: ``before`` the deadline, and nothing else."""
    extra = [k for k in ("after", "roles", "widen_to", "on_expiry") if step.get(k)]
    if extra:
        raise LadderError([extra[0]], "a warning has only before (warn 30m before expiry)")
    try:
        seconds = duration_seconds(step.get("before", ""))
    except ValueError as exc:
        raise LadderError(["before"], str(exc)) from None
    return {
        "after": "",
        "seconds": seconds,
        "action": "warn",
        "roles": [],
        "widen_to": None,
        "before": str(step["before"]).strip(),
        "on_expiry": None,
    }


def expiry_outcome(value) -> dict:
    """``on_expiry`` as written (``deny``, ``escalate``, ``approve``, or ``{action: escalate,
    to: [roles], expires: 10m}``) as ``{action, to, expires}``; raise ValueError saying what
    is wrong. An escalation reaches admins unless it says ``to``, with a new deadline as long
    as the first unless it says ``expires``."""
    if isinstance(value, str):
        value = {"action": value}
    if not isinstance(value, dict):
        raise ValueError("must be deny, escalate, approve or {action: escalate, to, expires}")
    unknown = set(value) - {"action", "to", "expires"}
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
    action = str(value.get("action", "")).strip().lower()
    if action not in OUTCOMES:
        raise ValueError(f"must be one of {', '.join(OUTCOMES)}")
    outcome: dict = {"action": action}
    if action != "escalate" and ("to" in value or "expires" in value):
        raise ValueError("only escalate has to and expires")
    if action == "escalate":
        to = value.get("to", ["admin"])
        to = [to] if isinstance(to, str) else to
        try:
            roles = [_role(str(r), allowed=WIDEN_ROLES) for r in to or ()]
        except ValueError as exc:
            raise ValueError(f"to: {exc}") from None
        if not roles:
            raise ValueError("to: an escalation reaches at least one role")
        outcome["to"] = list(dict.fromkeys(roles))
        if value.get("expires") is not None:
            try:
                duration_seconds(value["expires"])
            except ValueError as exc:
                raise ValueError(f"expires: {exc}") from None
            outcome["expires"] = str(value["expires"]).strip()
    return outcome


def rule_deadline_steps(rule: dict) -> list:
    """A policy rule's ``warn`` and ``expires`` (with ``on_expiry``) as ladder steps, the
    same as ``warn 30m before expiry`` and ``expire after 2h, then escalate`` in its ladder;
    [] when it sets neither. ``on_expiry`` alone is kept on the approval as it opens
    (``expiry_outcome_of``) and applies to whichever deadline it gets."""
    warn = rule.get("warn")
    warnings = [] if warn is None else warn if isinstance(warn, list) else [warn]
    steps: list = [{"before": str(w), "action": "warn"} for w in warnings]
    if rule.get("expires") is not None:
        expire: dict = {"after": str(rule["expires"]), "action": "expire"}
        if rule.get("on_expiry") is not None:
            expire["on_expiry"] = rule["on_expiry"]
        steps.append(expire)
    return steps


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
    timed = [(i, step) for i, step in enumerate(parsed) if step["action"] != "warn"]
    for (_, before), (index, step) in zip(timed, timed[1:], strict=False):
        if step["seconds"] < before["seconds"]:
            raise LadderError([index], "steps must come in order of time")
    for index, step in timed:
        if step["action"] == "expire":
            if not expire:
                raise LadderError(
                    [index, "action"],
                    "expiry is the agent's (its AGENT.md ladder or interactionTtlSeconds), "
                    "not a step here",
                )
            if index != timed[-1][0]:
                raise LadderError([index + 1], "no step can follow expire")
    return parsed


def steps_stored(parsed: list[dict]) -> list[dict]:
    """Parsed steps as stored (JSON): after, action, roles, and widen_to when there is one
    (the shape Django admin's ladders have always had)."""
    return [
        {
            k: v
            for k, v in step.items()
            if k != "seconds" and (k not in ("widen_to", "before", "on_expiry", "after") or v)
        }
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


# The expiry of an item when nothing else sets one (no rule, no ladder, no agent TTL, no
# tenant default).
BUILT_IN_EXPIRY_SECONDS = 24 * 3600


def expiry_seconds(agent, *, tool: str = "", steps: list | None = None) -> int:
    """How long an interaction of this agent (and tool) stays open (``expiry_of``)."""
    return expiry_of(agent, tool=tool, steps=steps)[0]


def expiry_of(agent, *, tool: str = "", steps: list | None = None) -> tuple[int, dict | None]:
    """(How long an interaction of this agent (and tool) stays open, what then becomes of
    it: ``expiry_outcome``, None to deny). The first that sets one wins:

    1. the policy rule that held the call (``steps``: its ``expires``, or its ladder's expire
       step; runtime.policy.rules);
    2. the agent: the expire step of its AGENT.md ladder for the tool, its server, the agent,
       else its ``interactionTtlSeconds`` when it has one (None: not set, whatever made it);
    3. the tenant's default (``Tenant.default_expiry``, the expire step of the ladder its
       admin sets on the tenant's settings);
    4. the built-in 24 hours (BUILT_IN_EXPIRY_SECONDS), denied at expiry."""
    ladder = getattr(agent, "ladder", None) or {}
    tools = ladder.get("tools") or {}
    candidates: list = [steps] if steps else []
    candidates += [tools.get(tool), tools.get(tool.partition("/")[0])] if tool else []
    for steps in [*candidates, ladder.get("steps")]:
        if not steps:
            continue
        try:
            parsed = steps_parse(steps)
        except LadderError:
            # Stored around its checks (load_agents and the admin form parse it): a pause
            # never fails on it; the TTL (else the tenant's default) holds, the log says why.
            logger.warning("agent %s: its ladder cannot be read; expiry from the TTL", agent.pk)
            break
        expire = [step for step in parsed if step["action"] == "expire"]
        if expire:
            return expire[-1]["seconds"], expire[-1]["on_expiry"]
    ttl = getattr(agent, "interaction_ttl_seconds", None)
    if ttl is not None:
        return ttl, None
    tenant_step = getattr(getattr(agent, "tenant", None), "default_expiry", None)
    if tenant_step:
        try:
            step = step_parse(tenant_step)
        except LadderError:
            logger.warning("tenant of agent %s: its default expiry cannot be read", agent.pk)
        else:
            if step["action"] == "expire":
                return step["seconds"], step["on_expiry"]
    return BUILT_IN_EXPIRY_SECONDS, None


def step_sentence(step: dict) -> str:
    """A stored step (steps_stored) as the sentence that parses back to it: "escalate to
    operators and admins after 1h, widen to admins", "warn 30m before expiry", "expire after
    24h, then escalate". An outcome a sentence cannot say (an escalation's own ``to`` or
    ``expires``) is left out: such steps are written as mappings (AGENT.md)."""
    action = step.get("action")
    if action == "warn":
        return f"warn {step.get('before', '')} before expiry"
    after = step.get("after", "")
    if action == "remind":
        return f"remind after {after}"
    if action == "expire":
        text = f"expire after {after}"
        outcome = step.get("on_expiry")
        if isinstance(outcome, dict) and outcome.get("action"):
            text += f", then {outcome['action']}"
        elif isinstance(outcome, str) and outcome:
            text += f", then {outcome}"
        return text
    roles = " and ".join(f"{role}s" for role in step.get("roles") or ["admin"])
    text = f"escalate to {roles} after {after}"
    if step.get("widen_to"):
        text += f", widen to {step['widen_to']}s"
    return text


def sentence_steps(text: str) -> list[str]:
    """A ladder written as one line, its steps separated by semicolons ("remind after 1h;
    expire after 24h, then deny"), as the list of its step sentences."""
    return [part.strip() for part in re.split(r"[;\n]+", text or "") if part.strip()]
