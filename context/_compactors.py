"""Structural compactors: a pipeline of passes, and a hard token budget.

Both are deterministic and make no model call; both ignore ``instructions`` (they do not
summarize) and ``usage`` (they decide from :func:`~._tokens.estimate_tokens`, which is high by
design, so a budget computed with it leaves headroom). Both return "nothing to reduce" as a
:class:`~._contract.CompactResult` with ``changed=False`` and the input messages unchanged, and
both keep the invariants of :mod:`._contract`.
"""

from __future__ import annotations

from collections.abc import Sequence

from liteagent.eventlog import CancelToken
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Message, Usage

from ._checks import check_int, check_messages
from ._contract import Compactor, CompactResult, Pass
from ._passes import micro_pass, snip_pass, tool_result_budget_pass
from ._pipeline import run_pipeline
from ._scope import Scope
from ._spill import SpillStore, memory_spill_store
from ._splice import choose_cut
from ._tokens import estimate_tokens

__all__ = ["default_compactor", "token_budget_compactor"]


class _PipelineCompactor(Compactor):
    """See :func:`default_compactor`."""

    def __init__(self, passes: Sequence[Pass]) -> None:
        given: object = passes
        if not isinstance(given, (list, tuple)) or not all(callable(p) for p in given):
            raise InvalidArgumentError(f"passes must be a list of passes, got {shown(given)}")
        self.passes: tuple[Pass, ...] = tuple(passes)

    def __repr__(self) -> str:
        return f"default_compactor(passes={list(self.passes)!r})"

    @property
    def spills(self) -> bool:
        """Whether one of the passes may spill (a pass without a ``spills`` attribute may)."""
        return any(getattr(p, "spills", True) is not False for p in self.passes)

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,  # noqa: ARG002 -- structural: decides from the estimate
        instructions: str | None = None,  # noqa: ARG002 -- structural: nothing to summarize
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        """Run the passes in order (:func:`~._pipeline.run_pipeline`) and return its result
        (``cancel`` is checked before each pass; the passes make no model call)."""
        check_messages(messages, repr(self))
        return run_pipeline(messages, self.passes, cancel=cancel)


def default_compactor(
    passes: Sequence[Pass] | None = None,
    *,
    budget_bytes: int = 200_000,
    max_tokens: int | None = 120_000,
    store: SpillStore | None = None,
) -> Compactor:
    """A compactor that runs ``passes`` in order on every call and reports each one.

    By default the passes are ``tool_result_budget_pass(budget_bytes, store)`` (``store``
    defaults to a fresh :func:`~._spill.memory_spill_store`), then
    ``snip_pass(max_tokens=max_tokens)``, then ``micro_pass(max_tokens=max_tokens)``: large
    tool results move to the store once they together exceed ``budget_bytes``; then, only while
    the estimate is above ``max_tokens``, the oldest middle turns go, and then (if the first
    prompt and the kept turns are still too large) the oldest tool-result bodies are cleared.
    So the compactor can run before every model call (:func:`~._middleware.compaction`) and
    leaves a conversation that fits alone. The default ``max_tokens`` (120,000 estimated tokens,
    about 80,000 to 100,000 real ones since the estimate is high) suits a 200k window;
    ``max_tokens=None`` makes snip and micro act on every call. ``budget_bytes``,
    ``max_tokens`` and ``store`` only configure the default passes and are unused when
    ``passes`` is given. Invalid settings raise
    :class:`~liteagent.eventlog.errors.InvalidArgumentError`.
    """
    if store is not None and not isinstance(store, SpillStore):
        raise InvalidArgumentError(f"store must be None or a SpillStore, got {shown(store)}")
    check_int("budget_bytes", budget_bytes, 0)
    check_int("max_tokens", max_tokens, 0, optional=True)
    if passes is None:
        spill = memory_spill_store() if store is None else store
        passes = (
            tool_result_budget_pass(budget_bytes, spill),
            snip_pass(max_tokens=max_tokens),
            micro_pass(max_tokens=max_tokens),
        )
    return _PipelineCompactor(passes)


class _TokenBudgetPass:
    """The cut of :func:`token_budget_compactor`, as a pass so it is reported like one."""

    __slots__ = ("max_tokens", "name")
    name: str
    spills = False

    def __init__(self, max_tokens: int) -> None:
        self.name = "token_budget"
        self.max_tokens = max_tokens

    def __call__(self, messages: Sequence[Message]) -> tuple[list[Message], str]:
        scope = Scope(messages)
        first = scope.first_prompt
        if first is None or estimate_tokens(messages) <= self.max_tokens:
            return list(messages), ""
        stops = [s for s in scope.turn_starts if first < s <= scope.last_turn_start]
        cut = choose_cut(messages, scope, first + 1, stops, self.max_tokens)
        if cut is None:
            return list(messages), ""
        kept = len(messages) - cut.removed - (first + 1)
        detail = (
            f"removed {cut.removed} messages from {cut.turns} turns after the first prompt; "
            f"kept the newest {kept} messages"
        )
        return cut.messages, detail


class _TokenBudgetCompactor(_PipelineCompactor):
    """See :func:`token_budget_compactor`: a pipeline of its one cut."""

    def __init__(self, max_tokens: int) -> None:
        check_int("max_tokens", max_tokens, 1)
        super().__init__((_TokenBudgetPass(max_tokens),))
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return f"token_budget_compactor(max_tokens={self.max_tokens})"


def token_budget_compactor(max_tokens: int) -> Compactor:
    """A compactor that keeps the newest whole turns that fit within ``max_tokens``.

    When the estimate is above ``max_tokens``, the result is the first user prompt (and anything
    before it), one marker, and the newest whole turns that fit with them; the rest of the first
    prompt's turn and the older turns go. The most recent turn is always kept, even alone above
    the budget, so the result can still exceed ``max_tokens``. The marker, ``[liteagent: N earlier
    turns (M messages) were removed to save context]``, leads the first kept assistant step, or
    is an assistant message of its own between the first prompt and a kept prompt (both stay
    verbatim; see :mod:`._splice`).
    ``max_tokens`` must be at least 1 (:class:`~liteagent.eventlog.errors.InvalidArgumentError`).
    """
    return _TokenBudgetCompactor(max_tokens)
