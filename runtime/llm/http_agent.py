"""``provider: http``: bring your own agent. At each step of a turn Countersign POSTs the turn so
far to the agent's URL, signed with Standard Webhooks, and the agent answers with one action.

    model:
      provider: http
      url: https://agents.example.com/deployer
      secret: DEPLOYER_AGENT_SECRET    # a credential's name (runtime.llm.credentials): whsec_...
      timeout: 30                      # seconds per request (default 30)

The protocol (the request document, each action, signatures, retries) is written down in
docs/agent-http-protocol.md; its JSON Schemas are runtime/llm/schemas/agent-*.json, and
replies are validated against them. Whatever makes a reply unusable (no answer after the
retries, an HTTP error, a body that is not JSON or not a valid action) raises AgentError: the
turn fails with a message for the partner that says only that the agent failed, and the
detail goes to the log and the transcript's entry, for the admin.
"""

import json
import logging
import random
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from django.conf import settings

from connections.outbound import (
    OutboundRefused,
    check_url,
    guarded_client,
    url_parse,
    webhook_headers,
)
from connections.outbound_limits import ResponseTooLarge
from runtime.llm.actions import (
    Action,
    AdvancePlan,
    AgentError,
    Ask,
    BadToolCall,
    CallTool,
    EmitArtifact,
    Fail,
    Reply,
    SetPlan,
    TurnView,
)
from runtime.llm.credentials import CredentialMissing, credential_value
from runtime.tools.catalog import (
    BUILTIN_SERVER,
    REQUEST_CONNECTION,
    REQUEST_CONNECTION_SCHEMA,
    tools_offered,
    validate_arguments,
)

logger = logging.getLogger(__name__)

# 2: the request names its context (contextId, turn) and its history starts with the
# context's earlier turns (conversation memory); what version 1 sent is unchanged.
PROTOCOL_VERSION = 2
SCHEMAS = Path(__file__).parent / "schemas"
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0
# Attempts per step: 429, 5xx, timeouts and network errors are tried again after a backoff.
ATTEMPTS = 3
RETRY_BASE_SECONDS = 1.0
RETRY_AFTER_MAX_SECONDS = 30.0
# An agent URL is entered by a tenant's admin: any public host, never a private address
# unless PUSH_ALLOW_PRIVATE_HOSTS says so (connections.outbound).
ALLOWED_HOSTS = ("*",)
USER_AGENT = f"Countersign-Agent/{PROTOCOL_VERSION}"
# What the partner reads when the agent failed; the detail is for the admin.
PARTNER_MESSAGE = "The agent could not complete this request."
# What an answer entry of the history carries (not who answered, nor through which channel).
ANSWER_FIELDS = (
    "kind",
    "questionId",
    "value",
    "approved",
    "connected",
    "reason",
    # An operator edited the call before approving it: what was sent instead.
    "edited",
    "step",
    "arguments",
)


class ModelConfigError(ValueError):
    """The ``model`` mapping of an http agent is not usable (runtime.agents.agentfile names the field)."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


def validate_model(model: dict) -> None:
    """Check an AGENT.md ``model`` mapping for ``provider: http``; no network I/O (whether the
    host is public is checked at each request, as it may resolve differently later)."""
    known = {"provider", "url", "secret", "timeout"}
    for key in model:
        if key not in known:
            raise ModelConfigError(key, f"is not a field of the http provider ({sorted(known)})")
    try:
        url_parse(model.get("url"))
    except OutboundRefused as exc:
        raise ModelConfigError("url", str(exc)) from None
    secret = model.get("secret")
    if not isinstance(secret, str) or not secret.strip():
        raise ModelConfigError(
            "secret", "is required: the name of the credential whose whsec_ secret signs requests"
        )
    timeout = model.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ModelConfigError("timeout", "must be a number of seconds")
    if not 0 < timeout <= MAX_TIMEOUT:
        raise ModelConfigError(
            "timeout", f"must be more than 0 and at most {MAX_TIMEOUT:g} seconds"
        )


@cache
def schema(name: str) -> dict:
    """One of the protocol's JSON Schemas: ``request`` or ``action``."""
    return json.loads((SCHEMAS / f"agent-{name}.json").read_text(encoding="utf-8"))


def reply_error(reply: Any) -> str | None:
    """Why ``reply`` is not a valid action (for the admin), or None when it is one."""
    action_schema = schema("action")
    name = reply.get("action") if isinstance(reply, dict) else None
    if isinstance(name, str) and name in action_schema["$defs"]:
        # Against the named action alone: oneOf's errors would list every other action's.
        target = {"$ref": f"#/$defs/{name}", "$defs": action_schema["$defs"]}
    else:
        # No such action: say so, rather than how it fails each of the actions.
        target = {k: action_schema[k] for k in ("type", "required", "properties")}
    validator = jsonschema.Draft202012Validator(target)
    error = jsonschema.exceptions.best_match(validator.iter_errors(reply))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(the reply)"
    return f"the reply is not a valid action at {where}: {error.message}"[:1000]


def history(transcript: list[dict], earlier: Sequence[dict] = ()) -> list[dict]:
    """The context's earlier turns (``turn`` entries, oldest first, as conversation memory
    kept them), then this turn since the caller's message, in the protocol's terms
    (agent-request.json)."""
    out: list[dict] = [{"type": "turn", **record} for record in earlier]
    for entry in transcript[1:]:
        kind = entry.get("type")
        if kind == "action":
            action = {k: v for k, v in entry["action"].items() if k != "error"}
            out.append(
                {
                    "type": "action",
                    "step": entry["step"],
                    "cursor": entry.get("cursor"),
                    "action": action,
                }
            )
        elif kind == "tool_result":
            out.append(
                {
                    k: entry[k]
                    for k in ("type", "step", "ok", "result", "error", "reason")
                    if k in entry
                }
            )
        elif kind == "answer":
            # An approval's or a connection's answer has an empty questionId: left out.
            out.append(
                {"type": "answer", **{k: entry[k] for k in ANSWER_FIELDS if entry.get(k, "") != ""}}
            )
    return out


def tools(agent) -> list[dict]:
    offered = tools_offered(agent)
    if agent.connections_enabled:
        offered.append(
            {
                "server": BUILTIN_SERVER,
                "tool": REQUEST_CONNECTION,
                "description": "Ask a person to connect an app for this tenant.",
                "schema": REQUEST_CONNECTION_SCHEMA,
            }
        )
    return offered


def request_document(view: TurnView) -> dict:
    """The turn so far, as the agent receives it (agent-request.json)."""
    agent = view.agent
    return {
        "version": PROTOCOL_VERSION,
        "taskId": view.task_id,
        "contextId": view.context_id,
        "turn": view.turn,
        "droppedTurns": view.history_dropped,
        "agent": {"slug": agent.slug, "name": agent.name, "instructions": agent.instructions},
        "step": view.actions_taken,
        "skill": view.skill_id or "",
        "message": {
            "messageId": view.message_id,
            "text": view.text,
            "data": list(view.data),
            "files": list(view.files),
        },
        "answers": view.answers,
        "history": history(view.transcript, view.history),
        "connectedApps": sorted(view.connected_apps),
        "plan": list(view.plan),
        "tools": tools(agent),
    }


def call_problem(reply: dict, offered: list[dict]) -> str | None:
    """Why a valid ``call`` reply names a call that cannot be made (a tool not offered,
    arguments that fail its schema), or None. Its error goes back to the agent as the call's
    result, and counts as a bad reply (loop.limits.bad_replies)."""
    spec = next(
        (t for t in offered if t["server"] == reply["server"] and t["tool"] == reply["tool"]),
        None,
    )
    if spec is None:
        return f"unknown tool {reply['server'][:100]} / {reply['tool'][:100]}"
    return validate_arguments(spec.get("schema"), reply.get("arguments", {}))


def action_for(reply: dict, offered: list[dict] | None = None) -> Action:
    """The runtime's action for a valid reply (``reply_error`` returned None); ``offered``:
    the tools of the request, which a ``call`` must name."""
    cursor = reply.get("cursor")
    if reply["action"] == "call" and offered is not None:
        problem = call_problem(reply, offered)
        if problem:
            return BadToolCall(
                tool=f"{reply['server']}/{reply['tool']}"[:200], error=problem, cursor=cursor
            )
    match reply["action"]:
        case "reply":
            return Reply(reply["text"], direct=bool(reply.get("direct", False)), cursor=cursor)
        case "ask":
            choices = tuple(reply.get("choices", ()))
            return Ask(
                question_id=reply["questionId"],
                prompt=reply["prompt"],
                choices=choices,
                allow_custom=bool(reply.get("allowCustom", not choices)),
                cursor=cursor,
            )
        case "call":
            return CallTool(
                server=reply["server"],
                tool=reply["tool"],
                arguments=reply.get("arguments", {}),
                cursor=cursor,
            )
        case "artifact":
            return EmitArtifact(
                artifact_id=reply.get("artifactId") or reply["name"],
                name=reply["name"],
                parts=tuple(reply["parts"]),
                description=reply.get("description", ""),
                cursor=cursor,
            )
        case "plan":
            return SetPlan(steps=tuple(reply["steps"]), cursor=cursor)
        case "progress":
            return AdvancePlan(
                step=reply["step"], state=reply["state"], note=reply.get("note", ""), cursor=cursor
            )
        case "fail":
            return Fail(reply["text"], reject=bool(reply.get("reject", False)), cursor=cursor)
    raise AssertionError(f"no mapping for the valid action {reply['action']!r}")


def backoff_seconds(attempt: int, retry_after: float | None = None) -> float:
    """Exponential backoff with full jitter; an agent's Retry-After (capped) is honoured."""
    ceiling = RETRY_BASE_SECONDS * (2**attempt)
    wait = random.uniform(ceiling / 2, ceiling)
    if retry_after is not None:
        wait = max(wait, min(retry_after, RETRY_AFTER_MAX_SECONDS))
    return wait


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() else None


class Retry(Exception):
    """An attempt that may succeed when tried again (429, 5xx, a timeout, a network error)."""

    def __init__(self, detail: str, wait: float | None = None):
        super().__init__(detail)
        self.detail, self.wait = detail, wait


class HttpAgent:
    def __init__(self, model: dict):
        self.url = model.get("url", "")
        self.secret_name = model.get("secret", "")
        self.timeout = float(model.get("timeout", DEFAULT_TIMEOUT))

    def next_action(self, view: TurnView) -> Action:
        document = request_document(view)
        body = json.dumps(document, separators=(",", ":"))
        # The same step of the same turn has the same id, so that an agent may recognise a
        # request that is asked again (a retry, or a turn resumed by another worker).
        message_id = f"msg_{view.task_id}_{len(view.transcript)}"
        secret = self.secret(view)
        try:
            check_url(self.url, ALLOWED_HOSTS)
        except OutboundRefused as exc:
            raise AgentError(PARTNER_MESSAGE, f"the agent URL is refused: {exc}") from None
        last = ""
        # self.timeout is each attempt's total (connect, send, every read of the reply), and
        # AGENT_REPLY_MAX_BYTES the most of a reply read.
        with guarded_client(
            timeout=self.timeout,
            max_connections=1,
            max_response_bytes=settings.AGENT_REPLY_MAX_BYTES,
        ) as client:
            for attempt in range(ATTEMPTS):
                try:
                    # Signed again for each attempt: a receiver refuses old timestamps (five
                    # minutes in the reference libraries), and attempts may take that long.
                    headers = self.headers(secret, message_id, body)
                    return self.attempt(client, body, headers, document["tools"])
                except Retry as retry:
                    last = retry.detail
                    logger.info("agent request attempt %s: %s", attempt + 1, retry.detail)
                    if attempt + 1 < ATTEMPTS:
                        time.sleep(backoff_seconds(attempt, retry.wait))
        raise AgentError(PARTNER_MESSAGE, f"no usable answer after {ATTEMPTS} attempts: {last}")

    def secret(self, view: TurnView) -> str:
        try:
            return credential_value(tenant=view.agent.tenant, name=self.secret_name)
        except CredentialMissing as exc:
            raise AgentError(PARTNER_MESSAGE, str(exc)) from None

    def headers(self, secret: str, message_id: str, body: str) -> dict:
        try:
            signed = webhook_headers(secret, message_id, body)
        except Exception:
            # Never the library's message: it could quote the secret.
            raise AgentError(
                PARTNER_MESSAGE,
                f"the credential {self.secret_name!r} is not a Standard Webhooks secret "
                "(whsec_ followed by base64)",
            ) from None
        return {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            **signed,
        }

    def attempt(
        self, client: httpx.Client, body: str, headers: dict, offered: list[dict] | None = None
    ) -> Action:
        """One POST: the action, or Retry, or AgentError for what retrying cannot fix."""
        try:
            with client.stream("POST", self.url, content=body, headers=headers) as response:
                status = response.status_code
                if status == 429 or status >= 500:
                    raise Retry(f"HTTP {status}", retry_after(response))
                if not 200 <= status < 300:
                    raise AgentError(PARTNER_MESSAGE, f"the agent answered HTTP {status}")
                content = response.read()
        except ResponseTooLarge as exc:
            # What the agent would send again: not retried.
            raise AgentError(
                PARTNER_MESSAGE, f"the reply is larger than {exc.limit} bytes"
            ) from None
        except httpx.TimeoutException:
            raise Retry(f"timed out after {self.timeout:g}s") from None
        except OutboundRefused as exc:
            raise AgentError(PARTNER_MESSAGE, f"the agent URL is refused: {exc}") from None
        except httpx.HTTPError as exc:
            raise Retry(f"network error: {type(exc).__name__}: {exc}") from None
        try:
            reply = json.loads(content)
        except ValueError as exc:
            raise AgentError(PARTNER_MESSAGE, f"the reply is not JSON: {exc}") from None
        error = reply_error(reply)
        if error:
            raise AgentError(PARTNER_MESSAGE, error)
        return action_for(reply, offered)
