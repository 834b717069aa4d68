"""Claude through the official ``anthropic`` SDK's streaming API.

Each call opens ``messages.stream`` (``beta.messages.stream`` when the request carries native
context edits), forwards the live deltas, and ends with the SDK's accumulated final message
converted to liteagent's types. What the SDK would retry (429, 5xx, 529, a lost connection;
the client's ``max_retries`` times) is retried here, before the stream starts, after the wait
the server asks for (at most a minute: a longer one is raised at once, for the caller to
decide) or a backoff; a cancel ends the wait at once (the SDK's own retries slept where no
cancel reached them). A stream that breaks after it started is never retried and never
returns a partial message. The API key is read from ``api_key=`` or ``ANTHROPIC_API_KEY`` and never
logged or shown in a repr.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anthropic
import httpx2

from liteagent.eventlog import CancelToken
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog._numbers import plain_number
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError, OperationCancelledError

from ._anthropic_convert import (
    applied_edits,
    assistant_message,
    count_tokens_params,
    request_params,
)
from ._anthropic_errors import map_error, retry_after
from ._contract import (
    CLEAR_THINKING,
    CLEAR_TOOL_USES,
    COMPACT,
    TOKEN_COUNTING,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)
from ._errors import ProviderAuthError, ProviderError, ProviderStreamError

__all__ = ["AnthropicProvider", "anthropic_provider"]

_log = get_logger("liteagent.providers")


class AnthropicProvider(ModelProvider):
    """See :func:`anthropic_provider`."""

    capabilities = frozenset({TOKEN_COUNTING, CLEAR_TOOL_USES, CLEAR_THINKING, COMPACT})

    def __init__(self, client: anthropic.Anthropic, betas: Sequence[str]) -> None:
        self._client = client
        self._betas = tuple(betas)
        # The streams open without the SDK's retries, which sleep where no cancel reaches
        # them, as long as a server's retry-after says (up to ~49 days): see _enter.
        self._max_retries = max(int(getattr(client, "max_retries", 2)), 0)
        self._once = client.with_options(max_retries=0)

    @property
    def name(self) -> str:
        return "anthropic"

    @property
    def client(self) -> anthropic.Anthropic:
        """The underlying SDK client."""
        return self._client

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={str(self._client.base_url)!r})"

    def stream(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        self.check_request(request)
        params, betas = request_params(request)
        betas = sorted({*betas, *self._betas})
        return self._stream(params, betas, cancel)

    def _open(self, params: dict[str, Any], betas: list[str], tries: int = 0) -> Any:
        if tries:  # the header the SDK's own retries send
            params = {**params, "extra_headers": {"x-stainless-retry-count": str(tries)}}
        if betas:
            return self._once.beta.messages.stream(**params, betas=betas)
        return self._once.messages.stream(**params)

    def _enter(
        self, params: dict[str, Any], betas: list[str], cancel: CancelToken | None
    ) -> tuple[Any, Any]:
        """Open the stream (the HTTP request happens here), retrying what the SDK would retry
        (429, 5xx, 529, a lost connection; ``max_retries`` times) after the wait the server
        asks for (or a backoff), which a cancel ends at once. A server that asks for more
        than :data:`_MAX_RETRY_WAIT_S` gets its error raised at once (a
        :class:`~liteagent.providers.RateLimitError` carries the wait as ``retry_after``):
        the caller decides whether to wait that long."""
        tries = 0
        while True:
            manager = self._open(params, betas, tries)
            try:
                return manager, manager.__enter__()
            except BaseException as e:
                wait = _retry_wait(e, tries, self._max_retries)
                if wait is None or (cancel is not None and cancel.cancelled):
                    raise _translated(e, streaming=False, cancel=cancel) from e
                _log.info("anthropic.retry", attempt=tries + 1, wait_s=round(wait, 3))
            tries += 1
            if cancel is None:
                time.sleep(wait)
            elif cancel.wait(wait):
                raise OperationCancelledError(cancel.reason or "cancelled")

    def _stream(
        self, params: dict[str, Any], betas: list[str], cancel: CancelToken | None
    ) -> Iterator[StreamEvent]:
        if cancel is not None:
            cancel.raise_if_cancelled()
        manager, stream = self._enter(params, betas, cancel)
        interrupt = _Interrupt(stream)
        unregister = cancel.on_cancel(interrupt) if cancel is not None else (lambda: None)
        finished = False
        try:
            yield from self._events(stream, cancel)
            final = stream.get_final_message()
            _check_complete(final)
            response = ModelResponse(
                message=assistant_message(final),
                applied_edits=applied_edits(final),
                request_id=getattr(final, "_request_id", None),
            )
            finished = True
            yield ResponseComplete(response)
        except ProviderError:
            raise
        except OperationCancelledError:
            raise
        except BaseException as e:
            raise _translated(e, streaming=True, cancel=cancel) from e
        finally:
            unregister()
            with contextlib.suppress(Exception):
                manager.__exit__(None, None, None)
            if not finished and cancel is not None and cancel.cancelled:
                _log.debug("anthropic.stream_cancelled")

    @staticmethod
    def _events(stream: Any, cancel: CancelToken | None) -> Iterator[StreamEvent]:
        saw_stop = False
        for event in stream:
            if cancel is not None and cancel.cancelled:
                raise OperationCancelledError(cancel.reason or "cancelled")
            kind = event.type
            if kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    yield TextDelta(event.index, delta.text)
                elif delta.type == "thinking_delta":
                    yield ThinkingDelta(event.index, delta.thinking)
                elif delta.type == "input_json_delta":
                    yield ToolInputDelta(event.index, delta.partial_json)
            elif kind == "content_block_start":
                block = event.content_block
                if block.type == "tool_use":
                    yield ToolUseStart(event.index, block.id, block.name)
            elif kind == "message_stop":
                saw_stop = True
        if cancel is not None and cancel.cancelled:
            raise OperationCancelledError(cancel.reason or "cancelled")
        if not saw_stop:
            raise ProviderStreamError("the stream ended without message_stop")

    def count_tokens(self, request: ModelRequest) -> int:
        self.check_request(request)
        params, betas = count_tokens_params(request)
        betas = sorted({*betas, *self._betas})
        try:
            if betas:
                return self._client.beta.messages.count_tokens(**params, betas=betas).input_tokens
            return self._client.messages.count_tokens(**params).input_tokens
        except BaseException as e:
            raise _translated(e, streaming=False, cancel=None) from e

    def close(self) -> None:
        self._client.close()


def _check_complete(final: Any) -> None:
    """A final message without a stop reason was cut short: refuse it."""
    if final.stop_reason is None:
        raise ProviderStreamError(
            "the stream ended without its final event (no message_stop)",
            request_id=getattr(final, "_request_id", None),
        )


class _Interrupt:
    """Called from the cancelling thread: wake a read blocked on the socket, then close."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            response = getattr(self._stream, "response", None)
            network = response.extensions.get("network_stream") if response is not None else None
            sock = network.get_extra_info("socket") if network is not None else None
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(Exception):
                self._stream.close()


_MAX_RETRY_WAIT_S = 60.0  # a longer wait a server asks for is the caller's to make
_MAX_RETRIES = 100  # more tries than that are a mistake, not a policy
_MAX_TIMEOUT_S = 86_400.0
_FIRST_BACKOFF_S, _MAX_BACKOFF_S = 0.5, 8.0  # the SDK's backoff, without its jitter


def _retry_wait(e: BaseException, tries: int, max_retries: int) -> float | None:
    """Seconds to wait before trying again after ``e`` (the ``tries``-th retry would be
    next), or None when it is not to be retried."""
    if tries >= max_retries:
        return None
    backoff = min(_FIRST_BACKOFF_S * 2.0**tries, _MAX_BACKOFF_S)
    if isinstance(e, anthropic.APIStatusError):
        should = e.response.headers.get("x-should-retry")
        if should == "false":
            return None
        if should != "true" and not (e.status_code in (408, 409, 429) or e.status_code >= 500):
            return None
        asked = retry_after(e.response.headers)
        if asked is None or not asked > 0:  # (NaN too)
            return backoff
        return None if asked > _MAX_RETRY_WAIT_S else asked
    if isinstance(e, anthropic.APIConnectionError):  # a timeout too
        return backoff
    return None


def _translated(e: BaseException, *, streaming: bool, cancel: CancelToken | None) -> BaseException:
    if cancel is not None and cancel.cancelled:
        return OperationCancelledError(cancel.reason or "cancelled")
    mapped = map_error(e, streaming=streaming)
    if mapped is not None or not isinstance(e, Exception):
        return e if mapped is None else mapped  # KeyboardInterrupt & co. stay what they are
    # Anything else the SDK raises (e.g. its ValueError for tool input JSON it cannot parse)
    # is still a failure of this call, never a foreign exception for the caller.
    what = f"the anthropic SDK failed: {type(e).__name__}: {e}"
    return ProviderStreamError(what) if streaming else ProviderError(what)


def anthropic_provider(
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    max_retries: int = 2,
    timeout: float | httpx2.Timeout | None = None,
    http_client: httpx2.Client | None = None,
    betas: Sequence[str] = (),
) -> AnthropicProvider:
    """Return a provider for Claude over the official SDK.

    ``api_key`` defaults to ``$ANTHROPIC_API_KEY`` and ``base_url`` to ``$ANTHROPIC_BASE_URL``
    (the SDK's default endpoint otherwise). The SDK retries rate limits, overload and server
    errors ``max_retries`` times before a stream starts. ``timeout`` is in seconds (default: the
    SDK's, 600 s with a 5 s connect timeout). ``betas`` are sent on every call, which then goes
    to the beta endpoint. Raises :class:`ProviderAuthError` when no API key is available.
    """
    _check_args(
        api_key=api_key,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout,
        http_client=http_client,
        betas=betas,
    )
    key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise ProviderAuthError("no Anthropic API key: pass api_key= or set ANTHROPIC_API_KEY")
    kwargs: dict[str, Any] = {"api_key": key, "max_retries": max_retries}
    url = base_url if base_url is not None else os.environ.get("ANTHROPIC_BASE_URL")
    if url:
        kwargs["base_url"] = _checked_url(url, "base_url" if base_url else "$ANTHROPIC_BASE_URL")
    if timeout is not None:
        kwargs["timeout"] = timeout
    if http_client is not None:
        kwargs["http_client"] = http_client
    try:
        client = anthropic.Anthropic(**kwargs)
    except Exception as e:
        raise InvalidArgumentError(f"the anthropic client refused its arguments: {e}") from e
    return AnthropicProvider(client, tuple(betas))


def _check_args(
    *,
    api_key: object,
    base_url: object,
    max_retries: object,
    timeout: object,
    http_client: object,
    betas: object,
) -> None:
    """Refuse (:class:`InvalidArgumentError`) what ``anthropic()`` cannot be given."""
    for name, value in (("api_key", api_key), ("base_url", base_url)):
        if value is not None and type(value) is not str:
            raise InvalidArgumentError(f"{name} must be None or a str, got {shown(value)}")
    if type(max_retries) is not int or not 0 <= max_retries <= _MAX_RETRIES:
        raise InvalidArgumentError(
            f"max_retries must be an int from 0 to {_MAX_RETRIES}, got {shown(max_retries)}"
        )
    if timeout is not None and not isinstance(timeout, httpx2.Timeout):
        seconds = plain_number(timeout)
        if seconds is None or not 0 < seconds <= _MAX_TIMEOUT_S:
            raise InvalidArgumentError(
                "timeout must be None, a number of seconds > 0 or an httpx2.Timeout, got "
                f"{shown(timeout)}"
            )
    if http_client is not None and not isinstance(http_client, httpx2.Client):
        raise InvalidArgumentError(
            f"http_client must be None or an httpx2.Client, got {shown(http_client)}"
        )
    if (
        isinstance(betas, (str, bytes))
        or not isinstance(betas, Sequence)
        or not all(type(b) is str and b for b in betas)
    ):
        raise InvalidArgumentError(
            f"betas must be a sequence of beta names (non-empty strs), got {shown(betas)}"
        )


def _checked_url(url: str, name: str) -> str:
    """``url`` when it is an absolute http(s) URL httpx can use."""
    try:
        parsed = httpx2.URL(url)
        ok = parsed.scheme in ("http", "https") and bool(parsed.host)
    except Exception:  # noqa: BLE001 -- httpx's InvalidURL, a UnicodeError, ...
        ok = False
    if not ok:
        raise InvalidArgumentError(f"{name} must be an http(s) URL, got {shown(url)}")
    return url


# Its public name is ``liteagent.providers.anthropic`` (this module imports the SDK as
# ``anthropic``): reprs, tracebacks and the API reference show that name.
anthropic_provider.__name__ = anthropic_provider.__qualname__ = "anthropic"
