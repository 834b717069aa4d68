"""The one boundary where ``anthropic`` and ``httpx2`` exceptions become liteagent errors.

Facts this relies on (``docs/anthropic-api.md`` §3): HTTP errors are ``APIStatusError``
subclasses with ``status_code``, ``type`` and ``api_message``; context overflow is a 400
``invalid_request_error`` whose message is ``prompt is too long: N tokens > M maximum``; an
``event: error`` inside a 200 stream is a plain ``APIStatusError`` with status 200; a dropped
connection or a stalled stream surfaces as a raw ``httpx2.TransportError``.
"""

from __future__ import annotations

import re

import anthropic
import httpx2

from ._errors import (
    ContextOverflowError,
    OverloadedError,
    ProviderAuthError,
    ProviderError,
    ProviderRequestError,
    ProviderStreamError,
    ProviderUnavailableError,
    RateLimitError,
)

__all__ = ["map_error", "retry_after"]

_OVERFLOW = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")


def retry_after(headers: httpx2.Headers | None) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms`` first, then ``retry-after``."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    seconds = headers.get("retry-after")
    if seconds is not None:
        try:
            return float(seconds)
        except ValueError:
            return None
    return None


def _status_error(e: anthropic.APIStatusError, *, streaming: bool) -> ProviderError:
    message = e.api_message or str(e)
    rid = e.request_id
    status = e.status_code
    if status == 200 or streaming:
        # An `event: error` after the stream started: the response is broken, whatever its type.
        return ProviderStreamError(
            f"the stream reported an error ({e.type or 'unknown'}): {message}", request_id=rid
        )
    match = _OVERFLOW.search(message)
    if status in (400, 413) and (match or status == 413):
        return ContextOverflowError(
            message,
            tokens=int(match.group(1)) if match else None,
            maximum=int(match.group(2)) if match else None,
            request_id=rid,
        )
    if status in (401, 403):
        return ProviderAuthError(f"the API refused the credentials: {message}", request_id=rid)
    if status == 429:
        return RateLimitError(
            f"rate limited: {message}",
            retry_after=retry_after(e.response.headers),
            request_id=rid,
        )
    if status == 529 or e.type == "overloaded_error":
        return OverloadedError(f"the API is overloaded: {message}", request_id=rid)
    if status >= 500:
        return ProviderUnavailableError(f"the API failed ({status}): {message}", request_id=rid)
    return ProviderRequestError(
        f"the API refused the request ({status}): {message}",
        status_code=status,
        error_type=e.type,
        request_id=rid,
    )


def map_error(e: BaseException, *, streaming: bool) -> ProviderError | None:
    """The liteagent error for ``e``, or None when ``e`` is not a client error.

    ``streaming`` says whether the response had started: then every failure is a broken
    stream (:class:`ProviderStreamError`), never a partial message.
    """
    if isinstance(e, anthropic.APIStatusError):
        return _status_error(e, streaming=streaming)
    if isinstance(e, (anthropic.APIConnectionError, httpx2.TransportError)):
        what = type(e).__name__
        if streaming:
            return ProviderStreamError(f"the stream broke: {what}: {e}")
        return ProviderUnavailableError(f"cannot reach the API: {what}: {e}")
    if isinstance(e, anthropic.APIResponseValidationError):
        return ProviderStreamError(f"the API sent a malformed response: {e}")
    if isinstance(e, anthropic.AnthropicError):
        return ProviderError(f"{type(e).__name__}: {e}")
    return None
