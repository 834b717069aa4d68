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

A compactor that makes model calls takes the caller's cancel token
(``maybe_compact(..., cancel=token)``) and passes it to the model, so a cancelled compaction
stops its call instead of holding whoever runs it. Callers go through :meth:`Compactor.run`,
which passes the token only to compactors whose ``maybe_compact`` takes one (those written
before it existed keep working, and are stopped only between calls).
"""

from __future__ import annotations

import abc
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec

from liteagent.eventlog import CancelToken
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Message, ToolResultBlock, Usage

from ._archive import archive_ref
from ._bodies import body_text
from ._checks import check_messages
from ._spill import SPILL_PREFIX

__all__ = ["CompactResult", "Compactor", "Pass", "PassReport", "accepts_cancel"]


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

    def spilled_refs(self, before: Sequence[Message]) -> tuple[str, ...]:
        """The references of the tool-result bodies of ``before`` (the compacted messages) that
        this result shows as spill markers: each computed from the body itself (the reference a
        content-addressed spill store gives it), never read from a marker's text, so a marker
        that a tool or the model wrote names nothing. In order, each once."""
        bodies: dict[str, list[str]] = {}
        for m in before:
            for b in m.content:
                if type(b) is ToolResultBlock:
                    text = body_text(b.content)
                    if text is not None and not text.startswith(SPILL_PREFIX):
                        bodies.setdefault(b.tool_use_id, []).append(text)
        refs: dict[str, None] = {}
        for m in self.messages:
            for b in m.content:
                if (
                    type(b) is ToolResultBlock
                    and isinstance(b.content, str)
                    and b.content.startswith(SPILL_PREFIX)
                ):
                    for text in bodies.get(b.tool_use_id, ()):
                        refs[archive_ref(text)] = None
        return tuple(refs)


class Pass(Protocol):
    """A pure transformation of a conversation; ``name`` identifies it in reports.

    A pass may also have a ``spills`` attribute: ``False`` when it never leaves a spill marker
    (see :attr:`Compactor.spills`); a pass without one is taken to spill."""

    name: str

    def __call__(self, messages: Sequence[Message]) -> tuple[list[Message], str]:
        """Return the new messages and a one-line description of what changed ("" if none)."""
        ...


class Compactor(abc.ABC):
    """Decides whether a conversation needs compacting and does it."""

    @property
    def spills(self) -> bool:
        """Whether this compactor may leave spill markers (:data:`~._spill.SPILL_PREFIX`), which
        tell the model to read the content with the ``context`` tool: an agent that runs it
        offers that tool. ``True`` unless the compactor knows better (the built-in ones do: a
        pipeline spills when one of its passes does, see :class:`Pass`)."""
        return True

    @abc.abstractmethod
    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        """Compact ``messages`` if needed. ``usage`` is the last response's usage when known (a
        compactor may trust it over its estimate); ``instructions`` steer a summarizing
        compactor (structural ones ignore them); ``cancel`` is passed to every model call, and
        a cancelled compaction raises
        :class:`~liteagent.eventlog.errors.OperationCancelledError`."""

    def run(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        """Call :meth:`maybe_compact`, with ``cancel`` when it takes one (module docstring);
        raise :class:`~liteagent.eventlog.errors.OperationCancelledError` when ``cancel`` fired
        before or during the compaction. :class:`~liteagent.eventlog.errors.InvalidArgumentError`
        for ``messages`` that are no list of messages, or a ``cancel`` that is no CancelToken."""
        check_messages(messages, repr(self))
        if cancel is not None and not isinstance(cancel, CancelToken):
            raise InvalidArgumentError(f"cancel must be None or a CancelToken, got {shown(cancel)}")
        if cancel is not None:
            cancel.raise_if_cancelled()
        if cancel is not None and accepts_cancel(self.maybe_compact):
            result = self.maybe_compact(messages, usage, instructions, cancel=cancel)
        else:
            result = self.maybe_compact(messages, usage, instructions)
        if cancel is not None:
            cancel.raise_if_cancelled()
        return result


_ACCEPTS: dict[Any, bool] = {}
_ACCEPTS_LOCK = threading.Lock()


def accepts_cancel(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a ``cancel`` keyword argument (a parameter of that name, or
    ``**kwargs``); remembered per function."""
    key = getattr(fn, "__func__", fn)
    with _ACCEPTS_LOCK:
        known = _ACCEPTS.get(key)
    if known is not None:
        return known
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to inspect (a builtin): do not pass it
        found = False
    else:
        found = any(
            (p.name == "cancel" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
            or p.kind is p.VAR_KEYWORD
            for p in params
        )
    with _ACCEPTS_LOCK:
        if len(_ACCEPTS) > 4096:
            _ACCEPTS.clear()
        _ACCEPTS[key] = found
    return found
