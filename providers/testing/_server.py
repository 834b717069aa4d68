"""The fake Messages API server: a real HTTP/1.1 server on 127.0.0.1 answering from a script.

::

    from liteagent.providers.testing import FakeMessagesServer, message, overloaded, text

    with FakeMessagesServer() as server:
        server.add(overloaded(), message([text("Hello")]))
        with server.client() as client:          # the real anthropic.Anthropic
            reply = client.messages.create(model="m", max_tokens=100, messages=[...])
        assert ["0", "1"] == [r.headers["x-stainless-retry-count"] for r in server.requests]

How it answers (details in ``_script``): ``POST /v1/messages`` takes the next scripted
response, first in first out; a message is streamed (SSE, chunked transfer-encoding) when the
request body has ``"stream": true`` and sent as JSON otherwise. An unscripted request gets a
500 that says the script was empty, with ``x-should-retry: false`` so the SDK fails at once.
``POST /v1/messages/count_tokens`` has its own queue and a default count. Every response has
a ``request-id`` header.

Every request is recorded (:attr:`FakeMessagesServer.requests`) before it is answered.
:meth:`~FakeMessagesServer.close` ends stalls and open connections, so it returns within a few
tens of milliseconds even while a stream is stalled; it is idempotent. The server runs in daemon
threads, so it serves sync and async clients alike (never run it on an event loop's thread).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from ._responses import Drop, JSONResponse, Response, Stall, StreamResponse
from ._script import RecordedRequest, Script
from ._sse import SSEEvent, encode_event, stream_events

if TYPE_CHECKING:
    import anthropic

__all__ = ["FakeMessagesServer"]

_HANGUPS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_CLOSE_BUDGET = 1.0  # seconds close() waits, at most, for handler threads to finish


class FakeMessagesServer:
    """A scripted Anthropic Messages API on ``127.0.0.1``; it listens once constructed.

    Use it as a context manager or call :meth:`close`. ``port=0`` picks a free port.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._script = Script()
        self._lock = threading.Lock()  # guards _closed and _connections
        self._closing = threading.Event()
        self._closed = False
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._hangups: list[str] = []
        self._httpd = _HTTPServer(self, (host, port))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"FakeMessagesServer:{self.port}",
            daemon=True,
        )
        self._thread.start()

    # -- addresses ---------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address the server listens on."""
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the SDK's ``base_url`` (no ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    # -- the script --------------------------------------------------------------------------

    def add(self, *responses: Response | Mapping[str, Any]) -> None:
        """Queue responses for ``/v1/messages``, in order.

        A mapping is a message (as built by ``message()``) and becomes a ``MessageResponse``:
        streamed or JSON as each request asks. Raises ``TypeError`` for anything else.
        """
        self._script.add(responses)

    def add_stream(
        self,
        message: Mapping[str, Any],
        *,
        text_chunk: int = 8,
        fragments: Sequence[int] | None = None,
        seed: int = 0,
    ) -> None:
        """Queue ``message`` as a stream that only a streaming request may take.

        ``text_chunk``, ``fragments`` and ``seed`` shape the deltas (see ``stream_events``).
        A non-streaming request that reaches it gets a 500 saying so.
        """
        events = stream_events(message, text_chunk=text_chunk, fragments=fragments, seed=seed)
        self.add(StreamResponse(events))

    def add_count_tokens(
        self, input_tokens: int | JSONResponse, *, original_input_tokens: int | None = None
    ) -> None:
        """Queue one answer for ``/v1/messages/count_tokens``: a count or any ``JSONResponse``.

        With ``original_input_tokens`` the answer always has
        ``context_management.original_input_tokens``; without it, only a request carrying
        ``context_management`` gets one (equal to ``input_tokens``).
        """
        self._script.add_count(input_tokens, original_input_tokens)

    @property
    def hangups(self) -> list[str]:
        """Request ids of streams whose client closed the connection while the server was
        stalling in them (what a cancelled or timed-out client does)."""
        with self._lock:
            return list(self._hangups)

    @property
    def pending(self) -> int:
        """How many scripted ``/v1/messages`` responses have not been taken yet."""
        return self._script.pending

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a snapshot)."""
        return self._script.requests

    # -- clients -----------------------------------------------------------------------------

    def client(self, *, max_retries: int = 2, **kwargs: Any) -> anthropic.Anthropic:
        """A real ``anthropic.Anthropic`` for this server; close it (or use ``with``).

        Defaults: ``api_key="test"``, strict response validation, and an HTTP client that
        ignores proxy environment variables. ``kwargs`` override or add constructor arguments.
        """
        import anthropic  # noqa: PLC0415 - the package must import without the SDK

        options: dict[str, Any] = {"api_key": "test", "_strict_response_validation": True}
        options.update(kwargs)
        if "http_client" not in options:
            options["http_client"] = anthropic.DefaultHttpxClient(trust_env=False)
        return anthropic.Anthropic(base_url=self.base_url, max_retries=max_retries, **options)

    def async_client(self, *, max_retries: int = 2, **kwargs: Any) -> anthropic.AsyncAnthropic:
        """The same as :meth:`client` for ``anthropic.AsyncAnthropic``."""
        import anthropic  # noqa: PLC0415 - the package must import without the SDK

        options: dict[str, Any] = {"api_key": "test", "_strict_response_validation": True}
        options.update(kwargs)
        if "http_client" not in options:
            options["http_client"] = anthropic.DefaultAsyncHttpxClient(trust_env=False)
        return anthropic.AsyncAnthropic(base_url=self.base_url, max_retries=max_retries, **options)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closing.is_set()

    def close(self) -> None:
        """Stop serving: end stalls, shut every open connection, free the port. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing.set()
        self._httpd.shutdown()
        with self._lock:
            connections = dict(self._connections)
        for connection in connections:
            _shutdown(connection)
        deadline = time.monotonic() + _CLOSE_BUDGET
        for thread in connections.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        self._httpd.server_close()
        self._thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "serving"
        return f"<FakeMessagesServer {self.base_url} {state}, {self.pending} scripted>"

    # -- used by the request handler ---------------------------------------------------------

    def _opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections[connection] = threading.current_thread()
        if self._closing.is_set():
            _shutdown(connection)

    def _hung_up(self, request_id: str) -> None:
        with self._lock:
            self._hangups.append(request_id)

    def _finished(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.pop(connection, None)


def _shutdown(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by its handler
        connection.shutdown(socket.SHUT_RDWR)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # close() joins the handler threads itself, with a deadline

    def __init__(self, owner: FakeMessagesServer, address: tuple[str, int]) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (socket.getfqdn), which can be slow.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, _HANGUPS) or (
            self.owner.closed and isinstance(error, OSError | ValueError)
        ):
            return  # the client hung up (timeout, drop), or we are shutting its socket
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._finished(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests assert on ``server.requests`` instead of reading a log."""

    def do_POST(self) -> None:
        script = self.server.owner._script
        request = script.record(self.command, self.path, self.headers.items(), self._read_body())
        response = script.answer(request)
        if isinstance(response, JSONResponse):
            self._send_json(response, request.request_id)
        elif isinstance(response, StreamResponse):
            self._send_stream(response.steps, response.status, response.headers, request)
        elif request.stream:
            self._send_stream(response.events(), 200, response.headers, request)
        else:
            reply = JSONResponse(response.message, 200, response.headers)
            self._send_json(reply, request.request_id)

    def do_GET(self) -> None:
        """Answered by the router too: a 404 with a ``request-id``."""
        self.do_POST()

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _start(self, status: int, headers: Mapping[str, str], request_id: str) -> None:
        self.send_response(status)
        for name, value in {"request-id": request_id, **headers}.items():
            self.send_header(name, value)
        self.end_headers()

    def _send_json(self, response: JSONResponse, request_id: str) -> None:
        data = json.dumps(response.body).encode()
        if response.delay > 0 and self.server.owner._closing.wait(response.delay):
            self.close_connection = True
            return
        headers = {"content-type": "application/json", "content-length": str(len(data))}
        self._start(response.status, {**headers, **response.headers}, request_id)
        self.wfile.write(data)

    def _stall(self, seconds: float, request_id: str) -> bool:
        """Send nothing for ``seconds``; return True early when the server is closing or the
        client hung up (recorded in ``hangups``)."""
        deadline = time.monotonic() + seconds
        closing = self.server.owner._closing
        while (left := deadline - time.monotonic()) > 0:
            if closing.wait(min(0.02, left)):
                return True
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable:
                try:
                    data = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    data = b""
                if not data:
                    self.server.owner._hung_up(request_id)
                    return True
        return False

    def _send_stream(
        self,
        steps: Sequence[SSEEvent | Drop | Stall],
        status: int,
        headers: Mapping[str, str],
        request: RecordedRequest,
    ) -> None:
        base = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
        }
        self._start(status, {**base, **headers}, request.request_id)
        for step in steps:
            if isinstance(step, Drop):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if isinstance(step, Stall):
                if self._stall(step.seconds, request.request_id):
                    self.close_connection = True
                    return
                continue
            frame = encode_event(*step)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.write(b"0\r\n\r\n")
