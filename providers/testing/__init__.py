"""liteagent.providers.testing — a fake Anthropic Messages API server for tests.

A real HTTP/1.1 server on 127.0.0.1 that the real ``anthropic`` client talks to over sockets,
answering from a script: messages (streamed as SSE or sent as JSON, as each request asks),
HTTP errors, and broken streams (dropped, stalled, truncated, ``event: error``). It records
every request for assertions. Standard library only; ``anthropic`` is imported only by
:meth:`FakeMessagesServer.client` and pytest only by the fixture.

::

    from liteagent.providers.testing import (
        FakeMessagesServer, message, overloaded, text, tool_use, usage)

    def test_retry_then_tool_call() -> None:
        with FakeMessagesServer() as server, server.client() as client:
            server.add(overloaded(), message([tool_use("toolu_1", "ls", {"path": "."})]))
            with client.messages.stream(model="m", max_tokens=100, messages=[...]) as stream:
                reply = stream.get_final_message()
            assert "tool_use" == reply.stop_reason
            assert [0, 1] == [r.retry_count for r in server.requests]

As a pytest fixture, register it in a ``conftest.py``::

    from liteagent.providers.testing import fake_messages_server  # noqa: F401

or with ``pytest_plugins = ["liteagent.providers.testing._pytest"]`` in the root conftest;
tests then take a ``fake_messages_server`` argument.

Modules: ``_builders`` (message and block dicts), ``_sse`` (a message as SSE events),
``_responses`` (what can be scripted), ``_failures`` (errors and broken streams), ``_script``
(the queues, the request record, the routing), ``_server`` (HTTP and lifecycle), ``_pytest``
(the fixture).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._builders import (
    DEFAULT_MODEL,
    compaction,
    error_body,
    iteration,
    message,
    redacted_thinking,
    text,
    thinking,
    tool_use,
    usage,
)
from ._failures import (
    api_error,
    authentication_error,
    context_overflow,
    dropped_stream,
    error_response,
    overloaded,
    rate_limited,
    stalled_stream,
    stream_error,
    truncated_stream,
)
from ._responses import (
    Drop,
    JSONResponse,
    MessageResponse,
    Response,
    Stall,
    StreamResponse,
    StreamStep,
)
from ._script import COUNT_TOKENS_PATH, MESSAGES_PATH, RecordedRequest
from ._server import FakeMessagesServer
from ._sse import SSEEvent, encode_event, stream_events

if TYPE_CHECKING:
    from ._pytest import fake_messages_server

__all__ = [
    "COUNT_TOKENS_PATH",
    "DEFAULT_MODEL",
    "MESSAGES_PATH",
    "Drop",
    "FakeMessagesServer",
    "JSONResponse",
    "MessageResponse",
    "RecordedRequest",
    "Response",
    "SSEEvent",
    "Stall",
    "StreamResponse",
    "StreamStep",
    "api_error",
    "authentication_error",
    "compaction",
    "context_overflow",
    "dropped_stream",
    "encode_event",
    "error_body",
    "error_response",
    "fake_messages_server",
    "iteration",
    "message",
    "overloaded",
    "rate_limited",
    "redacted_thinking",
    "stalled_stream",
    "stream_error",
    "stream_events",
    "text",
    "thinking",
    "tool_use",
    "truncated_stream",
    "usage",
]


def __getattr__(name: str) -> object:
    """Import the pytest fixture on first use, so this package imports without pytest."""
    if name == "fake_messages_server":
        from ._pytest import fake_messages_server  # noqa: PLC0415 - lazy on purpose

        return fake_messages_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
