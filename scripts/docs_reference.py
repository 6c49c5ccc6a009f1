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


# --- everything ------------------------------------------------------------------------------


def outputs() -> dict[Path, Callable[[str], str]]:
    """Each generated file, as a function of its current text to its new text."""
    reads = env_reads()
    defaults = defaults_by_name(reads)
    secrets = secrets_read(reads)
    return {
        ROOT / "docs" / "reference" / "settings.md": lambda text: region_replace(
            text, "settings", settings_tables(defaults, secrets)
        ),
        ROOT / "docs" / "reference" / "metrics.md": lambda text: region_replace(
            text, "tracing settings", tracing_table(defaults, secrets)
        ),
        ROOT / ".env.example": lambda _: env_example(defaults, secrets, production=False),
        ROOT / "deploy" / "production.env.example": lambda _: env_example(
            defaults, secrets, production=True
        ),
    }


def django_setup() -> None:
    """Django as `make run` has it, but reading no .env and writing nothing of its own."""
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
