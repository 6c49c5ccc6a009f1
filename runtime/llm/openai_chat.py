"""``provider: openai``: any OpenAI-compatible Chat Completions endpoint (OpenAI, Azure OpenAI,
vLLM, Ollama, LiteLLM, Together, Groq...) through the official ``openai`` package.

    model:
      provider: openai
      model: gpt-4o-mini
      base_url: https://llm.example.com/v1   # optional; else OPENAI_BASE_URL, else OpenAI's
      credential: OPENAI_API_KEY             # the name of the credential (runtime.llm.credentials)
      temperature: 0.2                       # optional
      max_output_tokens: 800                 # optional (sent as max_completion_tokens)
      reasoning_effort: low                  # optional: PARAMETERS, checked at load

The agent's instructions are the system message; the conversation's earlier turns follow
(conversation memory, runtime.turn.memory), then the transcript: the caller's message with its
data and files, then each reply of the model and, for each of its tool calls, what came of it
(a tool's result or error, a denial and its reason, an approval's reason, an answer, a
connection). Like every provider it keeps no state: a resumed turn rebuilds the same
conversation from the transcript. A reply with tool calls becomes one ``ModelTurn`` whose
actions the turn loop applies one step each.

A reply is read as parsed JSON, not as the SDK's typed model, so that what real servers send
is taken (content as a list of parts, arguments as an object, a refusal, no usage) and what
cannot be used (no choices, not JSON, an empty message, a bad call) becomes a BadReply or a
BadToolCall whose error goes back to the model, a bounded number of times in a row
(``loop.limits.bad_replies``, runtime.turn.runner), instead of an exception that crashes the
turn.

The credential goes in the Authorization header only: never into a prompt, a log line or an
error message. A tenant's ``base_url`` goes through the outbound guard (private addresses
only when PUSH_ALLOW_PRIVATE_HOSTS is on); the installer's OPENAI_BASE_URL is trusted.

What ``model:`` may say is runtime.llm.openai_spec's; the messages and tools sent,
runtime.llm.openai_conversation's; the actions a reply holds, runtime.llm.openai_reply's; this
module sends the request (the process's clients, retries, the credential) and hands the reply
over. While the
turn's caller streams, the reply is asked for as a stream and read as it comes
(runtime.llm.openai_stream: live output), and put back together into the reply the API
sends otherwise.
"""

import hashlib
import itertools
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai
from django.conf import settings

from connections.outbound import (
    OutboundRefused,
    check_url,
    connection_dropped,
    guarded_client,
)
from connections.outbound_limits import too_large_cause
from runtime.llm.actions import LiveWriter, ModelError, ModelTurn, TurnView
from runtime.llm.credentials import CredentialMissing
from runtime.llm.openai_conversation import ToolNames, conversation, tool_definitions
from runtime.llm.openai_reply import NOT_JSON, bad_reply, content_text, reply_turn, usage_of
from runtime.llm.openai_spec import (
    CHAT_PARAMETERS,
    DEFAULT_CREDENTIAL,
    MAX_TOKENS_FIELDS,
    request_parameters,
)
from runtime.llm.openai_stream import StreamBroken, chat_stream_read, stream_reply
from runtime.llm.summary_ask import (
    SUMMARY_INSTRUCTIONS,
    SUMMARY_TOKENS,
    SummaryAsk,
    summary_prompt,
)

logger = logging.getLogger(__name__)
RETRY_STATUSES = {408, 409, 429}
MAX_BACKOFF_SECONDS = 30.0
# Idle connections are dropped after this, before the 5 s idle timeout of common servers
# (uvicorn, Node) and well before load balancers' and NATs' (60 s and more), which may drop
# a connection without telling us; a close that still races a request is retried at once.
KEEPALIVE_SECONDS = 4.0
CLIENTS_PER_PROCESS = 64
CLIENT_SHARDS = 8
# The request goes out with the client's ``post``, the SDK's way to send a body as it is, and
# not with ``chat.completions.create``: that one walks every request (the tools' schemas and
# all) through the SDK's typed transform, which changes nothing in a body of plain JSON values
# and cost a millisecond of CPU per call, and its first use imports the SDK's resources
# (half a second, with every turn's thread waiting on the import; bench/slow_turns.py).
# ``security`` is what ``create`` asks for: the client's key as a bearer token.
CALL_OPTIONS: openai.RequestOptions = {"security": {"bearer_auth": True}}


# --- the provider ------------------------------------------------------------------------------


class ClientCache:
    """The process's openai clients, each with its own pool of guarded HTTP connections, so
    that a model call reuses a connection (and its TLS session) instead of building a client,
    an SSL context and a connection every time. One client per (base_url, allow_private,
    timeout, hash of the key): ``openai.OpenAI`` binds its key when made, so each key gets
    its own client and a tenant's key is never sent with another's request; the key itself is
    never part of the cache's key. Thread-safe (a worker runs turns on many threads at once)
    and bounded: the least recently used client beyond ``size`` is closed once no call holds
    it."""

    def __init__(self, size: int = CLIENTS_PER_PROCESS):
        self.size = size
        self.lock = threading.Lock()
        self.entries: OrderedDict[tuple, ClientEntry] = OrderedDict()

    @contextmanager
    def lease(self, key: tuple, make: Callable[[], openai.OpenAI]) -> Iterator[openai.OpenAI]:
        retired: list[ClientEntry] = []
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                # Made under the lock: 200 threads starting at once make one client, not 200.
                entry = self.entries[key] = ClientEntry(make())
                while len(self.entries) > self.size:
                    _, old = self.entries.popitem(last=False)
                    old.retired = True
                    if old.users == 0:
                        retired.append(old)
            else:
                self.entries.move_to_end(key)
            entry.users += 1
        for old in retired:
            old.client.close()
        try:
            yield entry.client
        finally:
            with self.lock:
                entry.users -= 1
                close = entry.retired and entry.users == 0
            if close:
                entry.client.close()

    def clear(self) -> None:
        with self.lock:
            entries, self.entries = list(self.entries.values()), OrderedDict()
            for entry in entries:
                entry.retired = True
            idle = [entry for entry in entries if entry.users == 0]
        for entry in idle:
            entry.client.close()


class ClientEntry:
    def __init__(self, client: openai.OpenAI):
        self.client = client
        self.users = 0
        self.retired = False


CLIENTS = ClientCache()
_thread_shards = itertools.count()
_this_thread = threading.local()


def thread_shard() -> int:
    """This thread's client shard (0..CLIENT_SHARDS-1), dealt round-robin as threads first
    ask; a thread keeps its shard."""
    shard = getattr(_this_thread, "shard", None)
    if shard is None:
        shard = _this_thread.shard = next(_thread_shards) % CLIENT_SHARDS
    return shard


class OpenAIChatModel:
    # Where the request goes, and which of the pass-through parameters it takes.
    path = "/chat/completions"
    parameters = CHAT_PARAMETERS
    # Live output: asked with these fields, the reply streams (openai_stream); the usage comes
    # in a last chunk.
    streams = True
    stream_fields: dict = {"stream": True, "stream_options": {"include_usage": True}}

    def __init__(self, model: dict):
        self.spec = model
        self.model = str(model.get("model", ""))
        self.credential_name = model.get("credential") or DEFAULT_CREDENTIAL

    def next_action(self, view: TurnView, live: LiveWriter | None = None) -> ModelTurn:
        names = ToolNames(view.tools)
        reply = self.complete(view, self.request(view, names), live)
        return self.turn_from(view, names, reply)

    def stream_read(self, events, live: LiveWriter) -> dict:
        return chat_stream_read(events, live, content_text)

    def request(self, view: TurnView, names: ToolNames) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": conversation(view),
            "tools": tool_definitions(view, names),
        }
        if self.spec.get("temperature") is not None:
            request["temperature"] = self.spec["temperature"]
        if self.spec.get("max_output_tokens") is not None:
            field = self.spec.get("max_tokens_field") or MAX_TOKENS_FIELDS[0]
            request[field] = self.spec["max_output_tokens"]
        request.update(request_parameters(self.spec, self.parameters))
        return request

    # --- a summary of a held call (runtime.llm.summary_writing) ---

    def summarise(self, ask: SummaryAsk, credential: Callable[..., str]) -> str:
        """The model's summary of a held call: one request of the instructions and the
        ask's message alone (no tools, nothing else of the turn), with the agent's model,
        endpoint and credential, retried as a turn's requests are."""
        view = TurnView(text="", message_id="", credential=credential)
        return self.summary_text(self.complete(view, self.summary_request(ask)))

    def summary_request(self, ask: SummaryAsk) -> dict[str, Any]:
        field = self.spec.get("max_tokens_field") or MAX_TOKENS_FIELDS[0]
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SUMMARY_INSTRUCTIONS},
                {"role": "user", "content": summary_prompt(ask)},
            ],
            field: SUMMARY_TOKENS,
        }

    def summary_text(self, reply: Any) -> str:
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ModelError("the summary's reply is not a chat completion")
        message = choices[0].get("message")
        return content_text(message.get("content")) if isinstance(message, dict) else ""

    # --- the call ---

    def client(self, view: TurnView, secret: str):
        """The process's client for this base_url and key (a context manager, ClientCache)."""
        timeout = float(settings.MODEL_TIMEOUT_SECONDS)
        base_url = self.spec.get("base_url")
        # None: as PUSH_ALLOW_PRIVATE_HOSTS says, read at each connect.
        allow_private: bool | None = None
        if base_url:
            # Entered by a tenant's admin: the outbound guard decides (as for push).
            try:
                check_url(base_url, ["*"])
            except OutboundRefused as exc:
                raise ModelError(f"The model's base_url is refused: {exc}") from None
        elif settings.OPENAI_BASE_URL:
            # The installer's: trusted, may be a model server on this host.
            base_url = settings.OPENAI_BASE_URL
            allow_private = True
        key_hash = hashlib.sha256(secret.encode()).hexdigest()
        # The threads of a worker share CLIENT_SHARDS clients per key and URL, by thread:
        # httpcore's pool scans all its connections under one lock at every request and every
        # response, so one pool of 200 connections taken by 200 threads at once costs CPU
        # that grows with the square of the calls in flight (bench/slow_turns.py).
        shard = thread_shard()

        def make() -> openai.OpenAI:
            http = guarded_client(
                timeout=timeout,
                # As many calls at once as the worker runs turns; more wait for a connection.
                max_connections=max(
                    10, -(-int(settings.CELERY_WORKER_CONCURRENCY) // CLIENT_SHARDS)
                ),
                allow_private=allow_private,
                keepalive_expiry=KEEPALIVE_SECONDS,
                # One attempt's total (connect, send, every read) and its reply's size.
                deadline=timeout,
                max_response_bytes=settings.MODEL_REPLY_MAX_BYTES,
            )
            return openai.OpenAI(
                api_key=secret, base_url=base_url, http_client=http, max_retries=0, timeout=timeout
            )

        return CLIENTS.lease((base_url or "", allow_private, timeout, key_hash, shard), make)

    def complete(self, view: TurnView, request: dict, live: LiveWriter | None = None):
        if view.credential is None:
            raise ModelError(f"The credential {self.credential_name!r} is not available here.")
        try:
            # A tenant's own base_url gets the tenant's own key, never the installer's.
            secret = view.credential(
                self.credential_name, environment=not self.spec.get("base_url")
            )
        except CredentialMissing:
            raise ModelError(
                f"The model's credential {self.credential_name!r} is not set for this tenant."
            ) from None
        attempts = max(1, int(settings.MODEL_MAX_ATTEMPTS))
        dropped_retried = False
        with self.client(view, secret) as client:
            attempt = 0
            while attempt < attempts:
                attempt += 1
                retry_after = None
                try:
                    if live is not None:
                        live.restart()  # an attempt's text starts over
                        body = {**request, **self.stream_fields}
                        return stream_reply(
                            client, self.path, body, CALL_OPTIONS, self.stream_read, live
                        )
                    # As JSON, not as the SDK's typed model: a reply is read by hand
                    # (``turn_from``), so that what real servers send (content as a list of
                    # parts, arguments as an object, no usage) is taken, and what cannot be
                    # used goes back to the model instead of crashing the turn.
                    return client.post(
                        self.path, body=request, cast_to=object, options=CALL_OPTIONS
                    )
                except StreamBroken as exc:
                    why = str(exc)
                except openai.APITimeoutError:
                    why = f"no answer within {settings.MODEL_TIMEOUT_SECONDS}s"
                except openai.APIConnectionError as exc:
                    refused = refused_cause(exc)
                    if refused is not None:
                        raise ModelError(f"The model's base_url is refused: {refused}") from None
                    too_large = too_large_cause(exc)
                    if too_large is not None:
                        # The same request would get the same reply: not retried.
                        raise ModelError(
                            f"The model's reply is larger than {too_large.limit} bytes "
                            "(MODEL_REPLY_MAX_BYTES)."
                        ) from None
                    if connection_dropped(exc) and not dropped_retried:
                        # Most likely a kept-alive connection the server closed as we sent:
                        # once per call, again at once (on another connection), no attempt
                        # counted.
                        dropped_retried = True
                        attempt -= 1
                        logger.info(
                            "model call: the connection was dropped (%s); retrying at once",
                            type(exc.__cause__ or exc).__name__,
                        )
                        continue
                    why = "the connection failed"
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    if status not in RETRY_STATUSES and status < 500:
                        raise ModelError(self.refusal(exc, secret)) from None
                    why = f"HTTP {status}"
                    retry_after = retry_after_seconds(exc.response.headers)
                except ValueError:
                    # A 2xx whose body is not JSON: a bad reply, which goes back to the model.
                    return NOT_JSON
                if attempt == attempts:
                    raise ModelError(
                        f"The model provider did not answer after {attempts} attempts "
                        f"(last: {why})."
                    )
                delay = retry_after
                if delay is None:
                    delay = float(settings.MODEL_RETRY_BASE_SECONDS) * 2 ** (attempt - 1)
                delay = min(delay, MAX_BACKOFF_SECONDS)
                logger.warning(
                    "model call attempt %s/%s failed (%s); retrying in %.2fs",
                    attempt,
                    attempts,
                    why,
                    delay,
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    def refusal(self, exc: openai.APIStatusError, secret: str) -> str:
        """A 4xx that retrying cannot fix, said without the credential."""
        status = exc.status_code
        if status in (401, 403):
            return (
                f"The model provider refused the credential {self.credential_name!r} "
                f"(HTTP {status})."
            )
        body = exc.body
        detail = ""
        if isinstance(body, dict):
            inner = body.get("error", body)
            detail = inner.get("message", "") if isinstance(inner, dict) else str(inner)
        elif isinstance(body, str):
            detail = body
        detail = redact(str(detail), secret)[:300]
        text = f"The model provider refused the request (HTTP {status})"
        return f"{text}: {detail}" if detail else f"{text}."

    # --- the reply ---

    def turn_from(self, view: TurnView, names: ToolNames, reply: Any) -> ModelTurn:
        """A Chat Completions reply (as parsed JSON) as the actions it holds."""
        if reply is NOT_JSON or not isinstance(reply, dict):
            return bad_reply("the reply is not a chat completion (a JSON object)", None)
        usage = usage_of(reply.get("usage"), self.model)
        choices = reply.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return bad_reply("the reply has no choices", usage)
        message = choices[0].get("message")
        if not isinstance(message, dict):
            return bad_reply("the reply's first choice has no message", usage)
        calls = message.get("tool_calls")
        return reply_turn(
            view,
            names,
            content=content_text(message.get("content")),
            refusal=message.get("refusal"),
            calls=calls if isinstance(calls, list) else [],
            cut=choices[0].get("finish_reason") == "length",
            usage=usage,
        )


def refused_cause(exc: BaseException) -> OutboundRefused | None:
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 10:
        if isinstance(cause, OutboundRefused):
            return cause
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return None


def retry_after_seconds(headers) -> float | None:
    """The wait a 429 or 503 asks for (retry-after-ms or Retry-After in seconds), or None."""
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        if headers.get("retry-after"):
            return max(0.0, float(headers["retry-after"]))
    except ValueError:
        return None
    return None


SECRET_LIKE = re.compile(r"\b(sk|key|api)[-_][A-Za-z0-9_*.\-]{6,}", re.IGNORECASE)


def redact(text: str, secret: str) -> str:
    """Take a credential (or what looks like one) out of a provider's error text."""
    if secret:
        text = text.replace(secret, "[credential]")
    return SECRET_LIKE.sub("[credential]", text)
