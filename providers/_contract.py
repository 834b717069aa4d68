"""The ModelProvider contract: one required streaming call, optional declared capabilities.

A provider turns a :class:`ModelRequest` into a stream of live :data:`StreamEvent` values that
ends with exactly one :class:`ResponseComplete` carrying the whole assistant message (as the
persisted :class:`~liteagent.eventlog.types.AssistantMessage` event). Live deltas are for
display only; the final message is what is stored. Optional capabilities are declared in
:attr:`ModelProvider.capabilities`; using one that is not declared raises
:class:`CapabilityNotSupportedError`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final

from liteagent.eventlog import CancelToken
from liteagent.eventlog.types import (
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
    Compact,
    ContextEdit,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSchema,
    ToolUseStart,
)

from ._errors import CapabilityNotSupportedError, ProviderStreamError

__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "COMPACT",
    "TOKEN_COUNTING",
    "AppliedEdit",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "ContextEdit",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ResponseComplete",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolSchema",
    "ToolUseStart",
]

TOKEN_COUNTING: Final = "token_counting"  # noqa: S105 -- a capability name, not a secret
CLEAR_TOOL_USES: Final = "clear_tool_uses"
CLEAR_THINKING: Final = "clear_thinking"
COMPACT: Final = "compact"


_EDIT_CAPABILITY: dict[type[Any], str] = {
    ClearToolUses: CLEAR_TOOL_USES,
    ClearThinking: CLEAR_THINKING,
    Compact: COMPACT,
}


class ModelProvider(abc.ABC):
    """A model behind one streaming call.

    :meth:`stream` yields live events and ends with exactly one :class:`ResponseComplete`. It
    raises :class:`~liteagent.providers.ProviderError` subclasses for failures and
    :class:`~liteagent.eventlog.errors.OperationCancelledError` when ``cancel`` fires; in both
    cases no response is produced. Providers are safe to use from several threads at once.
    """

    #: The optional capabilities this provider has (``TOKEN_COUNTING``, ``CLEAR_TOOL_USES``,
    #: ``CLEAR_THINKING``, ``COMPACT``).
    capabilities: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        """A short name for messages and logs."""
        return type(self).__name__

    @abc.abstractmethod
    def stream(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Stream the response to ``request``."""

    def complete(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> ModelResponse:
        """Run :meth:`stream` to the end and return the response."""
        response: ModelResponse | None = None
        for event in self.stream(request, cancel=cancel):
            if isinstance(event, ResponseComplete):
                response = event.response
        if response is None:
            raise ProviderStreamError(f"{self.name} ended a stream without a response")
        return response

    def count_tokens(self, request: ModelRequest) -> int:  # noqa: ARG002 -- the default refuses
        """Return the provider's count of the request's input tokens (capability
        ``TOKEN_COUNTING``)."""
        raise CapabilityNotSupportedError(self.name, TOKEN_COUNTING)

    def supports(self, capability: str) -> bool:
        """Whether the provider declares ``capability``."""
        return capability in self.capabilities

    def check_request(self, request: ModelRequest) -> None:
        """Raise :class:`CapabilityNotSupportedError` when ``request`` uses a native context
        edit this provider does not declare."""
        for edit in request.context_edits:
            capability = _EDIT_CAPABILITY[type(edit)]
            if capability not in self.capabilities:
                raise CapabilityNotSupportedError(self.name, capability)

    def close(self) -> None:  # noqa: B027 -- an optional hook; most providers hold nothing
        """Release connections; the default does nothing."""

    def __enter__(self) -> ModelProvider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
