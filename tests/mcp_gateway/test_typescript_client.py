"""A second real MCP client: the TypeScript SDK's (tests/mcp_client_ts, installed by `make
install`) lists the demo gateway's tools and makes a held call, which waits for an operator's
approval over REST while it hears who is asked."""

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from runtime.agents.agent_models import DemoRecord
from tests.mcp_gateway.test_gateway import gateway_url, open_approval, rest_answer

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT = Path(__file__).resolve().parents[1] / "mcp_client_ts" / "client.mjs"


def test_the_typescript_sdk_lists_and_makes_a_held_call(stack, demo):
    assert shutil.which("node"), "Node.js runs the TypeScript client (make install)"
    assert (CLIENT.parent / "node_modules" / "@modelcontextprotocol" / "sdk").exists(), (
        "run make install"
    )
    arguments = {"build": "ts-1", "environment": "staging"}
    done: dict = {}

    def run():
        done["process"] = subprocess.run(
            [
                "node",
                str(CLIENT),
                gateway_url(stack),
                demo["token"],
                "deploy__deploy_build",
                json.dumps(arguments),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    interaction = open_approval()
    assert rest_answer(stack, demo, interaction, approved=True).status_code == 200
    thread.join(120)
    process = done["process"]
    assert process.returncode == 0, process.stderr
    out = json.loads(process.stdout.strip().splitlines()[-1])
    assert [tool["name"] for tool in out["tools"]] == ["deploy__deploy_build"]
    assert out["result"].get("isError") in (None, False)
    assert out["result"]["structuredContent"]["build"] == "ts-1"
    assert out["result"]["_meta"]["countersign/receipt"]["decision"] == "approved"
    assert "Waiting for approval by admins, operators." in out["progress"]
    assert DemoRecord.objects.get(kind="deployment").data == arguments
