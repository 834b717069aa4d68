"""The compaction contract: passes transform messages; compactors decide when and how.

A *pass* is a pure function from messages to messages (plus a one-line report). Every pass and
compactor keeps these invariants, which the tests check on generated conversations and on every
recorded trajectory:

- every ``tool_use`` keeps its ``tool_result`` (and the reverse): cuts align to turns;
- the first user prompt and the most recent turn are kept verbatim;
- the estimated tokens never increase;
- the same input gives the same output, byte for byte.

Compaction never touches the log: a compactor returns new messages, and the caller records a
compaction event that the projection uses instead of the covered range.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Protocol

import msgspec

from liteagent.eventlog import Message, Usage

__all__ = ["CompactResult", "Compactor", "Pass", "PassReport"]


class PassReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one pass (or compactor stage) did."""

    name: str
    changed: bool
    tokens_before: int
    tokens_after: int
    detail: str = ""


class CompactResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a compaction: the messages to use, whether anything changed, the
    estimated tokens before and after, and what each pass did. "Nothing to reduce" is a valid
    result (``changed=False``)."""

    messages: tuple[Message, ...]
    changed: bool
    tokens_before: int
    tokens_after: int
    passes: tuple[PassReport, ...] = ()


class Pass(Protocol):
    """A pure transformation of a conversation; ``name`` identifies it in reports."""

    name: str

    def __call__(self, messages: Sequence[Message]) -> tuple[list[Message], str]:
        """Return the new messages and a one-line description of what changed ("" if none)."""
        ...


class Compactor(abc.ABC):
    """Decides whether a conversation needs compacting and does it."""

    @abc.abstractmethod
    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
    ) -> CompactResult:
        """Compact ``messages`` if needed. ``usage`` is the last response's usage when known (a
        compactor may trust it over its estimate); ``instructions`` steer a summarizing
        compactor (structural ones ignore them)."""
