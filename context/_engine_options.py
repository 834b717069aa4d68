"""The ContextEngine's options and the errors and results it reports."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from liteagent.eventlog import CancelToken
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError
from liteagent.eventlog.types import ContextSettings, Message

from ._checks import check_int

__all__ = [
    "LEVELS",
    "NATIVE_EDITS",
    "ContextBudgetError",
    "ContextOptions",
    "ContextView",
    "Planner",
]

NATIVE_EDITS = ("clear_thinking", "clear_tool_uses")
"""The provider-native context edits the engine uses, at the normalize level and above."""

LEVELS = ("none", "externalize", "normalize", "select", "project", "recover")
"""The engine's levels, in escalation order (``project`` and ``recover`` are the session's)."""


class Planner(Protocol):
    """Summarizes the older part of a conversation the engine had to leave out of the view.

    Called off the model call's path with the messages to summarize and a cancel token; returns
    the summary text. The session enforces ``planner_timeout_s``; a planner that times out,
    raises or returns no text is replaced by the deterministic view, and a cancelled one
    commits nothing.
    """

    def __call__(self, messages: Sequence[Message], *, cancel: CancelToken) -> str:
        """The summary of ``messages``."""
        ...


class ContextBudgetError(LiteAgentError):
    """The parts of a conversation the engine must keep (the first prompt, the latest prompt and
    the current turn) do not fit the budget on their own; ``tokens`` is their estimate and
    ``budget`` the budget."""

    def __init__(self, message: str, *, tokens: int, budget: int) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.budget = budget


@dataclass(frozen=True)
class ContextOptions:
    """How the ContextEngine manages a session's context (see the README's "Context engine").

    - ``budget_tokens``: the most estimated input tokens (messages, system prompt and tools) a
      request may hold; ``None`` means ``window_tokens`` less the output reserve (the request's
      ``max_tokens``).
    - ``archive_threshold_bytes``: tool results larger than this (UTF-8 bytes) go to the blob
      store before the next model call; the model sees a reference and a preview.
    - ``planner`` / ``planner_timeout_s``: summarizes what the engine leaves out (optional).
    - ``idle_compact_after``: seconds of idleness after which a session above its budget is
      compacted between turns without waiting for input (``None``: never).
    - ``keep_recent_results``: tool results that are never cleared at the normalize level.
    - ``preview_chars``: characters of an archived result shown in its preview.
    - ``window_tokens``: the model's context window (used only for the default budget).
    - ``native_edits``: prefer the provider's own context editing when it declares it.
    """

    budget_tokens: int | None = None
    archive_threshold_bytes: int = 16384
    planner: Planner | None = None
    planner_timeout_s: float = 60.0
    idle_compact_after: float | None = None
    keep_recent_results: int = 4
    preview_chars: int = 400
    window_tokens: int = 200_000
    native_edits: bool = True

    def __post_init__(self) -> None:
        check_int("budget_tokens", self.budget_tokens, 1, optional=True)
        check_int("archive_threshold_bytes", self.archive_threshold_bytes, 0)
        check_int("keep_recent_results", self.keep_recent_results, 0)
        check_int("preview_chars", self.preview_chars, 0)
        check_int("window_tokens", self.window_tokens, 1)
        for name in ("planner_timeout_s", "idle_compact_after"):
            value = getattr(self, name)
            if value is None and name == "idle_compact_after":
                continue
            if type(value) not in (int, float) or not value > 0:
                raise InvalidArgumentError(f"{name} must be a number > 0, got {shown(value)}")
        if self.planner is not None and not callable(self.planner):
            raise InvalidArgumentError(f"planner must be callable, got {shown(self.planner)}")
        if type(self.native_edits) is not bool:
            raise InvalidArgumentError(
                f"native_edits must be a bool, got {shown(self.native_edits)}"
            )

    @classmethod
    def of(cls, value: ContextOptions | Mapping[str, Any]) -> ContextOptions:
        """``value`` as options: options as they are, or a mapping of their fields."""
        if isinstance(value, ContextOptions):
            return value
        if not isinstance(value, Mapping):
            raise InvalidArgumentError(
                f"context must be ContextOptions, a dict of its fields or False, got {shown(value)}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(shown(k) for k in value if type(k) is not str or k not in known)
        if unknown:
            raise InvalidArgumentError(
                f"unknown context option(s) {unknown}; the options are {sorted(known)}"
            )
        return cls(**dict(value))

    def budget_for(self, max_tokens: int) -> int:
        """The budget of a request that reserves ``max_tokens`` for the output."""
        check_int("max_tokens", max_tokens, 0)
        if self.budget_tokens is not None:
            return self.budget_tokens
        return max(self.window_tokens - max_tokens, 1)

    def settings(
        self, *, max_tokens: int, fixed_tokens: int = 0, provider_edits: Sequence[str] = ()
    ) -> ContextSettings:
        """What a projection with these options depends on, as recorded in the log;
        ``provider_edits`` are the native edits the provider declares (used only when
        ``native_edits`` is on)."""
        native = tuple(e for e in NATIVE_EDITS if e in provider_edits) if self.native_edits else ()
        return ContextSettings(
            budget_tokens=self.budget_for(max_tokens),
            archive_threshold_bytes=self.archive_threshold_bytes,
            keep_recent_results=self.keep_recent_results,
            preview_chars=self.preview_chars,
            fixed_tokens=fixed_tokens,
            native_edits=native,
        )


class ContextView(msgspec.Struct, frozen=True, kw_only=True):
    """One projected view: the messages the model is shown and why.

    ``level`` is how far the engine escalated (:data:`LEVELS`); ``tokens_before`` the estimate
    of the whole conversation (with the fixed part: system prompt and tools), ``tokens_after``
    that of the view; ``budget`` the budget projected for; ``actions`` what each level did;
    ``digest`` the messages' digest of :func:`~liteagent.context.view_hash`; ``left_out`` the
    base messages ``[start, stop)`` the select level left out (empty when none), with
    ``left_out_last_seq`` the seq of the last log entry among them, and ``lead`` the number of
    view messages before the kept ones (the first prompt with the marker); ``native_edits`` the
    provider's own edits the request should carry (:data:`NATIVE_EDITS`).
    """

    messages: tuple[Message, ...]
    level: str
    tokens_before: int
    tokens_after: int
    budget: int
    actions: tuple[str, ...] = ()
    digest: bytes = b""
    left_out: tuple[int, int] = (0, 0)
    left_out_last_seq: int = 0
    lead: int = 0
    native_edits: tuple[str, ...] = ()
