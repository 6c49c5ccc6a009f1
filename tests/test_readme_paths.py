"""The documents' architecture sections name only paths and modules that exist.

A section's backticked names that look like a place in the repository are checked:

- a path (`runtime/kernel/store.py`, `runtime/turn/`, `runtime/{kernel,agents}/`) exists; one
  whose first part is not a top-level entry (`llm/registry.py`) ends some path of the tree;
- a bare file or folder name (`facts.py`, `schemas/`) after a full path in the same table row
  or paragraph (`runtime/decisions/flow.py`, `facts.py`) sits next to that path or inside it;
  with no full path before it, it ends some path of the tree;
- a dotted name whose first part is a project package (`runtime.decisions.flow.Decision`)
  resolves to a module, and a name after the module is defined at its top level (a class's
  attribute after it, in the class's body); a dotted name whose leading parts end some
  module's name (`store.task_events_insert`, `decisions.inbox`) resolves the same way from
  that module.

Anything else in backticks (settings, fields, `Decider.of_member`, code with spaces) is not
a place and is left alone. To check another document, add it to DOCUMENTS.
"""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (document, the headings of the sections to check): each section runs to the next heading of
# its level or higher, its subsections included.
DOCUMENTS: list[tuple[str, tuple[str, ...]]] = [
    ("docs/explanation/architecture.md", ("Architecture",)),
]

SKIPPED_DIRS = {".git", ".venv", ".venv-sdk03", "node_modules", "var", "staticfiles"}

PATH = re.compile(r"[\w.{},-]+(/[\w.{},-]*)*")
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
FILE_SUFFIXES = (".py", ".md", ".sh", ".txt", ".toml", ".yaml", ".yml", ".json", ".html")


def section(text: str, heading: str) -> str:
    """The section under the markdown heading `heading` (any level), its subsections included."""
    lines = text.splitlines()
    in_fence = False
    start = level = None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        marks = len(line) - len(line.lstrip("#"))
        title = line[marks:].strip()
        if start is None and title == heading:
            start, level = number, marks
        elif start is not None and marks <= level:
            return "\n".join(lines[start:number])
    if start is None:
        raise LookupError(f"no heading {heading!r}")
    return "\n".join(lines[start:])


def expand_braces(token: str) -> list[str]:
    """`a/{b,c}/` -> `a/b/`, `a/c/` (one pair of braces at a time, left first)."""
    match = re.search(r"\{([^{}]*)\}", token)
    if not match:
        return [token]
    out = []
    for choice in match.group(1).split(","):
        out += expand_braces(token[: match.start()] + choice + token[match.end() :])
    return out


@cache
def tree_paths(root: Path) -> frozenset[str]:
    """Every file and folder under root, relative, as POSIX paths (folders end with `/`)."""
    found = set()
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if SKIPPED_DIRS & set(relative.parts):
            continue
        found.add(relative.as_posix() + ("/" if path.is_dir() else ""))
    return frozenset(found)


def is_full_path(token: str, root: Path) -> bool:
    """Whether the path starts at the top of the tree (`runtime/turn/`, not `llm/registry.py`)."""
    return token.split("/")[0] in {path.split("/")[0] for path in tree_paths(root)}


def path_problem(token: str, root: Path, before: str | None = None) -> str | None:
    """Why the path `token` names nothing in the tree, or None when it does. `before` is the
    full path written before it in its row or paragraph, which a bare name sits next to."""
    paths = tree_paths(root)
    top_level = {path.split("/")[0] for path in paths}
    for path in expand_braces(token):
        bare = "/" not in path.rstrip("/")
        if path.split("/")[0] in top_level:
            if path not in paths:
                return f"{path} does not exist"
        elif bare and before is not None:
            places = {before.rsplit("/", 1)[0] if "/" in before.rstrip("/") else ""}
            if before.endswith("/"):
                places.add(before.rstrip("/"))
            if not any(f"{place}/{path}".lstrip("/") in paths for place in places):
                return f"no {path} next to or inside {before}"
        elif not any(each == path or each.endswith("/" + path) for each in paths):
            return f"no {path} anywhere in the tree"
    return None


@cache
def project_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> its file, for every package at the top of the tree."""
    modules = {}
    for init in root.glob("*/__init__.py"):
        package = init.parent
        if package.name == "tests":
            continue
        for file in package.rglob("*.py"):
            relative = file.relative_to(root).with_suffix("")
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            modules[".".join(parts)] = file
    return modules


@cache
def defined_names(file: Path) -> dict[str, ast.AST | None]:
    """The names bound at a module's top level, each with its class node when it is a class."""
    names: dict[str, ast.AST | None] = {}
    for node in ast.parse(file.read_text()).body:
        names.update(bound_names(node))
    return names


def bound_names(node: ast.AST) -> dict[str, ast.AST | None]:
    if isinstance(node, ast.ClassDef):
        return {node.name: node}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return {node.name: None}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(alias.asname or alias.name).split(".")[0]: None for alias in node.names}
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {
            name.id: None
            for target in targets
            for name in ast.walk(target)
            if isinstance(name, ast.Name)
        }
    if isinstance(node, ast.If | ast.Try):
        names = {}
        for child in ast.iter_child_nodes(node):
            names.update(bound_names(child))
        return names
    return {}


def attribute_problem(module: str, file: Path, names: list[str]) -> str | None:
    """Why `names` (a name of the module, then maybe its class's attribute) are not defined."""
    if not names:
        return None
    defined = defined_names(file)
    if names[0] not in defined:
        return f"{module} defines no {names[0]}"
    node = defined[names[0]]
    if len(names) > 1 and isinstance(node, ast.ClassDef):
        in_class: dict[str, ast.AST | None] = {}
        for child in node.body:
            in_class.update(bound_names(child))
        if names[1] not in in_class:
            return f"{module}.{names[0]} defines no {names[1]}"
    return None


def dotted_problem(token: str, root: Path) -> str | None:
    """Why the dotted name `token` names nothing, None when it does or when it is not a place
    (its first part is neither a project package nor the end of a module's name)."""
    modules = project_modules(root)
    parts = token.split(".")
    packages = {name.split(".")[0] for name in modules}
    absolute = parts[0] in packages
    # The longest leading parts that name a module (from the top, or as the end of a name).
    for cut in range(len(parts), 0, -1):
        lead = ".".join(parts[:cut])
        matches = (
            [lead]
            if absolute and lead in modules
            else [name for name in modules if not absolute and name.endswith("." + lead)]
        )
        for module in matches:
            if attribute_problem(module, modules[module], parts[cut:]) is None:
                return None
        if matches:
            return attribute_problem(matches[0], modules[matches[0]], parts[cut:])
    if absolute:
        return f"no module {token}"
    return None


def looks_like_path(token: str) -> bool:
    if not PATH.fullmatch(token) or token.startswith("/"):
        return False
    return "/" in token or token.endswith(FILE_SUFFIXES)


def blocks(text: str) -> list[str]:
    """The text's table rows, list items and paragraphs, each on its own."""
    found: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        starts = line.startswith(("|", "- ", "#")) or not line.strip()
        if starts and current:
            found.append("\n".join(current))
            current = []
        if line.strip():
            current.append(line)
    if current:
        found.append("\n".join(current))
    return found


def problems(text: str, root: Path = ROOT) -> list[str]:
    found = set()
    for block in blocks(text):
        before = None
        for token in re.findall(r"`([^`\n]+)`", block):
            if looks_like_path(token):
                full = is_full_path(token, root)
                problem = path_problem(token, root, None if full else before)
                if full:
                    before = expand_braces(token)[0]
            elif DOTTED.fullmatch(token):
                problem = dotted_problem(token, root)
            else:
                problem = None
            if problem:
                found.add(f"`{token}`: {problem}")
    return sorted(found)


@pytest.mark.parametrize(
    ("document", "heading"),
    [(document, heading) for document, headings in DOCUMENTS for heading in headings],
)
def test_the_architecture_sections_name_only_places_that_exist(document, heading):
    text = section((ROOT / document).read_text(), heading)

    assert problems(text) == []


@pytest.fixture
def made_up_tree(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "",
        "pkg/sub/flow.py": "class Decision:\n    kind = 1\n\ndef take():\n    pass\n",
        "pkg/sub/llm/registry.py": "PROVIDERS = {}\n",
        "bench/README.md": "",
    }
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    return tmp_path


def test_paths_modules_and_names_that_exist_pass(made_up_tree):
    text = (
        "| `pkg/sub/flow.py`, `llm/` | `pkg.sub.flow.Decision.kind`, `pkg.sub.flow.take` |\n"
        "| `pkg/{sub,sub/llm}/` | `flow.Decision`, `sub.flow`, `registry.PROVIDERS` |\n"
        "| `bench/README.md` | `Decider.of_member`, `model:`, `/metrics`, `with batch.locked()` |\n"
        "\n"
        "A paragraph: `llm/registry.py` and `flow.py` anywhere, then `pkg/sub/` and\n"
        "`flow.py` inside it.\n"
    )

    assert problems(text, made_up_tree) == []


def test_moved_paths_modules_and_names_are_reported(made_up_tree):
    text = (
        "| `pkg/flow.py` | `pkg.flow.Decision`, `pkg.sub.flow.Gone` |\n"
        "| `pkg/{sub,gone}/` | `pkg.sub.flow.Decision.gone`, `flow.gone`, `sub.flow.gone` |\n"
        "| `pkg/sub/llm/registry.py`, `flow.py` | `llm/other.py`, `gone.py` |\n"
    )

    assert problems(text, made_up_tree) == [
        "`flow.gone`: pkg.sub.flow defines no gone",
        "`flow.py`: no flow.py next to or inside pkg/sub/llm/registry.py",
        "`gone.py`: no gone.py next to or inside pkg/sub/llm/registry.py",
        "`llm/other.py`: no llm/other.py anywhere in the tree",
        "`pkg.flow.Decision`: pkg defines no flow",
        "`pkg.sub.flow.Decision.gone`: pkg.sub.flow.Decision defines no gone",
        "`pkg.sub.flow.Gone`: pkg.sub.flow defines no Gone",
        "`pkg/flow.py`: pkg/flow.py does not exist",
        "`pkg/{sub,gone}/`: pkg/gone/ does not exist",
        "`sub.flow.gone`: pkg.sub.flow defines no gone",
    ]


def test_a_section_runs_to_the_next_heading_of_its_level_and_skips_code_fences():
    text = "# A\n## Architecture\n`x`\n```\n# not a heading\n```\n### Sub\n`y`\n## Next\n`z`\n"

    assert section(text, "Architecture") == (
        "## Architecture\n`x`\n```\n# not a heading\n```\n### Sub\n`y`"
    )
