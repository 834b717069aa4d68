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

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError

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

    def __post_init__(self) -> None:
        if not isinstance(self.message, Mapping):
            raise InvalidArgumentError(f"message must be a mapping, got {shown(self.message)}")
        if type(self.text_chunk) is not int or self.text_chunk < 1:
            raise InvalidArgumentError(
                f"text_chunk must be an int >= 1, got {shown(self.text_chunk)}"
            )
        _check_json(self.message, "message")
        _check_headers(self.headers)

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

    def __post_init__(self) -> None:
        _check_status(self.status)
        _check_headers(self.headers)


@dataclass(frozen=True)
class JSONResponse:
    """A JSON ``body`` with HTTP ``status``, sent after ``delay`` seconds (0 for at once)."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def __post_init__(self) -> None:
        _check_status(self.status)
        _check_headers(self.headers)
        _check_json(self.body, "body")
        if type(self.delay) not in (int, float) or not 0 <= self.delay < math.inf:
            raise InvalidArgumentError(f"delay must be seconds >= 0, got {shown(self.delay)}")


def _check_status(status: object) -> None:
    if type(status) is not int or not 100 <= status <= 599:
        raise InvalidArgumentError(f"status must be an HTTP status (100-599), got {shown(status)}")


def _check_headers(headers: object) -> None:
    """Header names and values the server can send: str, latin-1, no CR or LF (which would
    start another header)."""
    if not isinstance(headers, Mapping):
        raise InvalidArgumentError(f"headers must be a mapping, got {shown(headers)}")
    for name, value in headers.items():
        if not (name and _sendable(name) and _sendable(value)):
            raise InvalidArgumentError(
                f"header {shown(name)}: {shown(value)} cannot be sent (str, latin-1, no CR, LF "
                "or NUL)"
            )


def _sendable(part: object) -> bool:
    if type(part) is not str or {"\r", "\n", "\0"} & set(part):
        return False
    try:
        part.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _check_json(value: object, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidArgumentError(f"{what} cannot be sent as JSON: {e}") from None


Response = MessageResponse | StreamResponse | JSONResponse
"""Anything :meth:`FakeMessagesServer.add` queues (a plain message dict becomes a
:class:`MessageResponse`)."""
