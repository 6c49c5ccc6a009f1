"""A total deadline and a byte cap on each request of the guarded clients (connections.outbound).

httpx's timeouts are per operation: a server that trickles a byte a second never trips a 5 s
read timeout, and a reply is read whole however large it is. The guarded transports wrap each
connection in a ``DeadlineStream``, whose every connect, write and read waits at most until the
current request's deadline (``current_deadline``, set by the transport around the request and
around each chunk of its body), and each response body in a ``CappedStream``, which stops at
the cap with ``ResponseTooLarge``. gzip and deflate are undone here, a bounded piece at a time,
so that a small compressed reply cannot inflate past the cap in httpx's own decoder.
"""

import contextvars
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpcore
import httpx


class ResponseTooLarge(httpx.TransportError):
    """The reply passed its byte cap: reading stopped there (an httpx error, so that callers
    that treat any transport failure as one, such as push retries, need no case of their own)."""

    def __init__(self, limit: int):
        super().__init__(f"the response is larger than {limit} bytes")
        self.limit = limit


def too_large_cause(exc: BaseException | None) -> "ResponseTooLarge | None":
    """The ResponseTooLarge behind ``exc`` (SDKs wrap what their transport raised), if any."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ResponseTooLarge):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


# The deadline (time.monotonic()) of the request this thread or task is doing, while it does
# it: read by the network streams below, which serve one request at a time per connection.
current_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "outbound_deadline", default=None
)


@dataclass(frozen=True)
class Limits:
    """A guarded client's bounds on each request: ``deadline`` seconds in all (connect, send,
    headers, body), ``max_response_bytes`` of body; ``on_too_large`` is told when a reply
    passes the cap (for SDKs that swallow their transport's errors, such as mcp's)."""

    deadline: float | None
    max_response_bytes: int
    on_too_large: Callable[[ResponseTooLarge], None] | None = None


def wait_left(timeout: float | None, late: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the current request's deadline; ``late`` (an
    httpcore timeout) once nothing is left."""
    deadline = current_deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise late("the request's total deadline passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every wait ends at the current request's deadline."""

    def __init__(self, stream: httpcore.NetworkStream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, wait_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, wait_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        wait = wait_left(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, wait))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class AsyncDeadlineStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: httpcore.AsyncNetworkStream):
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, wait_left(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, wait_left(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        wait = wait_left(timeout, httpcore.ConnectTimeout)
        return AsyncDeadlineStream(await self._stream.start_tls(ssl_context, server_hostname, wait))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class _BodyDecoder:
    """gzip or deflate undone here, a bounded piece at a time: httpx's own decoder would
    inflate a small compressed reply whole, past any cap."""

    def __init__(self, coding: str):
        self.coding = coding
        self.inflate = zlib.decompressobj(
            16 + zlib.MAX_WBITS if "gzip" in coding else zlib.MAX_WBITS
        )
        self.started = False

    def pieces(self, data: bytes, room: int) -> Iterable[bytes]:
        """The decoded bytes of ``data``, in pieces of at most ``room + 1`` bytes."""
        while data:
            try:
                piece = self.inflate.decompress(data, room + 1)
            except zlib.error:
                if self.coding != "deflate" or self.started:
                    raise httpx.DecodingError(
                        "the response's compressed body is malformed"
                    ) from None
                # "deflate" is sent raw by some servers (as httpx's own decoder allows).
                self.inflate = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self.started = True
            data = self.inflate.unconsumed_tail
            if piece:
                yield piece

    def flush(self) -> bytes:
        return self.inflate.flush()


def _decoder_for(headers: httpx.Headers) -> _BodyDecoder | None:
    """Take the body's content coding over from httpx (it is removed from the headers)."""
    codings = [
        c.strip().lower() for c in headers.get("content-encoding", "").split(",") if c.strip()
    ]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        headers.pop("content-encoding", None)
        return None
    if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
        raise httpx.DecodingError(f"the content coding {', '.join(codings)} is not accepted")
    del headers["content-encoding"]
    headers.pop("content-length", None)  # the compressed length: not the body's any more
    return _BodyDecoder(codings[0])


class _Body:
    """A response body read within its request's deadline and cut at its byte cap."""

    def __init__(self, limits: Limits, deadline: float | None, declared: str, decoder):
        self.limits, self.deadline, self.decoder = limits, deadline, decoder
        self.declared = int(declared) if declared.isdigit() else None
        self.seen = 0

    def check_declared(self) -> None:
        if self.declared is not None and self.declared > self.limits.max_response_bytes:
            self.refuse()

    def refuse(self):
        error = ResponseTooLarge(self.limits.max_response_bytes)
        if self.limits.on_too_large is not None:
            self.limits.on_too_large(error)
        raise error

    def pieces(self, chunk: bytes) -> Iterable[bytes]:
        room = self.limits.max_response_bytes - self.seen
        pieces = [chunk] if self.decoder is None else self.decoder.pieces(chunk, max(room, 0))
        for piece in pieces:
            self.seen += len(piece)
            if self.seen > self.limits.max_response_bytes:
                self.refuse()
            yield piece

    def tail(self) -> Iterable[bytes]:
        if self.decoder is not None:
            yield from self.pieces(self.decoder.flush())


class CappedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, body: _Body):
        self.inner, self.body = inner, body

    def __iter__(self):
        self.body.check_declared()
        chunks = iter(self.inner)
        while True:
            token = current_deadline.set(self.body.deadline)
            try:
                chunk = next(chunks, None)
            finally:
                current_deadline.reset(token)
            if chunk is None:
                break
            yield from self.body.pieces(chunk)
        yield from self.body.tail()

    def close(self) -> None:
        self.inner.close()


class AsyncCappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, body: _Body):
        self.inner, self.body = inner, body

    async def __aiter__(self):
        self.body.check_declared()
        chunks = aiter(self.inner)
        while True:
            token = current_deadline.set(self.body.deadline)
            try:
                chunk = await anext(chunks, None)
            finally:
                current_deadline.reset(token)
            if chunk is None:
                break
            for piece in self.body.pieces(chunk):
                yield piece
        for piece in self.body.tail():
            yield piece

    async def aclose(self) -> None:
        await self.inner.aclose()


def request_begin(request: httpx.Request, limits: Limits) -> float | None:
    """The request's deadline, with its pool wait cut to it; sent asking for codings the
    transport decodes itself (no br or zstd, which httpx may ask for when installed)."""
    request.headers["Accept-Encoding"] = "gzip, deflate"
    if limits.deadline is None:
        return None
    timeouts = dict(request.extensions.get("timeout") or {})
    for key in ("connect", "read", "write", "pool"):
        value = timeouts.get(key)
        timeouts[key] = limits.deadline if value is None else min(value, limits.deadline)
    request.extensions = {**request.extensions, "timeout": timeouts}
    return time.monotonic() + limits.deadline


def body_for(response: httpx.Response, limits: Limits, deadline: float | None) -> _Body:
    """How the response's body is read (httpx.DecodingError for a coding it refuses: the
    transport closes the response)."""
    decoder = _decoder_for(response.headers)
    return _Body(limits, deadline, response.headers.get("content-length", ""), decoder)
