"""What `make run` prints once the servers are up, and `manage.py countersign_info` on demand:
the URL, the logins, `export TOKEN=...` lines and a command to paste for each demo agent.

``demo`` is seed_demo's ``--json`` summary; nothing here touches the database.
"""

import json
import os
import shlex

from config.env import listen_url

# The development mail backend (config.outbox): what it keeps, /dev/outbox/ shows.
OUTBOX_BACKEND = "config.outbox.OutboxBackend"

# What to say to each demo agent (runtime/agents/*.md): the commands the banner prints.
AGENT_EXAMPLES = {
    "support": ['scripts/a2a.sh support send "How do I reset my password?"'],
    "code-reviewer": [
        'TASK=$(scripts/a2a.sh code-reviewer send "Review this diff of payments-api")',
        'scripts/a2a.sh code-reviewer reply "$TASK" main',
    ],
    "deployer": [
        'TASK=$(scripts/a2a.sh deployer send "deploy build 2026.10.06-1 to staging")',
        "#   ...approve it in the inbox, then:",
        'scripts/a2a.sh deployer get "$TASK" --wait',
    ],
    "coder": ['scripts/a2a.sh coder send "open a pull request on payments-api: fix rounding"'],
    "assistant": ['scripts/a2a.sh assistant send "deploy build 2026.10.06-1 to staging"'],
    "gate": [
        "TASK=$(scripts/a2a.sh gate send "
        """'{"tool": "payments/send", "arguments": {"amount": 250, "currency": "EUR", "to": "ACME"}}')""",
        "#   ...approve it in the inbox, then (the signed receipt):",
        'scripts/a2a.sh gate get "$TASK" --wait',
    ],
}


def base_url(environ) -> str:
    """Where `make run` listens, from the HOST and PORT it reads: the settings' LISTEN_URL,
    which links in e-mails and Slack messages use too unless PUBLIC_BASE_URL is set."""
    return listen_url(environ.get("HOST", "127.0.0.1"), environ.get("PORT", "8000"))


def curl_command(base: str, path: str, token: str, text: str, message_id: str) -> str:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": message_id,
                    "role": "ROLE_USER",
                    "parts": [{"text": text}],
                }
            },
        }
    )
    return f"""  curl -s {base}{path} \\
    -H 'Authorization: Bearer {token}' -H 'A2A-Version: 1.0' \\
    -H 'Content-Type: application/json' \\
    -d {shlex.quote(body)}"""


def exports(demo: dict, base: str) -> str:
    """Lines to paste (or eval) into a shell: the tokens and the base URL (scripts/a2a.sh)."""
    lines = [f"export TOKEN={demo['token']}"]
    if demo.get("operator_token"):
        lines.append(f"export OPERATOR_TOKEN={demo['operator_token']}")
    lines.append(f"export A2A_BASE={base}")
    return "\n".join(lines)


def assistant_note(demo: dict, base: str, environ=None) -> str:
    """The banner's lines on the `assistant` agent: how to call it when seed_demo added it
    (a model is configured), else how to turn it on."""
    environ = os.environ if environ is None else environ
    path = demo["agents"].get("assistant")
    if path is None:
        return """The demo runs offline (scripted agents). To add an `assistant` agent on a real model:
  export OPENAI_API_KEY=...                       # your key (any value for a local server)
  export OPENAI_MODEL=gpt-4o-mini                 # optional, the model name
  export OPENAI_BASE_URL=http://127.0.0.1:11434/v1  # optional: Ollama, vLLM, ... (loopback is fine)
then run `make run` again; its deployments and pull requests wait for your approval."""
    model = environ.get("OPENAI_MODEL") or "gpt-4o-mini"
    where = environ.get("OPENAI_BASE_URL") or "api.openai.com"
    call = curl_command(
        base, path, demo["token"], "deploy build 2026.10.06-1 to staging", "assistant-1"
    )
    return f"""Ask the assistant (model {model} at {where}); its deployment waits in the inbox:
{call}"""


def agent_commands(demo: dict) -> str:
    lines = []
    for slug, examples in AGENT_EXAMPLES.items():
        if slug not in demo["agents"]:
            continue
        lines.append(f"  # {slug}")
        lines.extend(f"  {line}" for line in examples)
    return "\n".join(lines)


def links_note(base: str, environ) -> str:
    """The banner's lines on where links in e-mails and Slack messages point (one host with
    the banner's, unless PUBLIC_BASE_URL says otherwise: a tunnel) and where development's
    e-mails are read."""
    lines = []
    public = (environ.get("PUBLIC_BASE_URL") or environ.get("NOTIFY_BASE_URL") or "").rstrip("/")
    if public and public != base:
        lines.append(f"\n  links in e-mails and Slack point at {public} (PUBLIC_BASE_URL)")
    debug = environ.get("DEBUG", "true").strip().lower() not in ("0", "false", "no", "off", "")
    if debug and environ.get("EMAIL_BACKEND", OUTBOX_BACKEND) == OUTBOX_BACKEND:
        lines.append(f"\n  e-mails sent:   {base}/dev/outbox/   (kept here, never mailed)")
    return "".join(lines)


def gateway_note(demo: dict, base: str) -> str:
    """The banner's lines on the demo's MCP gateways: the URL and header an MCP client needs,
    and the page that gives its configuration to paste."""
    gateways = demo.get("gateways") or {}
    if not gateways:
        return ""
    lines = ["", "Or point an MCP client (Streamable HTTP) at the demo's gateway:"]
    for path in gateways.values():
        lines.append(f"  URL:    {base}{path}")
    lines.append(f"  header: Authorization: Bearer {demo['token']}")
    lines.append(f"  its deployments wait in the inbox; client configuration: {base}/gateways/")
    return "\n".join(lines) + "\n"


def banner(demo: dict, base: str, environ=None) -> str:
    operator = demo["logins"]["operator"]
    admin = demo["logins"]["admin"]
    platform = demo["logins"].get("platform")
    platform_line = (
        f"\n  platform staff: {platform['email']} / {platform['password']}  "
        f"(superuser: every tenant in {base}/admin/)"
        if platform
        else ""
    )
    agent_path = demo["agents"].get("support", "/a2a/demo/support")
    call = curl_command(base, agent_path, demo["token"], "Hello", "hello-1")
    paste = "\n".join(f"  {line}" for line in exports(demo, base).splitlines())
    links = links_note(base, os.environ if environ is None else environ)
    return f"""
Countersign is running at {base}/
  operator login: {operator["email"]} / {operator["password"]}   (inbox: {base}/inbox/)
  admin login:    {admin["email"]} / {admin["password"]}  (the demo tenant's admin: {base}/admin/){platform_line}{links}
  partner token:  {demo["token"]}   ({demo.get("subject", "partner")}: calls agents)
  operator token: {demo.get("operator_token", "-")}   (decides over {base}/api/v1/)

Paste into a shell in this folder:
{paste}

Then call the demo agents (scripts/a2a.sh prints the state and the answer; README "Walk-through"):
{agent_commands(demo)}

Or with curl:
{call}

{assistant_note(demo, base, environ)}
{gateway_note(demo, base)}
Print this again with `.venv/bin/python manage.py countersign_info` (fresh tokens).
Press Ctrl-C to stop.
"""
