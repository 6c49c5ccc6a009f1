"""Loopback HTTP servers that misbehave on purpose, for the outbound limits' tests: one that
trickles its answer a byte at a time, one that sends a body of any size (declared or not,
compressed or not). Each records how much it sent and whether the client left before the end.
"""

import gzip
import socket
import threading
import time


class HostileServer:
    """Answers every request with ``head`` and then ``body_chunks()`` (bytes, lazily), waiting
    ``every`` seconds between chunks; the request itself is read first, whole."""

    def __init__(self, head: bytes, body_chunks, every: float = 0.0):
        self.head, self.body_chunks, self.every = head, body_chunks, every
        self.sent = 0  # body bytes written
        self.requests = 0
        self.left_early = threading.Event()  # the client closed before the body's end
        self.finished = threading.Event()  # a whole answer went out
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/x"

    def start(self) -> "HostileServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            piece = conn.recv(65536)
            if not piece:
                return
            body += piece

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            self._read_request(conn)
            self.requests += 1
            try:
                conn.sendall(self.head)
                for chunk in self.body_chunks():
                    if self.stopping.is_set():
                        return
                    if self.every:
                        time.sleep(self.every)
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:  # the client went away
                self.left_early.set()
                return
            self.finished.set()


def trickling(total: int = 2000, every: float = 0.05, content_type: str = "application/json"):
    """200 OK with a declared body of ``total`` bytes, sent one byte every ``every`` seconds
    (2000 bytes: 100 s, far past any deadline of a test)."""
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {total}\r\n\r\n"
    ).encode()
    return HostileServer(head, lambda: (b" " for _ in range(total)), every=every)


def trickling_headers(every: float = 0.05):
    """A status line, then a header that never ends, a byte at a time."""
    return HostileServer(
        b"HTTP/1.1 200 OK\r\nX-Slow: ", lambda: (b"a" for _ in range(100_000)), every=every
    )


def huge(
    size: int,
    *,
    declared: bool = True,
    content_type: str = "application/json",
    status: str = "200 OK",
    chunk: int = 64 * 1024,
):
    """``status`` with a body of ``size`` bytes of JSON-looking filler (a string that never
    closes), sent as fast as the client reads; with ``declared`` the length is in the headers,
    else the body ends when the connection closes."""
    length = f"Content-Length: {size}\r\n" if declared else "Connection: close\r\n"
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{length}\r\n".encode()

    def chunks():
        yield b'{"x": "'
        left = size - 7
        block = b"a" * chunk
        while left > 0:
            yield block[: min(chunk, left)]
            left -= chunk

    return HostileServer(head, chunks)


def gzip_bomb(inflated: int, content_type: str = "application/json"):
    """A small gzip body that inflates to ``inflated`` bytes."""
    body = gzip.compress(b'{"x": "' + b"a" * (inflated - 7), compresslevel=9)
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return HostileServer(head, lambda: iter([body])), len(body)
