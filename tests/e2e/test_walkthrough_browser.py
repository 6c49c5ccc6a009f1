"""The walk-through's browser step (docs/tutorials/walkthrough.md): the deployer's held call,
approved by the operator in the inbox of a live `make run` (the REST variant runs in
tests/test_walkthrough.py)."""

import subprocess

from tests.test_walkthrough import ROOT, WALKTHROUGH, expectations, make_run, walkthrough_blocks

__all__ = ["make_run"]  # the fixture, shared with the REST walk-through


def bash(script: str, env: dict, port: int) -> str:
    script = "set -euo pipefail\n" + script.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    return result.stdout


def test_the_walkthrough_with_the_approval_in_the_browser(make_run, browser, tmp_path):
    env, port, log = make_run
    blocks = walkthrough_blocks(WALKTHROUGH.read_text())
    tokens = blocks[0]
    [held] = [b for b in blocks if "deployer send" in b]
    [result] = [b for b in blocks if "deployer get" in b]
    state = tmp_path / "task"
    out = bash(f'{tokens}\n{held}\necho "$TASK" > {state}', env, port)
    assert "TASK_STATE_AUTH_REQUIRED" in out

    # What the walk-through says: log in as the demo operator, open the item, press Approve.
    page = browser.new_context().new_page()
    base = f"http://127.0.0.1:{port}"
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Email").fill("operator@demo.test")
    page.get_by_label("Password").fill("countersign-demo")
    page.get_by_role("button", name="Sign In").click()
    page.wait_for_url(f"{base}/inbox/")
    page.locator('#inbox-list a[id^="item-"]').first.click()
    page.get_by_role("button", name="Approve").click()
    page.get_by_text("Approved.").wait_for()

    out = bash(f"{tokens}\nTASK=$(cat {state})\n{result}", env, port)
    for expected in expectations([result]):
        assert expected in out, out
    assert "Traceback" not in log.read_text()
