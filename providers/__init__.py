"""liteagent.providers — the model boundary: the ModelProvider contract and its providers.

- :class:`ModelProvider`, :class:`ModelRequest`, the live stream events and the normalized
  error tree (see :mod:`liteagent.providers._errors`);
- :func:`anthropic` — Claude over the official ``anthropic`` SDK;
- :func:`scripted` — answers from a script, failing loudly on unexpected or unused calls;
- :func:`replay` — answers from a recorded session log, checking each request against it.

The fake Messages API server for tests is in :mod:`liteagent.providers.testing`.
"""

from typing import TYPE_CHECKING, Any

from ._contract import CLEAR_THINKING, CLEAR_TOOL_USES, COMPACT, TOKEN_COUNTING, ModelProvider
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
from ._replay import ReplayProvider, replay
from ._scripted import ScriptedProvider, ScriptItem, scripted

if TYPE_CHECKING:
    from ._anthropic import AnthropicProvider, anthropic_provider

    anthropic = anthropic_provider
    """``anthropic(*, api_key=None, base_url=None, max_retries=2, timeout=None,
    http_client=None, betas=())``: Claude over the official SDK (see
    :func:`anthropic_provider`)."""

_LAZY = frozenset({"AnthropicProvider", "anthropic_provider", "anthropic"})


def __getattr__(name: str) -> Any:
    """The Anthropic provider, imported on first use: the ``anthropic`` SDK takes seconds to
    import, and scripts, tests and CLI commands that do not call Claude should not pay it."""
    if name in _LAZY:
        from . import _anthropic  # noqa: PLC0415 -- deliberately lazy (see the docstring)

        value = {
            "AnthropicProvider": _anthropic.AnthropicProvider,
            "anthropic_provider": _anthropic.anthropic_provider,
            "anthropic": _anthropic.anthropic_provider,
        }[name]
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "COMPACT",
    "TOKEN_COUNTING",
    "AnthropicProvider",
    "CapabilityNotSupportedError",
    "ContextOverflowError",
    "ModelProvider",
    "OverloadedError",
    "ProviderAuthError",
    "ProviderError",
    "ProviderRequestError",
    "ProviderStreamError",
    "ProviderUnavailableError",
    "RateLimitError",
    "ReplayMismatchError",
    "ReplayProvider",
    "ScriptError",
    "ScriptItem",
    "ScriptedProvider",
    "UnexpectedRequestError",
    "UnusedResponsesError",
    "anthropic",
    "replay",
    "scripted",
]
