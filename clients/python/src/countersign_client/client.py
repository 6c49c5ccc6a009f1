"""``Countersign`` and ``AsyncCountersign``: ask a gate, wait for the decision, verify it."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import httpx

from . import _wire as wire
from .errors import Denied, Expired, GateError, ReceiptError, TaskFailed, TimedOut
from .receipts import KeySet, Receipt, check_receipt, header_of

P = ParamSpec("P")
R = TypeVar("R")

# How long one request may take; a blocking SendMessage returns once the task is held.
REQUEST_TIMEOUT = 60.0
# How long a stream may stay silent before the client asks GetTask and subscribes again.
STREAM_IDLE = 30.0
# Tries of a SendMessage whose connection failed: the same messageId, so the same request.
SEND_TRIES = 4


@dataclass(frozen=True)
class Decision:
    """An approval: run the tool with ``arguments`` (as approved, perhaps edited)."""

    approved: bool
    arguments: dict[str, Any]
    receipt: Receipt
    task_id: str
    decided_by: list[str]

    @property
    def edited(self) -> bool:
        return self.receipt.edited


class _Base:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        tenant: str,
        gate: str = "gate",
        jwks: str | Mapping[str, Any] | None = None,
        poll_interval: float = 2.0,
        stream: bool = True,
    ):
        """``base_url`` is the server's address (``http://127.0.0.1:8000``), ``token`` an A2A
        token of the tenant with access to the gate, ``gate`` its slug. ``jwks`` is where the
        receipts' keys are (default: the server's ``/.well-known/jwks.json``), or the JWKS
        document itself. ``poll_interval`` paces GetTask when streaming is not available;
        ``stream=False`` polls only."""
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.tenant = tenant
        self.gate = gate
        self.url = f"{self.base_url}/a2a/{tenant}/{gate}"
        self.poll_interval = poll_interval
        self.stream = stream
        self.keys = KeySet()
        self._jwks_url: str | None
        if jwks is None or isinstance(jwks, str):
            self._jwks_url = jwks or f"{self.base_url}/.well-known/jwks.json"
            self._keys_loaded = False
        else:
            self._jwks_url = None
            self.keys.load(jwks)
            self._keys_loaded = True
        self.jwks_fetches = 0

    def _need_keys(self, kid: str) -> bool:
        """Whether to fetch the JWKS: never fetched, or a ``kid`` it does not have (a key
        rotated in since)."""
        return self._jwks_url is not None and (not self._keys_loaded or self.keys.get(kid) is None)

    def _loaded(self, response: httpx.Response) -> None:
        self.jwks_fetches += 1
        if response.status_code != 200:
            raise ReceiptError(f"the JWKS answered HTTP {response.status_code}")
        try:
            document = response.json()
        except ValueError:
            raise ReceiptError("the JWKS is not JSON") from None
        self.keys.load(document)
        self._keys_loaded = True

    def _decide(
        self, task: Mapping[str, Any], tool: str | None, asked: Mapping[str, Any] | None
    ) -> Decision:
        """The decision a terminal task holds, its receipt verified; raises Denied, Expired or
        TaskFailed."""
        task_id = str(task.get("id", ""))
        state = wire.state_of(task)
        data = wire.receipt_of(task)
        if data is None:
            if state in ("TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"):
                raise TaskFailed(
                    wire.status_text(task) or f"the gate's task ended {state}",
                    task_id=task_id,
                    state=state,
                )
            raise ReceiptError(f"task {task_id} ended {state} without a receipt")
        token = data.get("jws")
        if not isinstance(token, str):
            raise ReceiptError(f"the receipt of task {task_id} is not signed")
        receipt = check_receipt(
            token,
            self.keys.get,
            tenant=self.tenant,
            agent=self.gate,
            task_id=task_id,
            tool=tool,
            arguments=asked,
        )
        if receipt.approved and state == "TASK_STATE_COMPLETED":
            return Decision(
                approved=True,
                arguments=receipt.arguments_run,
                receipt=receipt,
                task_id=task_id,
                decided_by=receipt.decided_by,
            )
        if receipt.approved:
            raise ReceiptError(f"task {task_id} ended {state} with an approving receipt")
        reason = receipt.reason or wire.status_text(task)
        if receipt.decision == "expired":
            raise Expired(reason or "expired", receipt=receipt, task_id=task_id)
        raise Denied(reason, receipt=receipt, task_id=task_id)

    @staticmethod
    def _remaining(deadline: float | None) -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        return None if timeout is None else time.monotonic() + timeout


def _stream_timeout(remaining: float | None) -> httpx.Timeout:
    idle = STREAM_IDLE if remaining is None else max(0.05, min(STREAM_IDLE, remaining))
    return httpx.Timeout(REQUEST_TIMEOUT, read=idle)


class Countersign(_Base):
    """A client of one gate: ``Countersign(base_url, token, tenant="demo", gate="gate")``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        tenant: str,
        gate: str = "gate",
        jwks: str | Mapping[str, Any] | None = None,
        poll_interval: float = 2.0,
        stream: bool = True,
        http: httpx.Client | None = None,
    ):
        super().__init__(
            base_url,
            token,
            tenant=tenant,
            gate=gate,
            jwks=jwks,
            poll_interval=poll_interval,
            stream=stream,
        )
        self.http = http or httpx.Client(timeout=REQUEST_TIMEOUT)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Countersign:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def require_approval(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        reason: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        note: str | None = None,
    ) -> Decision:
        """Ask the gate whether ``tool`` may run with ``arguments`` and wait for the decision.

        Returns the Decision of an approval (run with ``decision.arguments``); raises Denied
        or Expired (with the signed receipt), TimedOut after ``timeout`` seconds (the request
        still stands: ``wait(task_id)``), GateError when the gate refuses the request, and
        ReceiptError when the receipt does not verify. ``key`` makes a retried request the
        same request (its messageId): never a second approval."""
        deadline = self._deadline(timeout)
        params = wire.send_params(
            tool, arguments, reason=reason, note=note, message_id=key or str(uuid.uuid4())
        )
        task = self._send(params, deadline)
        return self._settle(task, deadline, tool, arguments)

    def wait(
        self,
        task_id: str,
        *,
        timeout: float | None = None,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Decision:
        """Wait for the decision on a request made before (``TimedOut.task_id``), from this
        process or another. ``arguments`` (what was asked) are needed only to run a call
        whose receipt redacts some of them."""
        deadline = self._deadline(timeout)
        return self._settle(self._get_task(task_id, deadline), deadline, tool, arguments)

    def receipt(self, token: str, *, task_id: str | None = None) -> Receipt:
        """Verify a receipt (a compact JWS) of this tenant and gate."""
        self._ensure_key(header_of(token)["kid"])
        return check_receipt(
            token, self.keys.get, tenant=self.tenant, agent=self.gate, task_id=task_id
        )

    def guarded(
        self, tool: str, *, reason: str | None = None, timeout: float | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: each call of the function is held until approved, then runs with the
        approved (possibly edited) arguments; a denial raises Denied and the function does
        not run."""

        def wrap(function: Callable[P, R]) -> Callable[P, R]:
            signature = inspect.signature(function)
            wire.check_guardable(signature, function.__qualname__)

            @functools.wraps(function)
            def call(*args: P.args, **kwargs: P.kwargs) -> R:
                asked = wire.call_arguments(signature, args, kwargs)
                decision = self.require_approval(tool, asked, reason=reason, timeout=timeout)
                return function(**decision.arguments)  # type: ignore[call-arg]

            return call

        return wrap

    # The wire.

    def _send(self, params: dict[str, Any], deadline: float | None) -> dict[str, Any]:
        for attempt in range(SEND_TRIES):
            try:
                response = self.http.post(
                    self.url, json=wire.rpc("SendMessage", params), headers=self._headers()
                )
                return wire.task_of_send(wire.result_of(response))
            except httpx.TransportError:
                # The same messageId again: the gate answers with the task it made, if any.
                if attempt == SEND_TRIES - 1 or self._expired(deadline):
                    raise
                time.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    def _get_task(self, task_id: str, deadline: float | None) -> dict[str, Any]:
        pause = 0.2
        while True:
            try:
                response = self.http.post(
                    self.url,
                    json=wire.rpc("GetTask", {"id": task_id, "historyLength": 0}),
                    headers=self._headers(),
                )
                result = wire.result_of(response)
                if not isinstance(result, dict):
                    raise GateError("GetTask answered with no task")
                return result
            except httpx.TransportError:
                if self._expired(deadline):
                    raise TimedOut(task_id) from None
                time.sleep(pause)
                pause = min(pause * 2, self.poll_interval)

    def _settle(
        self,
        task: dict[str, Any],
        deadline: float | None,
        tool: str | None,
        asked: Mapping[str, Any] | None,
    ) -> Decision:
        task_id = str(task.get("id", ""))
        streaming = self.stream
        while wire.state_of(task) not in wire.TERMINAL:
            if self._expired(deadline):
                raise TimedOut(task_id)
            if streaming:
                try:
                    streaming = self._follow(task_id, deadline)
                except httpx.TransportError:
                    # A dropped connection (or a silent one): ask, then subscribe again.
                    time.sleep(min(0.2, self.poll_interval))
            else:
                remaining = self._remaining(deadline)
                time.sleep(
                    self.poll_interval if remaining is None else min(self.poll_interval, remaining)
                )
            task = self._get_task(task_id, deadline)
        data = wire.receipt_of(task)
        if data and isinstance(data.get("jws"), str):
            self._ensure_key(header_of(data["jws"])["kid"])
        return self._decide(task, tool, asked)

    def _follow(self, task_id: str, deadline: float | None) -> bool:
        """Follow the task's stream (SubscribeToTask) until it tells a terminal state, ends or
        stays silent too long; False when the gate does not stream it (then poll)."""
        body = wire.rpc("SubscribeToTask", {"id": task_id})
        with self.http.stream(
            "POST",
            self.url,
            json=body,
            headers=self._headers(stream=True),
            timeout=_stream_timeout(self._remaining(deadline)),
        ) as response:
            if "text/event-stream" not in response.headers.get("content-type", ""):
                response.read()
                return self._not_streamed(response)
            lines: list[str] = []
            for line in response.iter_lines():
                # A server's keep-alive comments keep the stream busy: the deadline still holds.
                if self._expired(deadline):
                    break
                lines.append(line)
                if line == "":
                    if any(wire.event_of(data).terminal for data in wire.sse_data(lines)):
                        break
                    lines = []
        return True

    @staticmethod
    def _not_streamed(response: httpx.Response) -> bool:
        try:
            wire.result_of(response)
        except GateError as exc:
            if exc.code == wire.TASK_NOT_FOUND:
                raise
        # Streaming is off, or the task ended meanwhile: GetTask tells which.
        return False

    def _ensure_key(self, kid: str) -> None:
        if self._need_keys(kid):
            assert self._jwks_url is not None
            self._loaded(self.http.get(self._jwks_url, headers={"Accept": "application/json"}))

    def _headers(self, *, stream: bool = False) -> dict[str, str]:
        return wire.headers(self.token, stream=stream)

    def _expired(self, deadline: float | None) -> bool:
        return deadline is not None and time.monotonic() >= deadline


class AsyncCountersign(_Base):
    """The asyncio client: the same methods as Countersign, awaited."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        tenant: str,
        gate: str = "gate",
        jwks: str | Mapping[str, Any] | None = None,
        poll_interval: float = 2.0,
        stream: bool = True,
        http: httpx.AsyncClient | None = None,
    ):
        super().__init__(
            base_url,
            token,
            tenant=tenant,
            gate=gate,
            jwks=jwks,
            poll_interval=poll_interval,
            stream=stream,
        )
        self.http = http or httpx.AsyncClient(timeout=REQUEST_TIMEOUT)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncCountersign:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def require_approval(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        reason: str | None = None,
        timeout: float | None = None,
        key: str | None = None,
        note: str | None = None,
    ) -> Decision:
        """See Countersign.require_approval."""
        deadline = self._deadline(timeout)
        params = wire.send_params(
            tool, arguments, reason=reason, note=note, message_id=key or str(uuid.uuid4())
        )
        task = await self._send(params, deadline)
        return await self._settle(task, deadline, tool, arguments)

    async def wait(
        self,
        task_id: str,
        *,
        timeout: float | None = None,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Decision:
        """See Countersign.wait."""
        deadline = self._deadline(timeout)
        return await self._settle(
            await self._get_task(task_id, deadline), deadline, tool, arguments
        )

    async def receipt(self, token: str, *, task_id: str | None = None) -> Receipt:
        """See Countersign.receipt."""
        await self._ensure_key(header_of(token)["kid"])
        return check_receipt(
            token, self.keys.get, tenant=self.tenant, agent=self.gate, task_id=task_id
        )

    def guarded(
        self, tool: str, *, reason: str | None = None, timeout: float | None = None
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """See Countersign.guarded; for coroutine functions."""

        def wrap(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            signature = inspect.signature(function)
            wire.check_guardable(signature, function.__qualname__)

            @functools.wraps(function)
            async def call(*args: P.args, **kwargs: P.kwargs) -> R:
                asked = wire.call_arguments(signature, args, kwargs)
                decision = await self.require_approval(tool, asked, reason=reason, timeout=timeout)
                return await function(**decision.arguments)  # type: ignore[call-arg]

            return call

        return wrap

    async def _send(self, params: dict[str, Any], deadline: float | None) -> dict[str, Any]:
        for attempt in range(SEND_TRIES):
            try:
                response = await self.http.post(
                    self.url, json=wire.rpc("SendMessage", params), headers=self._headers()
                )
                return wire.task_of_send(wire.result_of(response))
            except httpx.TransportError:
                if attempt == SEND_TRIES - 1 or self._expired(deadline):
                    raise
                await asyncio.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    async def _get_task(self, task_id: str, deadline: float | None) -> dict[str, Any]:
        pause = 0.2
        while True:
            try:
                response = await self.http.post(
                    self.url,
                    json=wire.rpc("GetTask", {"id": task_id, "historyLength": 0}),
                    headers=self._headers(),
                )
                result = wire.result_of(response)
                if not isinstance(result, dict):
                    raise GateError("GetTask answered with no task")
                return result
            except httpx.TransportError:
                if self._expired(deadline):
                    raise TimedOut(task_id) from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, self.poll_interval)

    async def _settle(
        self,
        task: dict[str, Any],
        deadline: float | None,
        tool: str | None,
        asked: Mapping[str, Any] | None,
    ) -> Decision:
        task_id = str(task.get("id", ""))
        streaming = self.stream
        while wire.state_of(task) not in wire.TERMINAL:
            if self._expired(deadline):
                raise TimedOut(task_id)
            if streaming:
                try:
                    streaming = await self._follow(task_id, deadline)
                except httpx.TransportError:
                    await asyncio.sleep(min(0.2, self.poll_interval))
            else:
                remaining = self._remaining(deadline)
                await asyncio.sleep(
                    self.poll_interval if remaining is None else min(self.poll_interval, remaining)
                )
            task = await self._get_task(task_id, deadline)
        data = wire.receipt_of(task)
        if data and isinstance(data.get("jws"), str):
            await self._ensure_key(header_of(data["jws"])["kid"])
        return self._decide(task, tool, asked)

    async def _follow(self, task_id: str, deadline: float | None) -> bool:
        body = wire.rpc("SubscribeToTask", {"id": task_id})
        async with self.http.stream(
            "POST",
            self.url,
            json=body,
            headers=self._headers(stream=True),
            timeout=_stream_timeout(self._remaining(deadline)),
        ) as response:
            if "text/event-stream" not in response.headers.get("content-type", ""):
                await response.aread()
                return Countersign._not_streamed(response)
            lines: list[str] = []
            async for line in response.aiter_lines():
                if self._expired(deadline):
                    break
                lines.append(line)
                if line == "":
                    if any(wire.event_of(d).terminal for d in wire.sse_data(lines)):
                        break
                    lines = []
        return True

    async def _ensure_key(self, kid: str) -> None:
        if self._need_keys(kid):
            assert self._jwks_url is not None
            self._loaded(
                await self.http.get(self._jwks_url, headers={"Accept": "application/json"})
            )

    def _headers(self, *, stream: bool = False) -> dict[str, str]:
        return wire.headers(self.token, stream=stream)

    def _expired(self, deadline: float | None) -> bool:
        return deadline is not None and time.monotonic() >= deadline
