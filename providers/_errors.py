"""The errors of the model boundary, normalized across providers.

::

    LiteAgentError
    └── ProviderError
        ├── ContextOverflowError        the prompt exceeds the model's window (tokens, maximum)
        ├── RateLimitError              429 after the client's retries (retry_after seconds)
        ├── OverloadedError             529 / overloaded_error after retries
        ├── ProviderAuthError           401 / 403
        ├── ProviderRequestError        any other refused request (4xx); status_code
        ├── ProviderUnavailableError    5xx, or no connection, after retries
        ├── ProviderStreamError         a stream that broke after it started
        ├── CapabilityNotSupportedError an optional capability the provider does not have
        └── ScriptError                 scripted / replay providers used wrongly
            ├── UnexpectedRequestError  a call the script has no response for
            ├── UnusedResponsesError    responses left over at assert_all_used()
            └── ReplayMismatchError     a request that differs from the recorded one

Every provider translates its client's exceptions at one boundary, ``raise ... from e``. A stream
that breaks never yields a partial assistant message as if it were complete.
"""

from __future__ import annotations

from liteagent.eventlog.errors import ContextLimitError, LiteAgentError

__all__ = [
    "CapabilityNotSupportedError",
    "ContextOverflowError",
    "OverloadedError",
    "ProviderAuthError",
    "ProviderError",
    "ProviderRequestError",
    "ProviderStreamError",
    "ProviderUnavailableError",
    "RateLimitError",
    "ReplayMismatchError",
    "ScriptError",
    "UnexpectedRequestError",
    "UnusedResponsesError",
]


class ProviderError(LiteAgentError):
    """Raised for failures at the model boundary; the root of the provider errors.

    ``request_id`` is the provider's id of the failed request, when it sent one.
    """

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        self.request_id = request_id
        super().__init__(message)


class ContextOverflowError(ProviderError, ContextLimitError):
    """Raised when the prompt is longer than the model's context window.

    ``tokens`` is the prompt's size and ``maximum`` the window, as the provider reported them
    (``None`` when it did not say). Raised before anything streamed, so a caller can trim the
    request and retry. It is also a :class:`liteagent.eventlog.errors.ContextLimitError`, which the
    context layer's reactive compaction catches.
    """

    def __init__(
        self,
        message: str,
        *,
        tokens: int | None = None,
        maximum: int | None = None,
        request_id: str | None = None,
    ) -> None:
        ProviderError.__init__(self, message, request_id=request_id)
        self.tokens = tokens
        self.maximum = maximum


class RateLimitError(ProviderError):
    """Raised when the provider still refuses for rate limits after the client's retries.

    ``retry_after`` is how many seconds the provider asked to wait (``None`` if it did not say).
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, request_id: str | None = None
    ) -> None:
        self.retry_after = retry_after
        super().__init__(message, request_id=request_id)


class OverloadedError(ProviderError):
    """Raised when the provider is overloaded (HTTP 529 or an ``overloaded_error``)."""


class ProviderAuthError(ProviderError):
    """Raised when the provider refuses the credentials (HTTP 401 or 403)."""


class ProviderRequestError(ProviderError):
    """Raised when the provider refuses a request for another reason (a 4xx); ``status_code``
    and ``error_type`` say which."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        error_type: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.status_code = status_code
        self.error_type = error_type
        super().__init__(message, request_id=request_id)


class ProviderUnavailableError(ProviderError):
    """Raised when the provider cannot be reached or fails (5xx) after the client's retries."""


class ProviderStreamError(ProviderError):
    """Raised when a response stream broke after it started: a dropped connection, a read
    timeout, an error event, or a stream that ended without its final event. No partial
    message is returned."""


class CapabilityNotSupportedError(ProviderError, NotImplementedError):
    """Raised when an optional capability (token counting, native context edits) is used on a
    provider that does not declare it; ``capability`` names it."""

    def __init__(self, provider: str, capability: str) -> None:
        self.provider = provider
        self.capability = capability
        super().__init__(f"{provider} does not support {capability!r}")


class ScriptError(ProviderError, AssertionError):
    """Raised when a scripted or replay provider is used differently from its script."""


class UnexpectedRequestError(ScriptError):
    """Raised when a scripted provider gets a call it has no response left for."""


class UnusedResponsesError(ScriptError):
    """Raised by ``assert_all_used()`` when scripted responses were never requested."""


class ReplayMismatchError(ScriptError):
    """Raised when a replayed request differs from the one recorded at that point."""
