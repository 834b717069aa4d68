"""What the fake server can be scripted to answer: the response kinds and the stream faults.

- :class:`MessageResponse` — a message dict, sent as an SSE stream when the request asked for
  ``"stream": true`` and as JSON otherwise (the way the real API answers).
- :class:`StreamResponse` — an explicit SSE step list, always sent as a stream. Steps are
  ``(name, data)`` events and two faults: :class:`Drop` (the TCP connection is shut down with
  no terminating chunk) and :class:`Stall` (the server waits before the next step; closing the
  server ends the wait at once). A request that did not ask to stream gets a loud 500 instead.
- :class:`JSONResponse` — any status and JSON body (errors, count_tokens), optionally after a
  delay (which closing the server also cuts short).

Every kind can add response headers; the server always adds its own ``request-id``.
The factory functions in ``_failures`` build the common cases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._sse import SSEEvent, stream_events

__all__ = [
    "Drop",
    "JSONResponse",
    "MessageResponse",
    "Response",
    "Stall",
    "StreamResponse",
    "StreamStep",
]


@dataclass(frozen=True)
class Drop:
    """A stream step: shut the socket down here, with no terminating chunk (a TCP drop)."""


@dataclass(frozen=True)
class Stall:
    """A stream step: send nothing for ``seconds`` (closing the server ends the wait)."""

    seconds: float


StreamStep = SSEEvent | Drop | Stall
"""One step of a :class:`StreamResponse`: an event to send, or a fault."""


@dataclass(frozen=True)
class MessageResponse:
    """A message, streamed or not as the request asks.

    ``text_chunk``, ``fragments`` and ``seed`` shape the stream (see ``stream_events``); the
    JSON form is ``message`` itself.
    """

    message: Mapping[str, Any]
    text_chunk: int = 8
    fragments: Sequence[int] | None = None
    seed: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)

    def events(self) -> list[SSEEvent]:
        """The SSE events this message streams as."""
        return stream_events(
            self.message, text_chunk=self.text_chunk, fragments=self.fragments, seed=self.seed
        )


@dataclass(frozen=True)
class StreamResponse:
    """An SSE stream of ``steps`` with HTTP ``status``; only a streaming request may take it."""

    steps: Sequence[StreamStep]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JSONResponse:
    """A JSON ``body`` with HTTP ``status``, sent after ``delay`` seconds (0 for at once)."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


Response = MessageResponse | StreamResponse | JSONResponse
"""Anything :meth:`FakeMessagesServer.add` queues (a plain message dict becomes a
:class:`MessageResponse`)."""
