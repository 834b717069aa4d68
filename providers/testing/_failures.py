"""Scriptable failures: HTTP errors and broken streams, each one response in the script.

What each one looks like to the ``anthropic`` SDK (``docs/anthropic-api.md`` §3):

==========================  ==================================================  =============
factory                     the caller sees                                     SDK retries?
==========================  ==================================================  =============
``context_overflow()``      ``BadRequestError``; ``api_message`` is             no
                            ``"prompt is too long: N tokens > M maximum"``
``authentication_error()``  ``AuthenticationError``                             no
``rate_limited()``          ``RateLimitError``                                  yes
``api_error()``             ``InternalServerError``                             yes
``overloaded()``            ``OverloadedError``                                 yes
``dropped_stream()``        raw ``httpx2.RemoteProtocolError`` while iterating  never mid-stream
``stalled_stream()``        raw ``httpx2.ReadTimeout`` once the read timeout    never mid-stream
                            passes
``truncated_stream()``      no error; the final message has                     --
                            ``stop_reason is None``
``stream_error()``          ``APIStatusError`` with ``status_code == 200`` and  never mid-stream
                            ``type == "overloaded_error"`` (by default)
==========================  ==================================================  =============

Retried errors carry ``retry-after-ms`` (1 ms by default) so retry tests take milliseconds;
``x-should-retry`` overrides the SDK's choice either way when ``should_retry`` is given.
Stream faults take the message to (partly) stream; without one, a short text reply is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._builders import error_body
from ._builders import message as build_message
from ._responses import Drop, JSONResponse, Stall, StreamResponse, StreamStep
from ._sse import stream_events

__all__ = [
    "api_error",
    "authentication_error",
    "context_overflow",
    "dropped_stream",
    "error_response",
    "overloaded",
    "rate_limited",
    "stalled_stream",
    "stream_error",
    "truncated_stream",
]


def error_response(
    status: int,
    error_type: str,
    message: str,
    *,
    retry_after_ms: int | None = None,
    retry_after: float | None = None,
    should_retry: bool | None = None,
    headers: Mapping[str, str] | None = None,
    **fields: Any,
) -> JSONResponse:
    """Any API error: ``status`` with the body ``{"type": "error", "error": {...}}``.

    ``retry_after_ms`` / ``retry_after`` (seconds) set the headers the SDK waits on;
    ``should_retry`` sets ``x-should-retry``; ``fields`` go inside ``error``.
    """
    all_headers = dict(headers or {})
    if retry_after_ms is not None:
        all_headers["retry-after-ms"] = str(retry_after_ms)
    if retry_after is not None:
        all_headers["retry-after"] = f"{retry_after:g}"
    if should_retry is not None:
        all_headers["x-should-retry"] = "true" if should_retry else "false"
    return JSONResponse(error_body(error_type, message, **fields), status, all_headers)


def context_overflow(tokens: int = 210_432, maximum: int = 200_000) -> JSONResponse:
    """400 ``invalid_request_error``: ``prompt is too long: N tokens > M maximum``."""
    return error_response(
        400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum"
    )


def authentication_error(message: str = "invalid x-api-key") -> JSONResponse:
    """401 ``authentication_error``."""
    return error_response(401, "authentication_error", message)


def rate_limited(
    *,
    retry_after_ms: int | None = 1,
    retry_after: float | None = None,
    message: str = "Number of request tokens has exceeded your per-minute rate limit",
) -> JSONResponse:
    """429 ``rate_limit_error`` with ``retry-after-ms`` and, if given, ``retry-after``."""
    return error_response(
        429, "rate_limit_error", message, retry_after_ms=retry_after_ms, retry_after=retry_after
    )


def api_error(message: str = "Internal server error", *, retry_after_ms: int = 1) -> JSONResponse:
    """500 ``api_error``."""
    return error_response(500, "api_error", message, retry_after_ms=retry_after_ms)


def overloaded(message: str = "Overloaded", *, retry_after_ms: int = 1) -> JSONResponse:
    """529 ``overloaded_error``."""
    return error_response(529, "overloaded_error", message, retry_after_ms=retry_after_ms)


def dropped_stream(
    message: Mapping[str, Any] | None = None,
    *,
    after: int = 3,
    fragments: Sequence[int] | None = None,
    seed: int = 0,
) -> StreamResponse:
    """The stream of ``message`` cut after ``after`` events by shutting the connection down."""
    return StreamResponse([*_events(message, fragments, seed)[:after], Drop()])


def stalled_stream(
    message: Mapping[str, Any] | None = None,
    *,
    seconds: float = 30.0,
    after: int = 2,
    fragments: Sequence[int] | None = None,
    seed: int = 0,
) -> StreamResponse:
    """The stream of ``message`` pausing ``seconds`` after ``after`` events, then going on."""
    events = _events(message, fragments, seed)
    steps: list[StreamStep] = [*events[:after], Stall(seconds), *events[after:]]
    return StreamResponse(steps)


def truncated_stream(
    message: Mapping[str, Any] | None = None,
    *,
    after: int | None = None,
    fragments: Sequence[int] | None = None,
    seed: int = 0,
) -> StreamResponse:
    """The stream of ``message`` ending cleanly (terminating chunk sent) before it is complete.

    By default everything but ``message_delta`` and ``message_stop`` is sent; ``after`` cuts
    after that many events instead (a tool_use cut mid-JSON keeps a partial input).
    """
    events = _events(message, fragments, seed)
    if after is None:
        kept = [e for e in events if e[0] not in ("message_delta", "message_stop")]
    else:
        kept = events[:after]
    return StreamResponse(list(kept))


def stream_error(
    message: Mapping[str, Any] | None = None,
    *,
    after: int = 2,
    error_type: str = "overloaded_error",
    error_message: str = "Overloaded",
    fragments: Sequence[int] | None = None,
    seed: int = 0,
) -> StreamResponse:
    """The stream of ``message`` with an ``event: error`` after ``after`` events, then the end."""
    error_event = ("error", error_body(error_type, error_message))
    return StreamResponse([*_events(message, fragments, seed)[:after], error_event])


def _events(
    message: Mapping[str, Any] | None, fragments: Sequence[int] | None, seed: int
) -> list[tuple[str, dict[str, Any]]]:
    """The events of ``message`` (a short text reply when none is given)."""
    if message is None:
        message = build_message("This reply is cut short.")
    return stream_events(message, fragments=fragments, seed=seed)
