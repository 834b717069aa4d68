"""The structural passes: spill large tool results, snip middle turns, clear old tool results.

Each factory returns a :class:`~._contract.Pass`: an object with a ``name`` and
``__call__(messages) -> (new messages, detail)``. Passes are pure and deterministic: they read only
their arguments and their own settings, iterate in conversation order, and break ties by position.
The one side effect is :func:`tool_result_budget_pass` writing to its :class:`~._spill.SpillStore`,
which is content-addressed, so running it again stores nothing new and returns the same output.

All three keep the contract's invariants (:mod:`._contract`):

- the first user prompt and the most recent turn are never changed (:mod:`._scope`);
- tool results are rewritten in place (id, ``is_error`` and ``extra`` kept) or removed with their
  whole turn, so every ``tool_use`` keeps its ``tool_result``;
- a change is made only when it lowers :func:`~._tokens.estimate_tokens` (a body is replaced only
  by a shorter one; a snip that would cost more in marker than it saves does nothing);
- when there is nothing to do, the input comes back unchanged with detail ``""``.

Invalid settings raise :class:`~liteagent.eventlog.errors.InvalidArgumentError` at construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Message, ToolResultBlock

from ._bodies import (
    body_bytes,
    body_text,
    cleared_marker,
    is_compacted,
    replace_bodies,
    tool_results,
)
from ._checks import check_int, check_messages
from ._contract import Pass
from ._scope import Scope
from ._spill import SpillStore, spill_marker
from ._splice import choose_cut
from ._tokens import estimate_block_tokens, estimate_tokens

__all__ = ["micro_pass", "snip_pass", "tool_result_budget_pass"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _shorter(old: ToolResultBlock, new_body: str) -> bool:
    """Whether ``new_body`` in place of ``old``'s content lowers the block's estimate."""
    new = ToolResultBlock(tool_use_id=old.tool_use_id, content=new_body)
    return estimate_block_tokens(new) < estimate_block_tokens(old)


class _ToolResultBudgetPass:
    """See :func:`tool_result_budget_pass`."""

    __slots__ = ("budget_bytes", "name", "store")
    name: str

    def __init__(self, budget_bytes: int, store: SpillStore | None) -> None:
        check_int("budget_bytes", budget_bytes, 0)
        if store is not None and not isinstance(store, SpillStore):
            raise InvalidArgumentError(f"store must be None or a SpillStore, got {shown(store)}")
        self.name = "tool_result_budget"
        self.budget_bytes = budget_bytes
        self.store = store

    def __repr__(self) -> str:
        store = "" if self.store is not None else ", store=None"
        return f"tool_result_budget_pass(budget_bytes={self.budget_bytes}{store})"

    @property
    def spills(self) -> bool:
        """Whether it leaves spill markers (it has a store; see ``Compactor.spills``)."""
        return self.store is not None

    def _marker(self, block: ToolResultBlock, text: str, size: int) -> str:
        if self.store is None:
            return cleared_marker(block.tool_use_id, size)
        return spill_marker(self.store.put(text), text)

    def __call__(self, messages: Sequence[Message]) -> tuple[list[Message], str]:
        check_messages(messages, repr(self))
        scope = Scope(messages)
        total = 0
        movable: list[tuple[int, int, int, ToolResultBlock, str]] = []
        for i, j, block in tool_results(messages):
            size = body_bytes(block.content)
            total += size
            if scope.frozen(i) or is_compacted(block.content):
                continue
            text = body_text(block.content)
            smallest = (
                len(spill_marker("", text))
                if self.store is not None and text is not None
                else len(cleared_marker(block.tool_use_id, size))
            )
            if text is not None and size > smallest:
                movable.append((-size, i, j, block, text))
        if total <= self.budget_bytes:
            return list(messages), ""
        movable.sort(key=lambda e: (e[0], e[1], e[2]))
        bodies: dict[tuple[int, int], str] = {}
        moved = 0
        for neg_size, i, j, block, text in movable:
            if total <= self.budget_bytes:
                break
            marker = self._marker(block, text, -neg_size)
            if not _shorter(block, marker):
                continue
            bodies[i, j] = marker
            moved += -neg_size
            total -= -neg_size - body_bytes(marker)
        if not bodies:
            return list(messages), ""
        where = "spilled" if self.store is not None else "cleared"
        detail = (
            f"{where} {_plural(len(bodies), 'tool result')} ({moved} bytes)"
            f"{' to the store' if self.store is not None else ''}; "
            f"tool results now {total} bytes (budget {self.budget_bytes})"
        )
        return replace_bodies(messages, bodies), detail


def tool_result_budget_pass(budget_bytes: int, store: SpillStore | None) -> Pass:
    """A pass that keeps the tool-result bodies of a conversation within ``budget_bytes``.

    When the bodies together (UTF-8 bytes, every tool result counted) exceed the budget, the
    largest movable ones are put into ``store``, largest first (ties: the earlier one first), until
    the total is within budget; each leaves :func:`~._spill.spill_marker` as its new (string)
    content. A tuple body is spilled as its text blocks joined by newlines. Never moved: bodies in
    the most recent turn, bodies already compacted, bodies with a non-text block (an image), and
    bodies not longer than their marker. So the total can stay above budget when what is left is
    unmovable. The detail names how many bodies and bytes moved.

    ``store=None`` is for an agent without the ``context`` tool: the bodies are dropped, not
    stored, and leave the cleared placeholder (``[liteagent:cleared <tool_use_id>: <N> bytes of
    tool output removed to save context]``, as :func:`micro_pass` writes), which names no tool.
    """
    return _ToolResultBudgetPass(budget_bytes, store)


class _SnipPass:
    """See :func:`snip_pass`."""

    __slots__ = ("keep_head_turns", "keep_tail_turns", "max_tokens", "name")
    name: str
    spills = False  # see Compactor.spills

    def __init__(self, keep_head_turns: int, keep_tail_turns: int, max_tokens: int | None) -> None:
        check_int("keep_head_turns", keep_head_turns, 1)
        check_int("keep_tail_turns", keep_tail_turns, 1)
        check_int("max_tokens", max_tokens, 0, optional=True)
        self.name = "snip"
        self.keep_head_turns = keep_head_turns
        self.keep_tail_turns = keep_tail_turns
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return (
            f"snip_pass(keep_head_turns={self.keep_head_turns}, "
            f"keep_tail_turns={self.keep_tail_turns}, max_tokens={self.max_tokens})"
        )

    def __call__(self, messages: Sequence[Message]) -> tuple[list[Message], str]:
        check_messages(messages, repr(self))
        scope = Scope(messages)
        starts = scope.turn_starts
        first_turn = scope.turn_of(scope.first_prompt) if scope.first_prompt is not None else 0
        head = max(self.keep_head_turns, first_turn + 1)
        tail = len(starts) - self.keep_tail_turns
        if tail <= head:
            return list(messages), ""
        if self.max_tokens is None:
            stops: Sequence[int] = (starts[tail],)
        elif estimate_tokens(messages) <= self.max_tokens:
            return list(messages), ""
        else:
            stops = starts[head + 1 : tail + 1]
        cut = choose_cut(messages, scope, starts[head], stops, self.max_tokens)
        if cut is None:
            return list(messages), ""
        detail = (
            f"removed {_plural(cut.turns, 'middle turn')} "
            f"({_plural(cut.removed, 'message')}) after turn {head}"
        )
        return cut.messages, detail


def snip_pass(
    *, keep_head_turns: int = 1, keep_tail_turns: int = 4, max_tokens: int | None = None
) -> Pass:
    """A pass that removes whole middle turns (turns as :func:`~._turns.split_turns` makes them).

    The first ``keep_head_turns`` turns (at least through the turn of the first user prompt) and
    the last ``keep_tail_turns`` turns stay; the ones between go. With ``max_tokens``, nothing
    happens when the estimate already fits, and otherwise only the oldest middle turns go, one at a
    time, until it fits (all of them when it never does). A turn is one agent step, so this
    shortens one long task as well as a conversation of many prompts. The removed turns leave
    one marker, ``[liteagent: N earlier turns (M messages) were removed to save context]``,
    placed by :mod:`._splice`: at the end of the tool results before the cut, at the front of the
    next kept prompt, or, when neither may change, as a message of its own. Roles keep
    alternating, and a conversation that starts with its first user prompt still does. Nothing
    happens if the marker would cost more tokens than the turns save.
    """
    return _SnipPass(keep_head_turns, keep_tail_turns, max_tokens)


class _MicroPass:
    """See :func:`micro_pass`."""

    __slots__ = ("keep_recent", "max_tokens", "name")
    name: str
    spills = False  # see Compactor.spills

    def __init__(self, keep_recent: int, max_tokens: int | None) -> None:
        check_int("keep_recent", keep_recent, 0)
        check_int("max_tokens", max_tokens, 0, optional=True)
        self.name = "micro"
        self.keep_recent = keep_recent
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return f"micro_pass(keep_recent={self.keep_recent}, max_tokens={self.max_tokens})"

    def __call__(self, messages: Sequence[Message]) -> tuple[list[Message], str]:
        check_messages(messages, repr(self))
        excess = 0
        if self.max_tokens is not None:
            excess = estimate_tokens(messages) - self.max_tokens
            if excess <= 0:
                return list(messages), ""
        scope = Scope(messages)
        results = list(tool_results(messages))
        older = results[: max(len(results) - self.keep_recent, 0)]
        bodies: dict[tuple[int, int], str] = {}
        cleared = 0
        for i, j, block in older:
            if self.max_tokens is not None and excess <= 0:
                break
            if scope.frozen(i) or is_compacted(block.content):
                continue
            size = body_bytes(block.content)
            placeholder = cleared_marker(block.tool_use_id, size)
            if size and _shorter(block, placeholder):
                bodies[i, j] = placeholder
                cleared += size
                new = ToolResultBlock(tool_use_id=block.tool_use_id, content=placeholder)
                excess -= estimate_block_tokens(block) - estimate_block_tokens(new)
        if not bodies:
            return list(messages), ""
        detail = f"cleared {_plural(len(bodies), 'tool result')} ({cleared} bytes)"
        return replace_bodies(messages, bodies), detail


def micro_pass(keep_recent: int = 3, *, max_tokens: int | None = None) -> Pass:
    """A pass that clears the bodies of older tool results, all but the ``keep_recent`` most
    recent.

    "Most recent" counts every tool result of the conversation, newest first; a cleared body
    becomes ``[liteagent:cleared <tool_use_id>: <N> bytes of tool output removed to save
    context]`` (the content is gone, not stored; use :func:`tool_result_budget_pass` to keep it).
    The id, ``is_error`` and ``extra`` stay. Never cleared: tool results in the most recent turn,
    bodies already compacted (a spill marker keeps its key), absent bodies, and bodies not longer
    than the placeholder. With ``max_tokens``, nothing happens when the estimate already fits,
    and otherwise only the oldest bodies are cleared, one at a time, until it fits (all of the
    older ones when it never does).
    """
    return _MicroPass(keep_recent, max_tokens)
