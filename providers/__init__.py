"""liteagent.providers — the model boundary: the ModelProvider contract and its providers.

- :class:`ModelProvider`, :class:`ModelRequest`, the live stream events and the normalized
  error tree (see :mod:`liteagent.providers._errors`).

The fake Messages API server for tests is in :mod:`liteagent.providers.testing`.
"""

from ._contract import (
    CLEAR_THINKING,
    CLEAR_TOOL_USES,
    COMPACT,
    TOKEN_COUNTING,
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
    Compact,
    ContextEdit,
    ModelProvider,
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
from ._errors import (
    CapabilityNotSupportedError,
    ContextOverflowError,
    OverloadedError,
    ProviderAuthError,
    ProviderError,
    ProviderRequestError,
    ProviderStreamError,
    ProviderUnavailableError,
    RateLimitError,
    ReplayMismatchError,
    ScriptError,
    UnexpectedRequestError,
    UnusedResponsesError,
)

__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "COMPACT",
    "TOKEN_COUNTING",
    "AppliedEdit",
    "CapabilityNotSupportedError",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "ContextEdit",
    "ContextOverflowError",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OverloadedError",
    "ProviderAuthError",
    "ProviderError",
    "ProviderRequestError",
    "ProviderStreamError",
    "ProviderUnavailableError",
    "RateLimitError",
    "ReplayMismatchError",
    "ResponseComplete",
    "ScriptError",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolSchema",
    "ToolUseStart",
    "UnexpectedRequestError",
    "UnusedResponsesError",
]
