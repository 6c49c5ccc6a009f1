"""The documentation site: `make docs` builds it with no warning, every page is in its nav, the
pages written from the code are current, and no command in it is one nobody checked.

The rule for a shell block (```sh, ```bash, ```console) of README.md or docs/: its fence says
how it is exercised, one of

- ``{.walkthrough}``: run, in order with the document's other such blocks, against a live
  `make run` by tests/test_walkthrough.py, its `# ->` lines promises about the output;
- ``{.illustration}``: a command that cannot run here (a production host, a container engine,
  a Slack token, the whole test suite). It is checked instead: every `manage.py` command is one
  of Countersign's or Django's and its arguments parse with the command's own parser, every
  `make` target exists, every script named exists, every local URL a `curl` names is a route,
  and every other program is one this test knows of.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from django.core.management import CommandError, get_commands, load_command_class
from django.urls import Resolver404, resolve

from scripts.docs_reference import outputs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^([ \t]*)```(\w*)([^\n]*)\n(.*?)^\1```", re.S | re.M)
SHELLS = {"sh", "bash", "shell", "console"}
KINDS = {"walkthrough", "illustration"}
# Programs an illustration may run that are not Countersign's own (checked no further).
KNOWN_PROGRAMS = {
    "apt-get", "caddy", "celery", "cd", "chmod", "chown", "cloudflared", "cp", "createdb",
    "createuser",
    "curl", "docker", "echo", "eval", "export", "git", "gunicorn", "install", "journalctl",
    "ln", "mkdir", "nginx", "ngrok", "node", "openssl", "pg_dump", "pg_restore", "pip", "psql", "python3",
    "ssh", "sudo", "systemctl", "tar", "useradd",
}  # fmt: skip
LOCAL_HOSTS = {"127.0.0.1:8000", "localhost:8000", "countersign.example.com"}


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def shell_blocks(path: Path) -> list[tuple[int, set[str], str]]:
    """(line, classes, text) of each shell block of the document."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match.group(2) not in SHELLS:
            continue
        line = text.count("\n", 0, match.start()) + 1
        classes = set(re.findall(r"\.([\w-]+)", match.group(3)))
        body = "\n".join(row[len(match.group(1)) :] for row in match.group(4).splitlines())
        found.append((line, classes, body))
    return found


def commands(block: str) -> list[list[str]]:
    """Each command of a block as its words: continuation lines joined, comments dropped,
    ``NAME=$(command)`` read as the command, leading ``NAME=value`` settings dropped."""
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assigned = re.fullmatch(r"\w+=\$\((.*)\)", line)
        if assigned:
            line = assigned.group(1)
        for part in re.split(r"\s(?:&&|\|\||;)\s", line):
            words = shlex.split(part, comments=True)
            while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
                words.pop(0)
            if words and words[0] == "sudo":
                words = words[1:]
                while words and words[0].startswith("-"):
                    # -u USER and -g GROUP take a value; other options stand alone.
                    words = words[2:] if words[0] in ("-u", "-g") else words[1:]
            if words:
                found.append(words)
    return found


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


def command_problem(words: list[str]) -> str | None:
    """Why a command of an illustration names nothing real, or None."""
    if "manage.py" in words:
        name, *args = words[words.index("manage.py") + 1 :]
        app = get_commands().get(name)
        if app is None:
            return f"manage.py {name}: no such command"
        parser = load_command_class(app, name).create_parser("manage.py", name)
        try:
            parser.parse_args(args)
        except (CommandError, SystemExit) as exc:
            return f"manage.py {name} {' '.join(args)}: {exc}"
        return None
    program = words[0]
    if program == "make":
        missing = [target for target in words[1:] if "=" not in target]
        missing = [target for target in missing if target not in make_targets()]
        return f"make {missing}: no such target" if missing else None
    if program.startswith(("scripts/", "./scripts/")):
        return None if (ROOT / program).exists() else f"{program}: no such script"
    if program == "curl":
        for word in words[1:]:
            url = urlsplit(word)
            if url.scheme in ("http", "https") and url.netloc in LOCAL_HOSTS:
                try:
                    resolve(url.path)
                except Resolver404:
                    return f"{word}: no such route"
        return None
    if program == "countersign":
        # The Python client's command (clients/python): its arguments parse with its parser.
        from countersign_client.cli import parser

        try:
            parser().parse_args(words[1:])
        except SystemExit:
            return f"countersign {' '.join(words[1:])}: its parser refuses it"
        return None
    if Path(program).name in {"python", "python3", "node"}:
        # A path into the repository must exist; a bare name is a file the reader makes.
        scripts = [w for w in words[1:] if w.endswith((".py", ".mjs", ".js")) and "/" in w]
        missing = [script for script in scripts if not (ROOT / script).exists()]
        return f"{program} {missing}: no such file" if missing else None
    if Path(program).name in KNOWN_PROGRAMS:
        return None
    return f"{program}: a program this test knows nothing of"


def test_every_shell_block_is_run_or_checked():
    problems = []
    counted = {kind: 0 for kind in KINDS}
    for path in documents():
        name = path.relative_to(ROOT)
        for line, classes, body in shell_blocks(path):
            kinds = classes & KINDS
            if len(kinds) != 1:
                problems.append(f"{name}:{line}: mark it {{.walkthrough}} or {{.illustration}}")
                continue
            [kind] = kinds
            counted[kind] += 1
            if kind == "illustration":
                for words in commands(body):
                    problem = command_problem(words)
                    if problem:
                        problems.append(f"{name}:{line}: {problem}")
    assert problems == []
    assert counted["walkthrough"] >= 10 and counted["illustration"] >= 10, counted


def test_a_command_that_names_nothing_real_is_caught():
    block = (
        "python manage.py tokens create --tenant acme --subject partner:x   # fine\n"
        "TOKEN=$(python manage.py tokens create --tenant acme --colour red)\n"
        "python manage.py tenants dance\n"
        "python manage.py nosuchcommand\n"
        "make run && make deploy\n"
        "curl -s http://127.0.0.1:8000/api/v2/nothing\n"
        "scripts/nothing.sh\n"
        "frobnicate --now\n"
        "python3 docs/samples/nothing.py 8080\n"
        "countersign verify receipt.json --jwks http://127.0.0.1:8000/.well-known/jwks.json\n"
        "countersign verify receipt.json\n"
    )
    problems = [command_problem(words) for words in commands(block)]
    assert problems[0] is None and problems[4] is None
    assert "--colour" in problems[1] and "dance" in problems[2]
    assert problems[3] == "manage.py nosuchcommand: no such command"
    assert problems[5] == "make ['deploy']: no such target"
    assert "no such route" in problems[6] and "no such script" in problems[7]
    assert "frobnicate" in problems[8]
    assert problems[9] == "python3 ['docs/samples/nothing.py']: no such file"
    assert problems[10] is None and "its parser refuses it" in problems[11]


def test_every_agent_file_shown_as_one_loads(tmp_path):
    """A ```yaml {.agentfile} block is a whole AGENT.md: Countersign's loader takes it."""
    from runtime.agents.agentfile import parse_agent_file

    loaded = 0
    for path in documents():
        text = path.read_text()
        for match in FENCE.finditer(text):
            if match.group(2) != "yaml" or ".agentfile" not in match.group(3):
                continue
            body = "\n".join(row[len(match.group(1)) :] for row in match.group(4).splitlines())
            file = tmp_path / f"{path.stem}-{loaded}.md"
            file.write_text(body + "\n")
            spec = parse_agent_file(file)
            assert spec.slug, path
            loaded += 1
    assert loaded >= 1


def nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_is_in_the_nav_once():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


def test_the_pages_written_from_the_code_are_current():
    stale = [
        path.relative_to(ROOT).as_posix()
        for path, make in outputs().items()
        if make(path.read_text() if path.exists() else "") != path.read_text()
    ]
    assert stale == [], "run `make docs`"


@pytest.mark.skipif(
    not (Path(sys.prefix) / "bin" / "mkdocs").exists(), reason="mkdocs is not installed"
)
def test_the_site_builds_strictly_with_no_warning(tmp_path):
    result = subprocess.run(
        [Path(sys.prefix) / "bin" / "mkdocs", "build", "--strict", "--site-dir", tmp_path],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr
    assert (tmp_path / "reference" / "openapi.yaml").exists()
    assert (tmp_path / "images" / "decision-page.png").exists()
