"""Helpers shared by the conformance tests: small events that carry a recognizable text."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .._contract import Checkpointer
from .._events import StoredEvent, UserPrompt
from .._messages import TextBlock

__all__ = ["Factory", "prompt", "prompts", "texts"]

Factory = Callable[[], Checkpointer]
"""A picklable zero-argument callable that opens the store under test (the same store each
call, for durable backends)."""


def prompt(text: str) -> UserPrompt:
    """A user prompt whose text identifies it."""
    return UserPrompt(content=(TextBlock(text),))


def prompts(*names: str) -> list[UserPrompt]:
    """One prompt per name."""
    return [prompt(n) for n in names]


def texts(events: Iterable[StoredEvent]) -> list[str]:
    """The prompt texts of ``events`` (``"?"`` for other kinds), in order."""
    return [e.body.text if isinstance(e.body, UserPrompt) else "?" for e in events]
