"""Allowed tool calls through the MCP gateway against the same upstream MCP server called
directly: calls per second and the p50 each way, and the gateway's p50 overhead per call.

Starts an upstream MCP server (FastMCP, stateful, one ``echo`` tool) and Countersign's web
process (uvicorn, config.asgi) on local ports, seeds a tenant (a new ``bench-…`` one each run)
with a partner token, the upstream as its MCP tool server and a gateway that allows its calls,
then makes N sequential ``tools/call`` on one MCP session (the official ``mcp`` Python client):
first to the upstream directly, then through the gateway, alternating rounds.

Run by hand, never in the test run (see bench/README.md):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench VAR_DIR=$PWD/var/bench \\
      .venv/bin/python bench/mcp_gateway.py 500
"""

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from bench.waiters import free_port  # noqa: E402

UPSTREAM = """
import sys, uvicorn
json_response = sys.argv[2] == "json"
from mcp.server.fastmcp import FastMCP
mcp = FastMCP("bench-upstream", json_response=json_response, log_level="WARNING")
@mcp.tool(description="Echo the message.")
def echo(message: str) -> str:
    return message
uvicorn.run(mcp.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def wait_up(url: str, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{what} did not start")


async def timed_calls(url: str, token: str | None, n: int) -> list[float]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = await session.list_tools()
        name = next(t.name for t in tools.tools if t.name.endswith("echo"))
        for _ in range(20):  # warm up: connections, caches, the upstream session
            await session.call_tool(name, {"message": "warm"})
        times = []
        for i in range(n):
            start = time.perf_counter()
            result = await session.call_tool(name, {"message": f"m{i}"})
            times.append(time.perf_counter() - start)
            assert not result.isError, result
        return times


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=500, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--upstream",
        choices=["sse", "json"],
        default="sse",
        help="how the upstream answers a POST: an SSE stream (the default) or a JSON body",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="record the web process with py-spy (PYSPY, or the venv's) during the gateway's "
        "calls: collapsed stacks of the thread holding the GIL",
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["PUSH_ALLOW_PRIVATE_HOSTS"] = "true"

    up_port, web_port = free_port(), free_port()
    upstream = subprocess.Popen(
        [str(BIN / "python"), "-c", UPSTREAM, str(up_port), args.upstream], cwd=ROOT
    )
    web = None
    try:
        import django

        django.setup()
        import logging

        from django.core.management import call_command

        from runtime.agents.agent_models import ToolServer
        from runtime.agents.agentfile import agent_upsert, parse_agent_file
        from runtime.tools.servers import tool_server_refresh
        from tenants.models import Tenant
        from tenants.tokens import api_token_create

        logging.disable(logging.INFO)
        call_command("migrate", verbosity=0)
        up_url = f"http://127.0.0.1:{up_port}/mcp"
        wait_up(up_url, "the upstream server")
        tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="Bench")
        row = ToolServer.objects.create(tenant=tenant, name="up", kind="mcp", url=up_url)
        tool_server_refresh(server=row)
        path = Path(os.environ.get("VAR_DIR", "var/bench")) / "gateway-AGENT.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "---\nname: gw\ndescription: bench\ngateway: {}\n"
            "tools: [{server: up}]\npolicy: {up: allow}\n---\n"
        )
        agent_upsert(tenant=tenant, spec=parse_agent_file(path))
        _, token = api_token_create(tenant=tenant, subject="partner:bench", name="bench")

        web = subprocess.Popen(
            [str(BIN / "uvicorn"), "config.asgi:application", "--port", str(web_port)]
            + ["--no-access-log", "--log-level", "warning"],
            cwd=ROOT,
            env={**os.environ, "DEBUG": "false", "ALLOWED_HOSTS": "127.0.0.1"}
            | {"SECRET_KEY": os.environ.get("SECRET_KEY") or uuid.uuid4().hex * 2},
        )
        wait_up(f"http://127.0.0.1:{web_port}/healthz", "the web process")
        gw_url = f"http://127.0.0.1:{web_port}/mcp/{tenant.slug}/gw/"
        direct, gateway = [], []
        spy = None
        if args.profile:
            spy = subprocess.Popen(
                [os.environ.get("PYSPY") or str(BIN / "py-spy"), "record", "-p", str(web.pid)]
                + ["-r", "200", "--gil", "--nonblocking", "-f", "raw", "-o", args.profile],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        web_cpu = 0.0
        for r in range(args.rounds):
            direct += asyncio.run(timed_calls(up_url, None, args.n))
            before = _cpu_seconds(web.pid)
            gateway += asyncio.run(timed_calls(gw_url, token, args.n))
            web_cpu += _cpu_seconds(web.pid) - before
            print(
                f"round {r + 1}: direct p50 {statistics.median(direct) * 1000:.2f} ms, "
                f"gateway p50 {statistics.median(gateway) * 1000:.2f} ms"
            )
        d50, g50 = statistics.median(direct), statistics.median(gateway)
        print(f"{len(direct)} calls each way, sequential on one session")
        print(f"direct:  {1 / statistics.mean(direct):7.1f} calls/s, p50 {d50 * 1000:.2f} ms")
        print(f"gateway: {1 / statistics.mean(gateway):7.1f} calls/s, p50 {g50 * 1000:.2f} ms")
        print(
            f"ratio (gateway/direct calls/s): {statistics.mean(direct) / statistics.mean(gateway):.2f}"
        )
        print(f"gateway overhead at p50: {(g50 - d50) * 1000:.2f} ms per call")
        print(f"web process CPU per gateway call: {web_cpu / len(gateway) * 1000:.2f} ms")
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(60)
    finally:
        for process in (web, upstream):
            if process is not None:
                process.terminate()
                process.wait(10)


if __name__ == "__main__":
    main()
