"""What a tool policy's JSON Schema (runtime.agents.agent_schema.AGENT_SCHEMA) cannot say about
its entries: approvers, required and stages, deciders with approvers, a timeout's duration, a
rule's ladder, a conditional entry's conditions and the order of its rules, and conditions on
fields the tool's declared schema does not have. AGENT.md's load and Django admin's policy
editor both check with these (runtime.agents.agent_schema.policy_problems), with field paths
inside the policy; the load of AGENT.md into a tenant and Django admin also check conditions
against the schemas the tenant's tool servers' discovery found."""

from runtime.policy.approver_syntax import approvers_problem
from runtime.policy.conditions import (
    MAX_CONDITIONS,
    OPS,
    condition_field_problem,
    conditions_shape_problem,
    schema_fields,
)
from runtime.policy.ladders import (
    LadderError,
    duration_seconds,
    expiry_outcome,
    rule_deadline_steps,
    steps_parse,
)
from runtime.policy.lookup import timeout_seconds
from runtime.policy.title_syntax import impact_problem, redact_problem, title_problem

# A rule's ``when``: the shape of its conditions (conditions_shape_problem checks the rest).
WHEN_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_CONDITIONS,
    "x-message": f"must be a list of 1 to {MAX_CONDITIONS} conditions {{field, op, value}}",
    "items": {
        "type": "object",
        "required": ["field", "op", "value"],
        "additionalProperties": False,
        "x-message": "must be a condition {field, op, value}",
        "properties": {
            "field": {"type": "string", "minLength": 1, "x-message": "must be a field's path"},
            "op": {"enum": list(OPS)},
            "value": {},
        },
    },
}


def _entry_problems(rule: dict) -> list[tuple[list, str]]:
    """What the schema cannot say about one entry or rule: approvers, required and stages,
    deciders with approvers, a timeout's duration, a rule's ladder, a title's and an impact's
    templates and redact's names."""
    problems = []
    approvers = approvers_problem(rule)
    if approvers:
        # "stages.0.approvers" as a path: indexes as numbers, so the file's line is found.
        path = [int(part) if part.isdigit() else part for part in approvers[0].split(".")]
        problems.append((path, approvers[1]))
    if rule.get("deciders") == "caller" and rule.get("approvers"):
        problems.append((["deciders"], "give either deciders: caller or approvers"))
    if "stages" in rule and rule.get("action") != "approve":
        problems.append((["stages"], "stages are for action: approve"))
    if "timeout" in rule:
        try:
            timeout_seconds(rule["timeout"])
        except ValueError as exc:
            problems.append((["timeout"], str(exc)))
    if "ladder" in rule:
        try:
            steps_parse(rule["ladder"])
        except LadderError as exc:
            problems.append((["ladder", *exc.path], exc.message))
    problems += _deadline_problems(rule)
    for name, check in (
        ("title", title_problem),
        ("impact", impact_problem),
        ("redact", redact_problem),
    ):
        problem = check(rule[name]) if name in rule else None
        if problem:
            problems.append(([name], problem))
    return problems


def _deadline_problems(rule: dict) -> list[tuple[list, str]]:
    """A rule's ``expires``, ``warn`` and ``on_expiry``: durations, an outcome, ``approve``
    only with ``risk: low``, and no second deadline beside its ladder's expire step."""
    keys = [k for k in ("expires", "warn", "on_expiry") if k in rule]
    if not keys:
        return []
    if rule.get("action", "approve") != "approve":
        return [([keys[0]], "a deadline is for action: approve")]
    problems: list[tuple[list, str]] = []
    if "expires" in rule:
        try:
            duration_seconds(rule["expires"])
        except ValueError as exc:
            problems.append((["expires"], str(exc)))
    warn = rule.get("warn")
    for index, value in enumerate(warn if isinstance(warn, list) else [warn] if warn else []):
        try:
            duration_seconds(value)
        except ValueError as exc:
            problems.append((["warn", index] if isinstance(warn, list) else ["warn"], str(exc)))
    if "on_expiry" in rule:
        try:
            outcome = expiry_outcome(rule["on_expiry"])
        except ValueError as exc:
            problems.append((["on_expiry"], str(exc)))
        else:
            if outcome["action"] == "approve" and rule.get("risk") != "low":
                problems.append(
                    (["on_expiry"], "approve on expiry only where the rule sets risk: low")
                )
    ladder = rule.get("ladder")
    if "expires" in rule and isinstance(ladder, list):
        try:
            if any(step["action"] == "expire" for step in steps_parse(ladder)):
                problems.append((["expires"], "give either expires or an expire step"))
        except LadderError:
            pass  # said above
    if not problems:
        try:
            steps_parse([*(ladder if isinstance(ladder, list) else []), *rule_deadline_steps(rule)])
        except LadderError as exc:
            problems.append(([keys[0]], exc.message))
    return problems


def _rules_problems(rules: list) -> list[tuple[list, str]]:
    """A conditional entry's rules: each rule's keys and conditions, and their order."""
    problems = []
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue  # the schema said so
        problems += [([index, *path], message) for path, message in _entry_problems(rule)]
        if "when" in rule:
            problem = conditions_shape_problem(rule["when"])
            if problem:
                problems.append(([index, "when", *problem[0]], problem[1]))
        elif index < len(rules) - 1:
            problems.append(
                (
                    [index],
                    "a rule without when holds every call: the rules after it would never be "
                    "used (put it last, as the default)",
                )
            )
    return problems


def policy_rule_problems(policy: dict) -> list[tuple[list, str]]:
    """What the schema cannot say about a policy's entries (see _entry_problems), and of a
    conditional entry's rules their conditions and order."""
    problems = []
    for key, entry in policy.items():
        if isinstance(entry, dict):
            # The schema refuses an entry's unknown keys; these two it lets through, since
            # they would be read as if the entry were conditional, and it is not.
            if "when" in entry:
                problems.append(
                    (
                        [key, "when"],
                        "conditions are for the rules of a list: write the entry "
                        "as a list of rules, the last without when",
                    )
                )
            if "ladder" in entry:
                problems.append(
                    (
                        [key, "ladder"],
                        "a tool's ladder goes under ladder.tools (or in a rule "
                        "of a conditional entry)",
                    )
                )
            problems += [([key, *path], message) for path, message in _entry_problems(entry)]
        elif isinstance(entry, list):
            problems += [([key, *path], message) for path, message in _rules_problems(entry)]
    return problems


def policy_tools_problems(
    policy: dict, tools: list, discovered: dict[str, list] | None = None
) -> list[tuple[list, str]]:
    """Conditions of a ``server/tool`` entry on fields its tool's schema does not have, or
    with an op or value its field cannot take: such a rule would never hold (a typo in
    ``when`` letting production through to the default). The schema is the one AGENT.md
    declares for the tool, else (``discovered``: a tenant's tool servers' cached tools, by
    server name) the one the server's last discovery found, as runtime.tools.catalog.tool_spec
    reads it for a call. A tool with neither (a server not yet refreshed) is not checked."""
    problems = []
    for key, entry in (policy or {}).items():
        if not isinstance(entry, list) or "/" not in key:
            continue
        server, _, name = key.partition("/")
        fields = schema_fields(tool_input_schema(server, name, tools, discovered))
        if not fields:
            continue
        for index, rule in enumerate(entry):
            when = rule.get("when") if isinstance(rule, dict) else None
            for number, condition in enumerate(when if isinstance(when, list) else []):
                problem = condition_field_problem(condition, fields)
                if problem:
                    problems.append(([key, index, "when", number, *problem[0]], problem[1]))
    return problems


def tool_input_schema(server: str, name: str, tools: list, discovered: dict | None) -> dict | None:
    """The schema of ``server/name`` that a call of it is checked against: the one AGENT.md
    declares (``{server, tool, schema}``, or ``{server, schema}`` for all its tools), else
    the discovered tool's ``inputSchema`` when the agent offers the tool."""
    declared = [
        spec
        for spec in tools or []
        if isinstance(spec, dict)
        and spec.get("server") == server
        and spec.get("tool") in (name, None)
    ]
    if not declared:
        return None
    exact = next((spec for spec in declared if spec.get("tool") == name), declared[0])
    if isinstance(exact.get("schema"), dict):
        return exact["schema"]
    found = next(
        (
            tool
            for tool in (discovered or {}).get(server) or ()
            if isinstance(tool, dict) and tool.get("name") == name
        ),
        None,
    )
    schema = found.get("inputSchema") if found else None
    return schema if isinstance(schema, dict) else None
