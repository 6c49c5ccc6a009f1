"""Comments and docstrings state the rule they stand for; they never cite what a reader of
the repository cannot open: an issue or its findings by number, a seed document, the design
notes or anything else in a folder beside the repository. (The A2A specification and other
public specifications may be cited by section.)

Every file git tracks is read, code and documents alike, but for those in EXEMPT.
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Each pattern with what it stands for, as the failure says it.
CITATIONS: list[tuple[str, re.Pattern]] = [
    ("an issue by number", re.compile(r"(?<![a-z])issues?[\s#*/_]+\d+", re.IGNORECASE)),
    ("an issue's finding", re.compile(r"\bfindings?[\s#*/]+\d+", re.IGNORECASE)),
    ("the issue", re.compile(r"\bthe issue's\b", re.IGNORECASE)),
    ("a seed document", re.compile(r"\bseeds?[\s#*/]*0\d\d\b", re.IGNORECASE)),
    ("a seed document", re.compile(r"/v\d+[\s#*/]+seed\b", re.IGNORECASE)),
    ("the seeds folder", re.compile(r"\bseeds/")),
    ("the design notes", re.compile(r"\b(?:DESIGN|STYLE)\.md\b")),
    (
        "a folder beside the repository",
        re.compile(r"\.\./shared\b|\bshared/(?:bench|seeds|reference)\b"),
    ),
]

# bench/README.md is a log of past measurement runs, each headed by the work it measured and
# run with a comparison kit kept outside the repository: history, not comments. This file names
# the patterns.
EXEMPT = {"bench/README.md", "tests/test_no_outside_citations.py"}
BINARY_SUFFIXES = (".png", ".ico", ".jpg", ".gif", ".woff", ".woff2", ".pdf", ".gz")


def tracked_files(root: Path = ROOT) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return sorted(
        name
        for name in listed.split("\0")
        if name and name not in EXEMPT and not name.endswith(BINARY_SUFFIXES)
    )


def citations(text: str) -> list[tuple[int, str, str]]:
    """(line, what, the words) of each citation in ``text``; one may span a line break."""
    found = []
    for what, pattern in CITATIONS:
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((line, what, " ".join(match.group().split())))
    return sorted(found)


def test_no_file_cites_an_issue_a_seed_or_notes_outside_the_repository():
    found = []
    for name in tracked_files():
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree, not yet in the index
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{line}: {what}: {words!r}" for line, what, words in citations(text)]

    assert found == [], "\n".join(found)


def test_citations_are_found_across_lines_and_comment_marks():
    text = (
        "# Issue 13: an approval binds its receipt\n"
        "x = 1  # as seed 004 asks\n"
        '"""A 0.x direct send (seed\n004) and (issue\n    28, finding 5)."""\n'
        "# see the issue's five\n"
        "# AGENT.md (as in the interactions/v1\n# seed) and ../shared/seeds/000.md\n"
        "# DESIGN.md says so; issues 13 and 31\n"
        "def test_the_names_issue_24_removed():\n"
    )

    assert [(line, what) for line, what, _ in citations(text)] == [
        (1, "an issue by number"),
        (2, "a seed document"),
        (3, "a seed document"),
        (4, "an issue by number"),
        (5, "an issue's finding"),
        (6, "the issue"),
        (7, "a seed document"),
        (8, "a folder beside the repository"),
        (8, "a seed document"),
        (8, "the seeds folder"),
        (9, "an issue by number"),
        (9, "the design notes"),
        (10, "an issue by number"),
    ]


def test_words_that_only_look_like_citations_pass():
    text = (
        "from tests.a2a_endpoint.test_seed004 import send\n"
        "seed_demo(tenant)  # seeds the demo tenant; random.seed(42)\n"
        "# A token is issued to 2 callers; A2A section 3.6 says so\n"
        "# shared/ state between threads; tissue 4\n"
    )

    assert citations(text) == []
