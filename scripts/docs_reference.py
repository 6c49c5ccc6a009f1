"""Write the parts of the documentation that are made from the code, so that they cannot go
stale: the settings reference and the two `.env` examples (config/env_catalog.py and the
code's own defaults), the `manage.py` commands (their argument parsers), the AGENT.md and
policy keys (the loader's JSON Schema), the metrics (the registered instruments) and the REST
API's operations (its OpenAPI schema).

    python scripts/docs_reference.py          # write every generated file and region
    python scripts/docs_reference.py --check  # write nothing; fail naming what is stale

A page that mixes prose with generated parts holds each part between
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``; only those lines are
rewritten. `make docs` runs this before MkDocs; tests/test_env_catalog.py and
tests/test_docs_reference.py run the check.
"""

import ast
import os
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from config.env_catalog import GROUPS, Setting  # noqa: E402

# Where Countersign's own code reads the environment (tests, benchmarks and migrations aside).
SOURCE_DIRS = (
    "config",
    "tenants",
    "connections",
    "runtime",
    "a2a_endpoint",
    "approvals",
    "notifications",
    "integrations",
    "scripts",
)
SOURCE_FILES = ("gunicorn.conf.py", "manage.py")
READERS = {"env_str", "env_bool", "env_int", "env_list", "env_secret"}
# Read by the code, but no knob of a deployment.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE"}


class NotLiteral:
    """A default the code computes (``not DEBUG``, ``2 * A2A_DB_THREADS``)."""

    def __repr__(self) -> str:
        return "<computed>"


COMPUTED = NotLiteral()


@dataclass(frozen=True)
class Read:
    """One place that reads a variable."""

    name: str
    where: str  # path:line
    reader: str  # env_int, ..., or environ.get
    default: object  # a Python value, None when the reader has none, or COMPUTED


def source_files(root: Path = ROOT) -> list[Path]:
    files = [
        path
        for folder in SOURCE_DIRS
        for path in sorted((root / folder).rglob("*.py"))
        if "migrations" not in path.parts
    ]
    return files + [root / name for name in SOURCE_FILES]


def constant_value(node: ast.AST) -> object:
    """The value of a default written as a constant (``4 * 1024 * 1024`` included)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        values = [constant_value(item) for item in node.elts]
        return COMPUTED if COMPUTED in values else values
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = constant_value(node.operand)
        return -value if isinstance(value, int | float) else COMPUTED
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Add):
        left, right = constant_value(node.left), constant_value(node.right)
        if isinstance(left, int | float) and isinstance(right, int | float):
            return left * right if isinstance(node.op, ast.Mult) else left + right
    return COMPUTED


def environ_call(func: ast.AST) -> str | None:
    """``os.environ.get``, ``environ.get`` (a parameter named so) or ``os.getenv``."""
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    if func.attr == "get" and (
        (isinstance(owner, ast.Name) and owner.id == "environ")
        or (isinstance(owner, ast.Attribute) and owner.attr == "environ")
    ):
        return "environ.get"
    if func.attr == "getenv" and isinstance(owner, ast.Name) and owner.id == "os":
        return "os.getenv"
    return None


def env_reads(root: Path = ROOT) -> list[Read]:
    """Every read of an environment variable by name in the product's code."""
    found = []
    for path in source_files(root):
        where = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Subscript) and (
                isinstance(node.value, ast.Attribute) and node.value.attr == "environ"
            ):
                key = node.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    found.append(Read(key.value, f"{where}:{node.lineno}", "environ[]", None))
                continue
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            reader = func.id if isinstance(func, ast.Name) and func.id in READERS else None
            reader = reader or environ_call(func)
            first = node.args[0]
            if reader is None or not (
                isinstance(first, ast.Constant) and isinstance(first.value, str)
            ):
                continue
            default = constant_value(node.args[1]) if len(node.args) > 1 else None
            found.append(Read(first.value, f"{where}:{node.lineno}", reader, default))
    return [read for read in found if read.name not in NOT_SETTINGS]


def defaults_by_name(reads: list[Read]) -> dict[str, object]:
    """Each variable's default: the one value its readers agree on, else COMPUTED."""
    values: dict[str, list[object]] = {}
    for read in reads:
        values.setdefault(read.name, []).append(read.default)
    out: dict[str, object] = {}
    for name, seen in values.items():
        # No default and an empty one mean the same: unset.
        normal = [None if value in (None, "", []) else value for value in seen]
        firsts = {repr(value) for value in normal}
        out[name] = normal[0] if len(firsts) == 1 and COMPUTED not in normal else COMPUTED
    return out


def secrets_read(reads: list[Read]) -> set[str]:
    """The variables read with env_secret, which also take NAME_FILE."""
    return {read.name for read in reads if read.reader == "env_secret"}


def env_text(value: object) -> str:
    """A default as a line of a .env file writes it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def markdown_default(value: object) -> str:
    text = env_text(value)
    return f"`{text}`" if text else "none"


def setting_default(setting: Setting, defaults: dict[str, object]) -> str:
    if setting.default:
        return setting.default
    return ", ".join(markdown_default(defaults.get(name)) for name in setting.names)


def setting_names(setting: Setting, secrets: set[str]) -> str:
    names = []
    for name in setting.names:
        text = f"`{name}`"
        if name in secrets:
            text += f" (or `{name}_FILE`)"
        names.append(text)
    return ", ".join(names)


def settings_tables(defaults: dict[str, object], secrets: set[str]) -> str:
    parts = []
    for group in GROUPS:
        rows = [
            f"| {setting_names(setting, secrets)} | {setting_default(setting, defaults)} "
            f"| {setting.meaning} |"
            for setting in group.settings
        ]
        parts.append(
            f"## {group.title}\n\n{group.about}\n\n| variable | default | meaning |\n"
            "|---|---|---|\n" + "\n".join(rows)
        )
    return "\n\n".join(parts)


def tracing_table(defaults: dict[str, object], secrets: set[str]) -> str:
    [group] = [group for group in GROUPS if group.title == "Logs, metrics and tracing"]
    rows = [
        f"| {setting_names(setting, secrets)} | {setting_default(setting, defaults)} "
        f"| {setting.meaning} |"
        for setting in group.settings
        if any(name.startswith(("OTEL_", "METRICS_", "PROMETHEUS_")) for name in setting.names)
    ]
    return "| variable | default | meaning |\n|---|---|---|\n" + "\n".join(rows)


# --- the .env examples ------------------------------------------------------------------------


def plain(markdown: str) -> str:
    """A table cell as a comment line says it: links as their text, no backticks."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", markdown)
    return text.replace("`", "")


SETTING_LINE = re.compile(r"^#? ?([A-Z][A-Z0-9_]+)=")


def comment(text: str) -> list[str]:
    """Comment lines, none of which reads as a setting's line (``# NAME=value``)."""
    for width in range(94, 60, -1):
        lines = textwrap.wrap(text, width=width, initial_indent="# ", subsequent_indent="# ")
        if not any(SETTING_LINE.match(line) for line in lines):
            return lines
    raise ValueError(f"cannot wrap {text!r} without a line that reads as a setting")


ENV_EXAMPLE_HEAD = """\
# Countersign's settings for development: `cp .env.example .env`, then uncomment and edit
# what you want to change. As it is, every line is a comment, so a copy changes nothing: you
# get the embedded default (SQLite and Celery's filesystem transport under var/, debug on,
# plain HTTP on 127.0.0.1:8000). Each commented value is the default, or an example where
# the default is computed. The real environment wins over this file; secrets also accept
# NAME_FILE (a path whose content is the value).
#
# For production start from deploy/production.env.example instead. Both files and
# docs/reference/settings.md are written from config/env_catalog.py by
# `make docs` (scripts/docs_reference.py): edit those, not this file."""

PRODUCTION_EXAMPLE_HEAD = """\
# Countersign's settings for production: copy this file to the server (the systemd units of
# deploy/systemd read /etc/countersign/env; compose.yaml reads .env beside it), fill in every
# uncommented line, and keep it readable by the service's user only (it holds secrets).
# Empty uncommented values must be filled in: SECRET_KEY (the processes refuse to start
# without it), CONNECTIONS_ENCRYPTION_KEY (else SECRET_KEY encrypts the stored secrets too),
# and the mail server's account. Make each key with:
#   python3 -c 'import secrets; print(secrets.token_urlsafe(50))'
# Commented lines show the default. Secrets also accept NAME_FILE (a path whose content is
# the value). docs/tutorials/first-deploy.md walks through it; docs/reference/settings.md
# says what each setting does.
#
# Written from config/env_catalog.py by `make docs` (scripts/docs_reference.py): edit that,
# not this file."""


def env_value_line(
    name: str, setting: Setting, defaults: dict[str, object], production: bool
) -> str:
    if production and name in setting.production:
        return f"{name}={setting.production[name]}"
    value = setting.example.get(name)
    if value is None:
        value = env_text(defaults.get(name))
    return f"# {name}={value}"


def env_example(defaults: dict[str, object], secrets: set[str], *, production: bool) -> str:
    lines = [PRODUCTION_EXAMPLE_HEAD if production else ENV_EXAMPLE_HEAD]
    for group in GROUPS:
        lines += ["", f"# --- {group.title} " + "-" * (88 - len(group.title))]
        for setting in group.settings:
            about = plain(setting.meaning)
            if setting.default:
                about += f" (default: {plain(setting.default)})"
            if any(name in secrets for name in setting.names):
                about += " (a secret: NAME_FILE works too)"
            lines += comment(about)
            lines += [env_value_line(name, setting, defaults, production) for name in setting.names]
    return "\n".join(lines) + "\n"


# --- regions of hand-written pages ------------------------------------------------------------


def region_replace(text: str, name: str, body: str) -> str:
    start = f"<!-- generated: {name} (scripts/docs_reference.py; do not edit) -->"
    end = f"<!-- end generated: {name} -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise LookupError(f"no region {name!r}: write {start!r} ... {end!r} where it goes")
    return pattern.sub(lambda _: f"{start}\n\n{body.strip()}\n\n{end}", text, count=1)


# --- manage.py commands (their argument parsers) ----------------------------------------------

PROJECT_APPS = {
    "config",
    "tenants",
    "connections",
    "runtime",
    "a2a_endpoint",
    "approvals",
    "notifications",
    "integrations",
}
# Django's options of every command, left out of each command's table.
COMMON_OPTIONS = {
    "help",
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}


def cell(text: str) -> str:
    """Plain text as one Markdown table cell: one line, no column break, no HTML tag."""
    text = " ".join(str(text).split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def argument_rows(parser) -> list[str]:
    import argparse

    rows = []
    for action in parser._actions:
        if action.dest in COMMON_OPTIONS or isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            takes = action.nargs != 0
            metavar = action.metavar or action.dest.upper()
            form = ", ".join(
                f"`{option} {metavar}`" if takes else f"`{option}`"
                for option in action.option_strings
            )
        else:
            form = f"`{action.metavar or action.dest}`"
        about = cell(action.help or "") if action.help != argparse.SUPPRESS else ""
        if action.choices and not isinstance(action.choices, dict):
            about += f" One of: {', '.join(f'`{c}`' for c in action.choices)}."
        default = action.default
        if action.option_strings and default not in (None, False, "", [], argparse.SUPPRESS):
            about += f" Default: `{default}`."
        if action.required and action.option_strings:
            about += " Required."
        rows.append(f"| {form} | {about.strip()} |")
    return rows


def parser_section(title: str, parser, level: int) -> list[str]:
    import argparse

    lines = [f"{'#' * level} `{title}`", ""]
    if parser.description:
        lines += [cell(parser.description), ""]
    rows = argument_rows(parser)
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not sub.description and helps.get(name):
                    sub.description = helps[name]
                lines += parser_section(f"{title} {name}", sub, level + 1)
    return lines


def commands_page() -> str:
    from django.core.management import get_commands, load_command_class

    lines = []
    for name, app in sorted(get_commands().items()):
        if app not in PROJECT_APPS:
            continue
        command = load_command_class(app, name)
        parser = command.create_parser("manage.py", name)
        if not parser.description:
            parser.description = command.help
        lines += parser_section(f"manage.py {name}", parser, 2)
    return "\n".join(lines)


# --- AGENT.md's keys (the loader's JSON Schema) ------------------------------------------------


def schema_type(schema: dict) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    kinds = schema.get("type")
    if kinds is None:
        return "any"
    kinds = kinds if isinstance(kinds, list) else [kinds]
    words = {"object": "mapping", "array": "list", "integer": "whole number", "null": "empty"}
    return ", ".join(words.get(str(kind), str(kind)) for kind in kinds)


def agent_keys_page() -> str:
    from runtime.agents.agent_schema import AGENT_SCHEMA, POLICY_KEYS
    from runtime.agents.limits import DEFAULT_LIMITS
    from runtime.agents.memory_budget import DEFAULT_MEMORY, MAX_MEMORY
    from runtime.llm.openai_spec import CHAT_PARAMETERS, PARAMETERS, RESPONSES_PARAMETERS
    from runtime.llm.registry import PROVIDERS
    from runtime.policy.approver_syntax import MAX_REQUIRED, MAX_STAGES
    from runtime.policy.conditions import MAX_CONDITIONS, OP_WORDS, OPS
    from runtime.policy.ladders import ACTIONS as LADDER_ACTIONS
    from runtime.policy.ladders import MAX_STEPS, WIDEN_ROLES
    from runtime.policy.ladders import ROLES as LADDER_ROLES

    required = set(AGENT_SCHEMA["required"])
    lines = [
        "## The front matter",
        "",
        "| key | required | value | meaning |",
        "|---|---|---|---|",
    ]
    for key, schema in AGENT_SCHEMA["properties"].items():
        if "description" not in schema:
            raise LookupError(f"AGENT_SCHEMA's {key!r} has no description")
        lines.append(
            f"| `{key}` | {'yes' if key in required else ''} | {schema_type(schema)} "
            f"| {cell(schema['description'])} |"
        )
    lines += [
        "",
        "## A tool's policy entry",
        "",
        "An entry (`policy: {server/tool: ...}`, or `server` for all its tools) is `allow`, "
        "`approve` or `deny`, a mapping of these keys, or a list of rules (each a mapping of "
        "these keys with `when` and `ladder`). Django admin's policy table has a column for "
        "each, in this order, and each rule of a conditional entry a field for each "
        '(docs/how-to/policy.md, "Editing a policy in Django admin").',
        "",
        "| key | column | value | without it | meaning |",
        "|---|---|---|---|---|",
    ]
    for key in POLICY_KEYS:
        default = "none" if key.default is None else f"`{env_text(key.default)}`"
        lines.append(
            f"| `{key.name}` | {key.label} | {schema_type(key.schema)} | {default} "
            f"| {cell(key.help)} |"
        )
    lines += [
        "| `stages` | (a rule's stage rows; JSON view) | list | none | "
        f"1 to {MAX_STAGES} stages, decided in order, "
        "each `{title, approvers, required}`; instead of `approvers`, `required` and "
        "`deciders`. |",
        f"| `when` | (a rule's condition rows) | list | none | 1 to {MAX_CONDITIONS} conditions "
        "`{field, op, value}`, all of which must hold for the rule to decide the call. |",
        "| `ladder` | (a rule's ladder) | list | none | the steps of this rule's approvals "
        "(below). |",
        "",
        f"`required` is 1 to {MAX_REQUIRED}.",
        "",
        "## Conditions (`when`, standing rules)",
        "",
        "| op | shown as | holds when the argument |",
        "|---|---|---|",
    ]
    holds = {
        "equals": "is the same JSON value",
        "in": "equals one of a list of values",
        "prefix": "is a text that starts with the value",
        "lt": "is a number below the value",
        "lte": "is a number at most the value",
        "gt": "is a number above the value",
        "gte": "is a number at least the value",
    }
    for op in OPS:
        lines.append(f"| `{op}` | {OP_WORDS[op]} | {holds[op]} |")
    lines += [
        "",
        "## Ladder steps",
        "",
        f"At most {MAX_STEPS} steps, in order of time, as sentences (`remind after 15m`, "
        "`escalate to admins after 1h, widen to admins`, `expire after 24h`) or mappings "
        "`{after, action, roles, widen_to}`:",
        "",
        f"- `action`: {', '.join(f'`{a}`' for a in LADDER_ACTIONS)};",
        f"- `roles` (escalate): {', '.join(f'`{r}`' for r in LADDER_ROLES)};",
        f"- `widen_to` (escalate): {', '.join(f'`{r}`' for r in WIDEN_ROLES)}.",
        "",
        "## `loop.limits` and `memory`",
        "",
        "| key | default |",
        "|---|---|",
        *[f"| `loop.limits.{key}` | `{value}` |" for key, value in DEFAULT_LIMITS.items()],
        *[
            f"| `memory.{key}` | `{value}` (at most `{MAX_MEMORY[key]}`) |"
            for key, value in DEFAULT_MEMORY.items()
        ],
        "",
        "## Model providers (`model.provider`)",
        "",
        f"{', '.join(f'`{name}`' for name in PROVIDERS)}. The request parameters "
        "`provider: openai` passes through, each checked when the agent loads "
        "(`openai-responses` takes those marked so):",
        "",
        "| parameter | must be | openai-responses |",
        "|---|---|---|",
    ]
    for name in sorted(CHAT_PARAMETERS):
        takes = "yes" if name in RESPONSES_PARAMETERS else "no"
        lines.append(f"| `{name}` | {cell(PARAMETERS[name][1])} | {takes} |")
    return "\n".join(lines)


# --- metrics (the instruments and the scrape-time families) ------------------------------------


def metric_families() -> list[tuple[str, str, list[str], str]]:
    """(name as scraped, type, labels, help) of every metric the processes expose."""
    from prometheus_client import Counter, Gauge, Histogram

    from config import metrics

    found = []
    for value in vars(metrics).values():
        if isinstance(value, Counter | Gauge | Histogram):
            kind = value._type
            name = value._name + ("_total" if kind == "counter" else "")
            found.append((name, kind, list(value._labelnames), value._documentation))
    # Families the apps read from the database at scrape time (config.metrics'
    # collector_register): their names, labels and help as the code writes them.
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "GaugeMetricFamily"
            ):
                continue
            name, help_text = (constant_value(arg) for arg in node.args[:2])
            labels = next((constant_value(k.value) for k in node.keywords if k.arg == "labels"), [])
            names = [str(label) for label in labels] if isinstance(labels, list) else []
            found.append((str(name), "gauge (database)", names, str(help_text)))
    return sorted(found)


def metrics_table() -> str:
    rows = [
        f"| `{name}`{'{' + ', '.join(labels) + '}' if labels else ''} | {kind} | {cell(about)} |"
        for name, kind, labels, about in metric_families()
    ]
    return "| metric | type | what |\n|---|---|---|\n" + "\n".join(rows)


# --- the REST API's operations (its OpenAPI schema) --------------------------------------------


def openapi_schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def openapi_yaml() -> str:
    from drf_spectacular.renderers import OpenApiYamlRenderer

    return OpenApiYamlRenderer().render(openapi_schema(), renderer_context={}).decode()


def schema_words(schema: dict) -> str:
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[1]}`"
    if schema.get("type") == "array" and "items" in schema:
        return f"list of {schema_words(schema['items'])}"
    if "oneOf" in schema:
        return " or ".join(schema_words(each) for each in schema["oneOf"])
    return schema_type(schema)


def rest_operations_page() -> str:
    import json

    document = openapi_schema()
    lines = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            lines += [f"## `{method.upper()} {path}`", ""]
            lines += [operation.get("description", "").strip(), ""]
            parameters = operation.get("parameters", [])
            if parameters:
                lines += ["| parameter | in | value | meaning |", "|---|---|---|---|"]
                for parameter in parameters:
                    lines.append(
                        f"| `{parameter['name']}` | {parameter['in']} "
                        f"| {schema_words(parameter.get('schema', {}))} "
                        f"| {cell(parameter.get('description', ''))} |"
                    )
                lines.append("")
            body = operation.get("requestBody")
            if body:
                media = body["content"]["application/json"]
                lines += [f"Request body: {schema_words(media['schema'])}.", ""]
                for title, example in (media.get("examples") or {}).items():
                    lines += [
                        f'```json title="{example.get("summary") or title}"',
                        json.dumps(example["value"], indent=2, ensure_ascii=False),
                        "```",
                        "",
                    ]
            lines += ["| status | body | meaning |", "|---|---|---|"]
            for status, response in operation["responses"].items():
                media = response.get("content", {}).get("application/json")
                shape = schema_words(media["schema"]) if media else "none"
                lines.append(f"| {status} | {shape} | {cell(response.get('description', ''))} |")
            lines.append("")
            for status, response in operation["responses"].items():
                media = response.get("content", {}).get("application/json") or {}
                for title, example in (media.get("examples") or {}).items():
                    summary = example.get("summary") or title
                    lines += [
                        f'??? example "{status}: {summary}"',
                        "",
                        "    ```json",
                        *(
                            "    " + line
                            for line in json.dumps(
                                example["value"], indent=2, ensure_ascii=False
                            ).splitlines()
                        ),
                        "    ```",
                        "",
                    ]
    return "\n".join(lines)


# --- everything ------------------------------------------------------------------------------


def outputs() -> dict[Path, Callable[[str], str]]:
    """Each generated file, as a function of its current text to its new text."""
    django_setup()
    reads = env_reads()
    defaults = defaults_by_name(reads)
    secrets = secrets_read(reads)
    return {
        ROOT / "docs" / "reference" / "settings.md": lambda text: region_replace(
            text, "settings", settings_tables(defaults, secrets)
        ),
        ROOT / "docs" / "reference" / "metrics.md": lambda text: region_replace(
            region_replace(text, "tracing settings", tracing_table(defaults, secrets)),
            "metrics",
            metrics_table(),
        ),
        ROOT / "docs" / "reference" / "commands.md": lambda text: region_replace(
            text, "commands", commands_page()
        ),
        ROOT / "docs" / "reference" / "agent-file-keys.md": lambda text: region_replace(
            text, "keys", agent_keys_page()
        ),
        ROOT / "docs" / "reference" / "rest-api-operations.md": lambda text: region_replace(
            text, "operations", rest_operations_page()
        ),
        ROOT / "docs" / "reference" / "openapi.yaml": lambda _: openapi_yaml(),
        ROOT / ".env.example": lambda _: env_example(defaults, secrets, production=False),
        ROOT / "deploy" / "production.env.example": lambda _: env_example(
            defaults, secrets, production=True
        ),
    }


def django_setup() -> None:
    """Django as `make run` has it, but reading no .env and writing nothing of its own (in a
    process where Django is set up already, as the tests', it is left as it is)."""
    from django.apps import apps

    if apps.ready:
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["ENV_FILE"] = ""
    os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="countersign-docs-"))
    import django

    django.setup()


def stale() -> list[str]:
    """The generated files whose text is not what the code makes (nothing is written)."""
    found = []
    for path, make in outputs().items():
        current = path.read_text() if path.exists() else ""
        if make(current) != current:
            found.append(path.relative_to(ROOT).as_posix())
    return found


def write() -> list[str]:
    written = []
    for path, make in outputs().items():
        current = path.read_text() if path.exists() else ""
        new = make(current)
        if new != current:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new)
            written.append(path.relative_to(ROOT).as_posix())
    return written


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        found = stale()
        for name in found:
            print(f"{name} is stale: run `make docs`", file=sys.stderr)
        return 1 if found else 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    for name in write():
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
