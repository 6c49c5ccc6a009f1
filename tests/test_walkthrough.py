"""The walk-throughs work by copy-paste against a live `make run`.

In README.md and in every page of docs/, the blocks fenced as ```sh {.walkthrough} are run in
order, one document at a time, in one bash, in this folder, as a newcomer would paste them
(only the port differs: make run listens on a free one here). Every `# -> text` line in them
is a promise about the output: each must appear, in order. (tests/test_docs_blocks.py holds
every other shell block of the documents to what it can check.)
"""

import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from tests.live import free_port

ROOT = settings.BASE_DIR
BLOCK = re.compile(r"^[ \t]*```sh \{\.walkthrough\}\n(.*?)^[ \t]*```", re.S | re.M)
README = ROOT / "README.md"
# The whole walk-through: the tutorial, of which README.md has the minute's version.
WALKTHROUGH = ROOT / "docs" / "tutorials" / "walkthrough.md"


def walkthrough_documents() -> list[Path]:
    """README.md and the pages of docs/ that hold walk-through blocks."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [path for path in [README, *pages] if BLOCK.search(path.read_text())]


def walkthrough_blocks(readme: str) -> list[str]:
    blocks = []
    for match in BLOCK.finditer(readme):
        lines = match.group(1).splitlines()
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        blocks.append("\n".join(line[indent:] for line in lines))
    return blocks


def expectations(blocks: list[str]) -> list[str]:
    return [
        line.split("# ->", 1)[1].strip()
        for block in blocks
        for line in block.splitlines()
        if line.lstrip().startswith("# ->")
    ]


def test_the_walkthroughs_go_from_the_first_call_to_get_task():
    assert {README, WALKTHROUGH} <= set(walkthrough_documents())
    minute = "\n".join(walkthrough_blocks(README.read_text()))
    whole = "\n".join(walkthrough_blocks(WALKTHROUGH.read_text()))
    for step in ("countersign_info --exports", "support send", "code-reviewer reply", "deployer send",
                 "/api/v1/interactions", "/answer", "deployer get"):  # fmt: skip
        assert step in whole, step
    for step in ("countersign_info --exports", "support send", "deployer send", "/answer",
                 "deployer get"):  # fmt: skip
        assert step in minute, step
    for document in walkthrough_documents():
        script = "\n".join(walkthrough_blocks(document.read_text()))
        # Each document stands alone (its own tokens), with nothing to fill in by hand.
        assert script.startswith('eval "$(.venv/bin/python manage.py countersign_info'), document
        assert "<id>" not in script and "<ctx>" not in script, document


@pytest.fixture
def make_run(tmp_path):
    """`make run` on the embedded default (SQLite, filesystem broker) in a scratch VAR_DIR."""
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_", "CELERY_", "MAKE", "MFLAGS", "OPENAI_"))
    }
    env.update(VAR_DIR=str(tmp_path / "var"), PORT=str(port), ENV_FILE="", DEBUG="true")
    log = tmp_path / "run.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["make", "run"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "Press Ctrl-C to stop." not in log.read_text():
            assert process.poll() is None, f"make run exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no banner after 120 s:\n{log.read_text()}"
            time.sleep(0.5)
        yield env, port, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def run_walkthrough(document: Path, env: dict, port: int, log: Path) -> None:
    """The document's blocks in one bash; each of its promises found in order."""
    blocks = walkthrough_blocks(document.read_text())
    script = "set -euo pipefail\n" + "\n".join(blocks).replace(
        "127.0.0.1:8000", f"127.0.0.1:{port}"
    )
    # One stream, as in a terminal, so that the promises can be checked in order.
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=300,
    )  # fmt: skip
    output = result.stdout
    name = document.relative_to(ROOT)
    assert result.returncode == 0, (
        f"the walk-through of {name} failed:\n{output}\n--- make run:\n{log.read_text()}"
    )
    position = 0
    for expected in expectations(blocks):
        found = output.find(expected, position)
        assert found >= 0, f"{name}: {expected!r} missing (in order) from:\n{output}"
        position = found + len(expected)


def test_the_walkthroughs_run_by_copy_paste_against_make_run(make_run):
    env, port, log = make_run
    banner = log.read_text().split("Countersign is running at", 1)[1]
    # The banner is the last thing make run printed, and it offers what the blocks use.
    assert "export TOKEN=cs_" in banner and "export OPERATOR_TOKEN=cs_" in banner
    documents = walkthrough_documents()
    assert {README, WALKTHROUGH} <= set(documents)
    for document in documents:
        run_walkthrough(document, env, port, log)
    # A static file, as every page loads: whitenoise under ASGI once warned on each.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/static/countersign.css") as css:
        assert css.status == 200
    time.sleep(0.5)
    # What make run printed while serving it: one line per event, none of the old noise.
    printed = log.read_text()
    assert printed.index(" ready.") < printed.index("Countersign is running at")
    for noise in ("No hostname was supplied", "lifespan", "synchronous iterators",
                  "Sending due task", "-------------- celery@"):  # fmt: skip
        assert noise not in printed, noise
    lines = [line for line in printed.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(lines) == len(set(lines)), "a warning was printed twice"


def a2a_sh(*args, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("TOKEN", "A2A_BASE")}
    return subprocess.run(
        [str(ROOT / "scripts" / "a2a.sh"), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a2a_sh_says_what_is_missing_or_wrong():
    no_token = a2a_sh("support", "send", "hi")
    assert no_token.returncode == 2 and "set TOKEN first" in no_token.stderr
    usage = a2a_sh("support", "dance", "hi", TOKEN="cs_x")
    assert usage.returncode == 2 and "usage: scripts/a2a.sh" in usage.stderr
    down = a2a_sh("support", "send", "hi", TOKEN="cs_x", A2A_BASE=f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 2 and "is `make run` running?" in down.stderr
    assert down.stdout == ""


def test_the_banner_has_a_command_for_every_demo_agent_but_the_conformance_one():
    from config.banner import AGENT_EXAMPLES

    files = {path.stem for path in (ROOT / "runtime" / "agents").glob("*.md")}
    # The MCP gateway has lines of its own (config.banner.gateway_note).
    assert files - set(AGENT_EXAMPLES) == {"tck", "gateway"}


def test_the_banner_gives_the_gateways_url_and_header():
    from config.banner import banner

    demo = {
        "token": "cs_demo",
        "agents": {},
        "gateways": {"gateway": "/mcp/demo/gateway/"},
        "logins": {
            "operator": {"email": "o@x.test", "password": "p"},
            "admin": {"email": "a@x.test", "password": "p"},
        },
    }
    text = banner(demo, "http://127.0.0.1:8000", environ={})
    assert "URL:    http://127.0.0.1:8000/mcp/demo/gateway/" in text
    assert "header: Authorization: Bearer cs_demo" in text
    assert "http://127.0.0.1:8000/gateways/" in text
