"""A web process raises its own open-files limit: each waiting caller holds a socket, and a
soft limit of 1,024 (systemd's default) refused the thousand-and-first (bench/waiters.py)."""

import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _limit_then_import_asgi(soft: int) -> int:
    def lower():
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, config.asgi; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])",
        ],
        cwd=ROOT,
        preexec_fn=lower,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


def test_the_web_process_raises_its_soft_open_files_limit_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        raise AssertionError(f"this machine's hard limit ({hard}) leaves nothing to raise")
    expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert _limit_then_import_asgi(256) == expected
