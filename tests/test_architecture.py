"""The import rules of docs/explanation/architecture.md, checked on the source.

Each rule is a function over the parsed tree, so that the rules themselves are tested on a
small made-up tree (the `_violations_*` tests below) as well as on the project.
"""

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = (
    "config",
    "tenants",
    "connections",
    "runtime",
    "a2a_endpoint",
    "mcp_gateway",
    "approvals",
    "notifications",
    "integrations",
)

# Lower layers never import higher ones. Within a layer, modules may import each other, as
# long as no cycle forms. `config`'s settings, Celery app and logging sit below everything;
# its URL and ASGI wiring sit above everything. The notification mediums (`integrations`, one
# folder each) sit above the engine that sends through them (`notifications`), which finds
# each medium's transport by name (notifications.transports) and imports none.
LAYERS: list[tuple[int, tuple[str, ...]]] = [
    (6, ("config.urls", "config.asgi", "config.wsgi")),
    (5, ("integrations",)),
    (
        4,
        (
            "a2a_endpoint",
            "mcp_gateway",
            "approvals",
            "notifications",
            "connections.views",
            "connections.urls",
            "connections.forms",
            # Django admin's pages of the tenant: its settings page edits the tenant's
            # default ladder (notifications') with the ladder parser (the core's).
            "tenants.admin",
            "tenants.settings_admin",
        ),
    ),
    (3, ("runtime",)),
    (2, ("connections",)),
    (1, ("tenants",)),
    (0, ("config",)),
]

# The core's sub-packages, lowest first (docs/explanation/architecture.md): each imports only those below
# it. The app's own modules sit on top: Django's (admin, apps, the models re-exported for
# Django), the receivers of other apps' signals, the commands and the Celery task module (it
# imports the services it runs; nothing imports it: services queue its tasks by name,
# config.celery.task_enqueue). Under everything, the schema: each domain's
# models (they import only models) and the store, the hand-written statements that join
# tables of several domains (runtime.kernel.store; a task's events with their push
# deliveries in event_store, the agents' in agent_store) on rowsql's compiled-once machinery. A
# module belongs to the layer of its longest matching prefix.
CORE_LAYERS: list[tuple[int, tuple[str, ...]]] = [
    (
        8,
        (
            "runtime.admin",
            "runtime.apps",
            "runtime.models",
            "runtime.receivers",
            "runtime.management",
            "runtime.tasks",
            # The MCP gateway's held calls start turns (runtime.turn.intake).
            "runtime.gateway",
        ),
    ),
    (7, ("runtime.turn", "runtime.evidence")),
    (6, ("runtime.decisions",)),
    (5, ("runtime.agents",)),
    (4, ("runtime.llm",)),
    (3, ("runtime.policy",)),
    (2, ("runtime.tools",)),
    (1, ("runtime.kernel",)),
    (
        0,
        (
            "runtime.kernel.task_models",
            # The audit chain's hashes: plain Python, which the audit row's model computes.
            "runtime.kernel.audit_hash",
            "runtime.kernel.push.push_models",
            "runtime.agents.agent_models",
            "runtime.decisions.decision_models",
            "runtime.gateway.gateway_models",
            "runtime.kernel.rowsql",
            "runtime.kernel.store",
            "runtime.kernel.event_store",
            "runtime.agents.agent_store",
        ),
    ),
]
CORE = "runtime"

# The one module that may open outbound HTTP connections: it refuses private addresses and
# hosts that are not allowed (SSRF), for every caller.
OUTBOUND_MODULE = "connections.outbound"
HTTP_CALLS = {"Client", "AsyncClient", "get", "post", "put", "patch", "delete", "request", "stream"}


def layer_of(module: str) -> int:
    for rank, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} belongs to no layer; add it to LAYERS")


@dataclass
class Import:
    module: str  # the importing module
    target: str  # the module imported from
    names: list[str]
    aliases: list[str | None]
    top_level: bool
    line: int


@dataclass
class Module:
    name: str
    path: str
    imports: list[Import] = field(default_factory=list)
    http_calls: list[int] = field(default_factory=list)
    sql_calls: list[int] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    lines: int = 0
    tree: ast.Module | None = None


def _is_project(target: str) -> bool:
    return target.split(".")[0] in APPS


def _type_checking_block(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Name | ast.Attribute)
        and "TYPE_CHECKING" in ast.unparse(node.test)
    )


def parse_module(name: str, path: str, source: str) -> Module:
    module = Module(name=name, path=path, lines=len(source.splitlines()))
    tree = module.tree = ast.parse(source)
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            top.add(id(node))
        elif isinstance(node, ast.Try):
            top.update(id(n) for n in node.body if isinstance(n, ast.Import | ast.ImportFrom))
    skipped = set()
    for node in ast.walk(tree):
        if _type_checking_block(node):
            skipped.update(id(n) for n in ast.walk(node))
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            if not _is_project(base):
                continue
            for alias in node.names:
                # `from runtime import services` imports the module runtime.services.
                target = f"{base}.{alias.name}" if _is_submodule(base, alias.name) else base
                module.imports.append(
                    Import(name, target, [alias.name], [alias.asname], id(node) in top, node.lineno)
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_project(alias.name):
                    module.imports.append(
                        Import(name, alias.name, [], [alias.asname], id(node) in top, node.lineno)
                    )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "httpx"
            and node.func.attr in HTTP_CALLS
        ):
            module.http_calls.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("execute", "executemany", "raw")
        ):
            module.sql_calls.append(node.lineno)
        if isinstance(node, ast.Name):
            module.names.add(node.id)
        elif isinstance(node, ast.Attribute):
            module.names.add(node.attr)
        elif isinstance(node, ast.alias):
            module.names.add(node.asname or node.name.rpartition(".")[2])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            module.names.add(node.value)
    return module


def _is_submodule(package: str, name: str) -> bool:
    base = ROOT.joinpath(*package.split("."))
    return (base / f"{name}.py").exists() or (base / name / "__init__.py").exists()


def project_modules(root: Path = ROOT) -> dict[str, Module]:
    found = {}
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            found[name] = parse_module(name, str(path.relative_to(root)), path.read_text())
    return found


# --- the rules ------------------------------------------------------------------------------


def violations_layers(modules: dict[str, Module]) -> list[str]:
    """No import (at the top or inside a function) reaches a higher layer."""
    out = []
    for m in modules.values():
        for imp in m.imports:
            if layer_of(imp.target) > layer_of(m.name):
                out.append(
                    f"{m.path}:{imp.line} {m.name} (layer {layer_of(m.name)}) imports "
                    f"{imp.target} (layer {layer_of(imp.target)})"
                )
    return out


# Imports that the layers allow but the design does not: (importer, imported, why).
NEVER_IMPORTS = [
    (
        "notifications",
        "integrations",
        "the engine knows each medium by its transport's name (notifications.transports)",
    ),
]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations_never_imports(modules: dict[str, Module]) -> list[str]:
    """``notifications`` never imports ``integrations`` (at the top or inside a function): the
    engine loads each medium's transport by name."""
    return [
        f"{m.path}:{imp.line} {m.name} imports {imp.target}: {why}"
        for importer, imported, why in NEVER_IMPORTS
        for m in modules.values()
        if _within(m.name, importer)
        for imp in m.imports
        if _within(imp.target, imported)
    ]


def core_layer_of(module: str) -> int | None:
    """The module's sub-layer in the core (that of its longest matching prefix), or None
    outside the core (or the package itself)."""
    matches = [
        (len(p), rank)
        for rank, prefixes in CORE_LAYERS
        for p in prefixes
        if module == p or module.startswith(p + ".")
    ]
    if matches:
        return max(matches)[1]
    if module.startswith(CORE + "."):
        raise AssertionError(f"{module} belongs to no layer of the core; add it to CORE_LAYERS")
    return None


def violations_core_layers(modules: dict[str, Module]) -> list[str]:
    """Within the core, no import (at the top or inside a function) reaches a higher
    sub-package: kernel < tools < policy < llm < agents < decisions < turn < the app's own."""
    out = []
    for m in modules.values():
        mine = core_layer_of(m.name)
        if mine is None:
            continue
        for imp in m.imports:
            theirs = core_layer_of(imp.target)
            if theirs is None:
                continue
            if theirs > mine:
                out.append(
                    f"{m.path}:{imp.line} {m.name} (core layer {mine}) imports "
                    f"{imp.target} (core layer {theirs})"
                )
    return out


def violations_core_basenames(modules: dict[str, Module]) -> list[str]:
    """No two modules of the core share a file name (one module per concept: no pure and
    service pair, no second ``tasks.py`` that is not Celery's)."""
    seen: dict[str, list[str]] = {}
    for m in modules.values():
        if m.name.startswith(CORE + ".") and not m.path.endswith("__init__.py"):
            seen.setdefault(Path(m.path).name, []).append(m.path)
    return [f"{name}: {', '.join(paths)}" for name, paths in sorted(seen.items()) if len(paths) > 1]


def _resolve(target: str, modules: dict[str, Module]) -> str | None:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def violations_cycles(modules: dict[str, Module]) -> list[str]:
    """No import cycle, counting imports inside functions too."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for m in modules.values():
        for imp in m.imports:
            target = _resolve(imp.target, modules)
            if target and target != m.name:
                graph[m.name].add(target)
    out, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                out.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return out


def violations_private_names(modules: dict[str, Module]) -> list[str]:
    """No underscore name is imported from another module."""
    return [
        f"{m.path}:{imp.line} imports {name} from {imp.target}"
        for m in modules.values()
        for imp in m.imports
        for name in imp.names
        if name.startswith("_")
    ]


def is_celery_module(name: str) -> bool:
    """An app's Celery task module (``runtime.tasks``; not ``runtime.turn.cancel``)."""
    return name.count(".") == 1 and name.endswith(".tasks")


def violations_celery(modules: dict[str, Module]) -> list[str]:
    """No module imports a Celery task module: work is queued by the task's name
    (config.celery.task_enqueue), so the task modules, which import the services they run,
    sit above them and close no circle."""
    return [
        f"{m.path}:{imp.line} imports the task module {imp.target}; queue its tasks by name"
        for m in modules.values()
        for imp in m.imports
        if is_celery_module(imp.target) and imp.target != m.name
    ]


def violations_outbound(modules: dict[str, Module]) -> list[str]:
    """Outbound HTTP only through the guarded client."""
    return [
        f"{m.path}:{line} calls httpx directly; use {OUTBOUND_MODULE}"
        for m in modules.values()
        if m.name != OUTBOUND_MODULE
        for line in m.http_calls
    ]


# The longest a product module may be: a file a newcomer can read through. The core and
# the edge apps are held shorter still: one concern per module.
MAX_LINES = 800
MAX_LINES_IN = {"runtime": 600, "approvals": 500, "notifications": 500, "integrations": 500}


def violations_module_sizes(modules: dict[str, Module]) -> list[str]:
    """No product module over 800 lines, none in runtime/ over 600, none in approvals/,
    notifications/ or integrations/ over 500."""
    out = []
    for m in modules.values():
        limit = MAX_LINES_IN.get(m.name.split(".")[0], MAX_LINES)
        if m.lines > limit:
            out.append(f"{m.path} has {m.lines} lines (at most {limit})")
    return out


# Where SQL is written by hand (a cursor's execute, a raw queryset): the core's store, and the
# few reads that cannot be statements of the core. Everything else goes through the ORM (or
# rowsql's compiled-once saves).
SQL_MODULES = {
    "runtime.kernel.store": "the core's hand-written statements",
    "runtime.kernel.event_store": "a task's events and their push deliveries, in one statement",
    "runtime.agents.agent_store": "the agents' statements: credentials, prices, demo records",
    "runtime.kernel.rowsql": "the ORM's saves, compiled once (the store's machinery)",
    "runtime.kernel.wakeups": "NOTIFY and LISTEN",
    "a2a_endpoint.asyncdb": "the A2A edge's reads on psycopg's async pool",
    "runtime.decisions.inbox": "the inbox's counts per agent (a raw queryset)",
    "config.health": "SELECT 1",
}


def violations_sql(modules: dict[str, Module]) -> list[str]:
    """Hand-written SQL only in the store (runtime.kernel.store) and the few modules that
    must (SQL_MODULES)."""
    return [
        f"{m.path}:{line} executes SQL of its own; put it in runtime.kernel.store"
        for m in modules.values()
        if m.name not in SQL_MODULES
        for line in m.sql_calls
    ]


# Names taken out of the product: a side effect is called by name (no signal stands for it),
# and test switches live in tests, not in the settings.
GONE = ("LockedFact", "task_event_written", "A2A_DB_THREAD_SENSITIVE")


def violations_gone_names(modules: dict[str, Module]) -> list[str]:
    """``LockedFact``, ``task_event_written`` and ``A2A_DB_THREAD_SENSITIVE`` are gone from
    product code (and the settings)."""
    return [f"{m.path} names {name}" for m in modules.values() for name in GONE if name in m.names]


# The one writer of an interaction's life (docs/explanation/architecture.md), as runtime.kernel.task_state
# is of a task's: nothing else writes an Interaction's (or an InteractionApproval's) row, or
# tells the edges that one opened or changed. Found on the tree: a write method of a queryset
# of those models (``Interaction.objects...update(...)``), a ``save``/``delete`` of a name bound
# to ``Interaction(...)`` or named for an interaction, rowsql's writes given one, the signals'
# ``send``, and a call of a function of the store whose statement writes the table (a function
# that names the model beside an INSERT, UPDATE or DELETE, or calls one that does).
INTERACTION_WRITER = "runtime.decisions.interaction_state"
INTERACTION_MODELS = {"Interaction", "InteractionApproval"}
INTERACTION_SIGNALS = {"interaction_opened", "interaction_changed"}
QUERYSET_WRITES = {
    "create",
    "bulk_create",
    "bulk_update",
    "update",
    "update_or_create",
    "get_or_create",
    "delete",
}
ROW_WRITES = {"row_move", "row_update", "row_insert", "rows_insert"}
STORE = "runtime.kernel.store"
SQL_WRITE = re.compile(r"(?<!FOR )\b(UPDATE|INSERT INTO|DELETE FROM)\b")


def _queryset_model(node: ast.AST) -> str | None:
    """The model a queryset chain starts from (``Interaction.objects.filter(...)``), if any."""
    while isinstance(node, ast.Call | ast.Attribute):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "objects"
            and isinstance(node.value, ast.Name)
        ):
            return node.value.id
        node = node.func if isinstance(node, ast.Call) else node.value
    return None


def _names_an_interaction(node: ast.AST, bound: set[str]) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name in bound or name in INTERACTION_MODELS or "interaction" in name.lower()


def _interaction_writes(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) of each write of an interaction's row, or its signal, in the tree."""
    # Names bound to what a call named for an interaction returns (``Interaction(...)``,
    # ``row = _interaction_row(...)``).
    bound = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and _names_an_interaction(node.value.func, set())
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if isinstance(func, ast.Attribute) and name in QUERYSET_WRITES:
            if _queryset_model(func.value) in INTERACTION_MODELS:
                found.append((node.lineno, f"{_queryset_model(func.value)}.objects...{name}()"))
                continue
        if isinstance(func, ast.Attribute) and name in ("save", "delete"):
            if _names_an_interaction(func.value, bound):
                found.append((node.lineno, f"{ast.unparse(func)}()"))
        elif name in ROW_WRITES and node.args and _names_an_interaction(node.args[0], bound):
            found.append((node.lineno, f"{name}({ast.unparse(node.args[0])})"))
        elif isinstance(func, ast.Attribute) and name in ("send", "send_robust"):
            signal = func.value
            signal_name = getattr(signal, "id", None) or getattr(signal, "attr", "")
            if signal_name in INTERACTION_SIGNALS:
                found.append((node.lineno, f"{signal_name}.{name}()"))
    return found


def store_interaction_writes(store: Module | None) -> set[str]:
    """The functions of the store whose statement writes the interactions' table: one that
    names the model beside an INSERT, UPDATE or DELETE, or calls one that does."""
    if store is None or store.tree is None:
        return set()
    functions = {n.name: n for n in store.tree.body if isinstance(n, ast.FunctionDef)}

    def called(fn: ast.FunctionDef) -> set[str]:
        return {
            n.func.id
            for n in ast.walk(fn)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions
        }

    writing = set()
    for name, fn in functions.items():
        names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        texts = [
            n.value
            for n in ast.walk(fn)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        if names & INTERACTION_MODELS and any(SQL_WRITE.search(t) for t in texts):
            writing.add(name)
    grown = True
    while grown:
        more = {name for name, fn in functions.items() if called(fn) & writing} - writing
        writing |= more
        grown = bool(more)
    return writing


def violations_interaction_writer(modules: dict[str, Module]) -> list[str]:
    """Only runtime.decisions.interaction_state writes an interaction's row (Interaction,
    InteractionApproval) and sends interaction_opened and interaction_changed; the store's
    statements that write the table are called from it alone."""
    store_writes = store_interaction_writes(modules.get(STORE))
    out = []
    for m in modules.values():
        if m.name == INTERACTION_WRITER or m.tree is None:
            continue
        found = [] if m.name == STORE else _interaction_writes(m.tree)
        found += [
            (imp.line, f"{imp.target}.{name}")
            for imp in m.imports
            if imp.target == STORE
            for name in imp.names
            if name in store_writes
        ]
        found += [
            (node.lineno, f"store.{node.attr}")
            for node in ast.walk(m.tree)
            if m.name != STORE and isinstance(node, ast.Attribute) and node.attr in store_writes
        ]
        out += [
            f"{m.path}:{line} {what}: only {INTERACTION_WRITER} writes an interaction"
            for line, what in sorted(found)
        ]
    return out


RULES = [
    violations_layers,
    violations_never_imports,
    violations_core_layers,
    violations_core_basenames,
    violations_cycles,
    violations_private_names,
    violations_celery,
    violations_outbound,
    violations_module_sizes,
    violations_sql,
    violations_gone_names,
    violations_interaction_writer,
]


@pytest.fixture(scope="module")
def modules():
    return project_modules()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__.removeprefix("violations_"))
def test_the_project_keeps_the_import_rules(rule, modules):
    found = rule(modules)
    assert not found, "\n".join([rule.__doc__, *found])


# --- the rules find what they should --------------------------------------------------------


def made_up(**sources: str) -> dict[str, Module]:
    return {
        name: parse_module(name, name.replace(".", "/") + ".py", text)
        for name, text in sources.items()
    }


def test_a_lower_layer_importing_a_higher_one_is_reported():
    tree = made_up(
        **{"tenants.models": "def f():\n    from runtime.models import Task\n"},
        **{"runtime.models": "from tenants.models import Tenant\n"},
    )
    assert violations_layers(tree) == [
        "tenants/models.py:2 tenants.models (layer 1) imports runtime.models (layer 3)"
    ]


def test_a_cycle_is_reported_even_through_a_function_body_or_a_task_body():
    tree = made_up(
        **{"runtime.a": "from runtime.b import x\n"},
        **{"runtime.b": "def f():\n    from runtime.a import y\n"},
        **{"runtime.c": "from runtime.tasks import run_task\n"},
        **{"runtime.tasks": "def run():\n    from runtime.c import z\n"},
    )
    assert violations_cycles(tree) == [
        "runtime.a -> runtime.b -> runtime.a",
        "runtime.c -> runtime.tasks -> runtime.c",
    ]


def test_an_underscore_name_from_another_module_is_reported():
    tree = made_up(**{"runtime.turn": "from runtime.services import _set_status, task_cancel\n"})
    assert violations_private_names(tree) == [
        "runtime/turn.py:1 imports _set_status from runtime.services"
    ]


def test_a_module_importing_a_task_module_is_reported():
    tree = made_up(
        **{"runtime.tasks": "from runtime.services import go\n"},
        **{"runtime.services": "from runtime.tasks import run_turn\n"},
        **{"notifications.services": "def f():\n    from notifications.tasks import x\n"},
    )
    assert violations_celery(tree) == [
        "runtime/services.py:1 imports the task module runtime.tasks; queue its tasks by name",
        "notifications/services.py:2 imports the task module notifications.tasks; queue its "
        "tasks by name",
    ]


def test_a_direct_httpx_call_is_reported_outside_the_guard():
    tree = made_up(
        **{"connections.oauth": "import httpx\nhttpx.post('https://example.test')\n"},
        **{OUTBOUND_MODULE: "import httpx\nc = httpx.Client()\n"},
    )
    assert violations_outbound(tree) == [
        "connections/oauth.py:2 calls httpx directly; use connections.outbound"
    ]


def test_a_core_sub_package_importing_a_higher_one_is_reported():
    tree = made_up(
        **{"runtime.kernel.task_state": "from runtime.turn.runner import turn_run\n"},
        **{"runtime.turn.runner": "from runtime.decisions.interactions import x\n"},
        **{"runtime.decisions.interactions": "from runtime.kernel.task_state import y\n"},
        **{"runtime.tasks": "from runtime.turn.runner import turn_run\n"},
    )
    assert violations_core_layers(tree) == [
        "runtime/kernel/task_state.py:1 runtime.kernel.task_state (core layer 1) imports "
        "runtime.turn.runner (core layer 7)"
    ]


def test_two_core_modules_with_one_file_name_are_reported():
    tree = made_up(
        **{"runtime.llm.credentials": "x = 1\n"},
        **{"runtime.decisions.credentials": "y = 1\n"},
        **{"a2a_endpoint.credentials": "z = 1\n"},
    )
    assert violations_core_basenames(tree) == [
        "credentials.py: runtime/llm/credentials.py, runtime/decisions/credentials.py"
    ]


def test_a_module_too_long_for_its_app_is_reported():
    tree = made_up(
        **{"approvals.views": "x = 1\n" * 501},
        **{"runtime.turn.runner": "x = 1\n" * 601},
        **{"runtime.turn.claim": "x = 1\n" * 600},
        **{"integrations.slack_views": "x = 1\n" * 501},
        **{"a2a_endpoint.views": "x = 1\n" * 801},
        **{"notifications.services": "x = 1\n" * 501},
        **{"integrations.slack.blocks": "x = 1\n" * 501},
        **{"integrations.slack.views": "x = 1\n" * 500},
        **{"a2a_endpoint.methods": "x = 1\n" * 800},
    )
    assert violations_module_sizes(tree) == [
        "approvals/views.py has 501 lines (at most 500)",
        "runtime/turn/runner.py has 601 lines (at most 600)",
        "integrations/slack_views.py has 501 lines (at most 500)",
        "a2a_endpoint/views.py has 801 lines (at most 800)",
        "notifications/services.py has 501 lines (at most 500)",
        "integrations/slack/blocks.py has 501 lines (at most 500)",
    ]


def test_the_engine_importing_a_medium_is_reported_and_a_medium_importing_the_engine_is_not():
    tree = made_up(
        **{"notifications.services": "from integrations.email.links import email_link_mint\n"},
        **{"notifications.transports": "def f():\n    import integrations.slack.transport\n"},
        **{"notifications.content": "x = 'integrations.email.transport.EmailTransport'\n"},
        **{"integrations.email.transport": "from notifications.transports import Transport\n"},
    )
    why = "the engine knows each medium by its transport's name (notifications.transports)"
    assert violations_never_imports(tree) == [
        f"notifications/services.py:1 notifications.services imports integrations.email.links: "
        f"{why}",
        f"notifications/transports.py:2 notifications.transports imports "
        f"integrations.slack.transport: {why}",
    ]
    assert violations_layers(tree) == [
        "notifications/services.py:1 notifications.services (layer 4) imports "
        "integrations.email.links (layer 5)",
        "notifications/transports.py:2 notifications.transports (layer 4) imports "
        "integrations.slack.transport (layer 5)",
    ]


def test_sql_outside_the_store_is_reported():
    tree = made_up(
        **{"runtime.turn.claim": "def f(c):\n    c.execute('SELECT 1')\n"},
        **{"runtime.kernel.store": "def g(c):\n    c.execute('SELECT 1')\n"},
        **{"approvals.views": "def h():\n    return Task.objects.raw('SELECT 1')\n"},
    )
    assert violations_sql(tree) == [
        "runtime/turn/claim.py:2 executes SQL of its own; put it in runtime.kernel.store",
        "approvals/views.py:2 executes SQL of its own; put it in runtime.kernel.store",
    ]


def test_the_names_taken_out_of_the_product_are_reported_wherever_they_come_back():
    tree = made_up(
        **{"runtime.kernel.signals": "task_event_written = Signal()\n"},
        **{"a2a_endpoint.asyncdb": "if settings.A2A_DB_THREAD_SENSITIVE:\n    pass\n"},
        **{"config.settings": "X = env_bool('A2A_DB_THREAD_SENSITIVE', False)\n"},
        **{"runtime.turn.runner": "from runtime.kernel.task_state import LockedFact\n"},
    )
    assert violations_gone_names(tree) == [
        "runtime/kernel/signals.py names task_event_written",
        "a2a_endpoint/asyncdb.py names A2A_DB_THREAD_SENSITIVE",
        "config/settings.py names A2A_DB_THREAD_SENSITIVE",
        "runtime/turn/runner.py names LockedFact",
    ]


def test_the_schema_sits_under_every_service_of_the_core():
    tree = made_up(
        **{"runtime.kernel.store": "from runtime.agents.agent_models import Agent\n"},
        **{"runtime.agents.agent_models": "from runtime.kernel.task_state import task_save\n"},
    )
    assert violations_core_layers(tree) == [
        "runtime/agents/agent_models.py:1 runtime.agents.agent_models (core layer 0) imports "
        "runtime.kernel.task_state (core layer 1)"
    ]


def test_an_interaction_written_or_told_of_outside_its_writer_is_reported():
    tree = made_up(
        **{
            INTERACTION_WRITER: (
                "def close(i):\n"
                "    Interaction.objects.filter(pk=i.pk).update(state='answered')\n"
                "    interaction_changed.send(sender=Interaction, interaction=i)\n"
            )
        },
        **{
            "runtime.turn.cancel": (
                "def cancel(t):\n"
                "    Interaction.objects.filter(task=t).update(state='canceled')\n"
                "    signals.interaction_changed.send(sender=Interaction)\n"
                "    row = _interaction_row(kind='approval')\n"
                "    row.save()\n"
                "    row_move(Interaction, 1, where={}, values={})\n"
                "    InteractionApproval.objects.create(by='x')\n"
            )
        },
        **{
            "runtime.decisions.approvers": (
                "def widen(interaction):\n"
                "    interaction.save(update_fields=['widened_to'])\n"
                "    Interaction.objects.filter(pk=1).first()\n"
                "    Effect.objects.filter(pk=1).update(state='held')\n"
                "    summary(Interaction(kind='approval'))\n"
            )
        },
        **{
            STORE: (
                "def _reopen_sql():\n"
                "    return f'UPDATE {q(Interaction._meta.db_table)} SET state = %s'\n"
                "def interaction_reopen(c):\n"
                "    c.execute(_reopen_sql())\n"
                "def task_lock(c):\n"
                "    c.execute(f'SELECT 1 FROM {Interaction._meta.db_table} FOR UPDATE')\n"
            )
        },
        **{
            "runtime.turn.calls": "from runtime.kernel.store import interaction_reopen, task_lock\n"
        },
        **{"runtime.turn.claim": "def f(c):\n    store.interaction_reopen(c)\n"},
    )
    assert store_interaction_writes(tree[STORE]) == {"_reopen_sql", "interaction_reopen"}
    only = f"only {INTERACTION_WRITER} writes an interaction"
    assert violations_interaction_writer(tree) == [
        f"runtime/turn/cancel.py:2 Interaction.objects...update(): {only}",
        f"runtime/turn/cancel.py:3 interaction_changed.send(): {only}",
        f"runtime/turn/cancel.py:5 row.save(): {only}",
        f"runtime/turn/cancel.py:6 row_move(Interaction): {only}",
        f"runtime/turn/cancel.py:7 InteractionApproval.objects...create(): {only}",
        f"runtime/decisions/approvers.py:2 interaction.save(): {only}",
        f"runtime/turn/calls.py:1 runtime.kernel.store.interaction_reopen: {only}",
        f"runtime/turn/claim.py:2 store.interaction_reopen: {only}",
    ]
