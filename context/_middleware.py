"""Model-call middleware for the agent's turn loop: compaction before each call, and a trim and
one retry when the provider says the prompt does not fit.

Middleware objects have either or both hooks, which the turn loop looks up with ``getattr``:

- ``before_model(request, state) -> ModelRequest`` rewrites the request before it is sent;
- ``wrap_model_call(request, call) -> ModelResponse`` wraps the call itself.

Both only change what the model is sent: the session log keeps every event, and the turn loop
records the hash of the request that was actually sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from liteagent.eventlog import CancelToken
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog._messages import merge_adjacent
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import ContextLimitError, InvalidArgumentError
from liteagent.eventlog.types import (
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    Usage,
)

from ._contract import Compactor
from ._tokens import (
    estimate_block_tokens,
    estimate_tokens,
    fit_after_overflow,
    request_overhead_tokens,
)
from ._turns import is_prompt, split_turns

__all__ = [
    "CompactionMiddleware",
    "ReactiveCompaction",
    "compaction",
    "reactive_compaction",
    "trim_messages",
]

_log = get_logger("liteagent.context")
"""The share of the reported context window a trimmed request aims for."""


class CompactionMiddleware:
    """See :func:`compaction`."""

    def __init__(self, compactor: Compactor) -> None:
        self.compactor = compactor

    @property
    def spills(self) -> bool:
        """Whether the compactor may leave spill markers (:attr:`Compactor.spills`): an agent
        given this middleware then offers the ``context`` tool that reads them."""
        return self.compactor.spills

    def before_model(
        self, request: ModelRequest, state: Any, *, cancel: CancelToken | None = None
    ) -> ModelRequest:
        """Run the compactor over ``request.messages`` (with the turn's ``cancel`` token);
        return the request with the compacted messages when they changed, else ``request``
        itself."""
        if not isinstance(request, ModelRequest):
            raise InvalidArgumentError(f"request must be a ModelRequest, got {shown(request)}")
        usage = getattr(state, "last_usage", None)
        result = self.compactor.run(
            request.messages, usage=usage if isinstance(usage, Usage) else None, cancel=cancel
        )
        if not result.changed or result.messages == request.messages:
            return request
        return msgspec.structs.replace(request, messages=result.messages)


def compaction(compactor: Compactor) -> CompactionMiddleware:
    """Middleware that runs ``compactor.maybe_compact`` before every model call.

    The compactor gets the request's messages, as ``usage`` the usage of the session's last
    model response when the folded state has one (``state.last_usage``; ``None`` otherwise),
    and the turn's cancel token (when its ``maybe_compact`` takes one, see
    :meth:`Compactor.run`). Raises :class:`InvalidArgumentError` for a ``compactor`` that is not a
    :class:`Compactor`. When the result changed, the request is sent with the result's messages
    (``msgspec.structs.replace``); otherwise the very same request object goes on. Nothing is
    written to the log: the compacted view exists only in the request (for a compaction the
    projection keeps, use ``agent.compact()``). A compactor's exceptions propagate.
    """
    if not isinstance(compactor, Compactor):
        raise InvalidArgumentError(
            f"compaction() needs a Compactor, got {type(compactor).__name__}"
        )
    return CompactionMiddleware(compactor)


class ReactiveCompaction:
    """See :func:`reactive_compaction`."""

    spills = False  # its notes name no tool (see CompactionMiddleware.spills)

    def __init__(self, *, floor_tokens: int) -> None:
        self.floor_tokens = floor_tokens
        self._lock = threading.Lock()
        self._ceiling: int | None = None  # the smallest target an overflow led to

    @property
    def ceiling(self) -> int | None:
        """The estimated tokens of messages that later requests are trimmed to before the
        call (the smallest target an overflow led to; ``None`` before any overflow)."""
        with self._lock:
            return self._ceiling

    def wrap_model_call(
        self, request: ModelRequest, call: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        """Call (trimmed first to :attr:`ceiling` when over it); on a context overflow trim
        the request and call once more."""
        ceiling = self.ceiling
        if ceiling is not None and estimate_tokens(request.messages) > ceiling:
            trimmed, _ = trim_messages(request.messages, ceiling)
            request = msgspec.structs.replace(request, messages=trimmed)
        try:
            return call(request)
        except ContextLimitError as e:
            target = overflow_target(request, e, self.floor_tokens)
            messages, detail = trim_messages(request.messages, target)
            if messages == request.messages:
                raise
            with self._lock:
                self._ceiling = target if self._ceiling is None else min(self._ceiling, target)
            _log.info(
                "compaction.reactive",
                tokens=e.tokens,
                maximum=e.maximum,
                target=target,
                detail=detail,
            )
        return call(msgspec.structs.replace(request, messages=messages))


def reactive_compaction(*, floor_tokens: int = 1024) -> ReactiveCompaction:
    """Middleware that recovers once from a context overflow.

    ``wrap_model_call(request, call)`` returns ``call(request)``. When that raises
    :class:`~liteagent.eventlog.errors.ContextLimitError` (providers raise it before anything has
    streamed; ``liteagent.providers.ContextOverflowError`` is one), it:

    1. computes a target size for the messages, in estimated tokens: with the reported
       ``tokens`` and ``maximum``, ``(0.9 * maximum - request.max_tokens) * est / tokens - fixed``,
       where ``est`` is the estimate of the whole request (messages, system prompt, tools) and
       ``fixed`` that of the system prompt and tools; without both numbers, or when that target
       is not below the messages' estimate, half the messages' estimate. The target is never
       below ``floor_tokens`` (so odd numbers never trim a conversation to almost nothing);
    2. trims the messages to it with :func:`trim_messages` (deterministic, no model call:
       old tool results emptied first, then the oldest whole turns dropped; the first prompt
       and the last turn are kept verbatim);
    3. calls ``call`` once more with the trimmed messages and returns its response. A second
       ``ContextLimitError`` (or any other error) propagates: it never loops.

    The smallest target so far is remembered (``ceiling``): later requests whose messages are
    estimated above it are trimmed to it before the call, so a model whose window is smaller
    than the conversation does not refuse the first call of every step (one halving per call
    was soon not enough, and every later send failed).

    When trimming cannot change anything (nothing but the first prompt and the last turn), the
    original error is re-raised without a second call. The retry is only safe because the
    error comes before any live event was published; a provider that raised it mid-stream
    would have its first deltas shown twice. Raises :class:`InvalidArgumentError`
    for a negative ``floor_tokens``.
    """
    if type(floor_tokens) is not int or floor_tokens < 0:
        raise InvalidArgumentError(f"floor_tokens must be an int >= 0, got {shown(floor_tokens)}")
    return ReactiveCompaction(floor_tokens=floor_tokens)


def overflow_target(request: ModelRequest, error: ContextLimitError, floor_tokens: int) -> int:
    """The estimated tokens the messages of ``request`` should shrink to after ``error`` (see
    :func:`reactive_compaction`)."""
    est_messages = estimate_tokens(request.messages)
    fixed = request_overhead_tokens(request.system, request.tools)
    target = est_messages // 2
    fit = fit_after_overflow(est_messages + fixed, error, request.max_tokens)
    if fit is not None and fit - fixed < est_messages:
        target = fit - fixed
    return max(target, floor_tokens)


def trim_messages(messages: Sequence[Message], target: int) -> tuple[tuple[Message, ...], str]:
    """Trim ``messages`` towards ``target`` estimated tokens, deterministically and without a
    model; return the new messages and a one-line description ("" when nothing changed).

    The first user prompt and the last turn are kept verbatim; cuts align to turns, so every
    ``tool_use`` keeps its ``tool_result``. In order, each step stopping as soon as the estimate
    is at or below ``target``:

    1. replace the bodies of the largest tool results outside the last turn (largest first,
       earlier first on ties) with ``"[liteagent: tool result of about N tokens removed to fit
       the context window]"``, keeping ``tool_use_id`` and ``is_error``;
    2. drop the oldest whole units after the first prompt — first the rest of the first turn,
       then each following turn — and add a text block
       ``"[liteagent: N earlier message(s) dropped to fit the context window]"`` to the first
       prompt (a user message that then follows it is merged into it, so roles alternate).

    Emptying old tool results comes first because it keeps the record of what was asked and
    done; dropping first would leave nothing for the second step to shrink (every tool result
    outside the last turn would already be gone). The result may still be above ``target``
    when only the first prompt and the last turn are left.
    """
    turns = split_turns(messages)
    if len(turns) < 2:
        return tuple(messages), ""
    head = turns[0][0] if is_prompt(turns[0][0]) else None
    units = [u for u in (turns[0][1:] if head is not None else turns[0], *turns[1:-1]) if u]
    tokens = estimate_tokens(messages)
    units, tokens, shrunk = _shrink_results(units, tokens, target)
    dropped = dropped_messages = 0
    while dropped < len(units) and tokens > target:
        tokens -= estimate_tokens(units[dropped])
        dropped_messages += len(units[dropped])
        dropped += 1
    out: list[Message] = []
    if head is not None:
        marker = f"[liteagent: {dropped_messages} earlier message(s) dropped to fit the context "
        marker += "window]"
        out.append(Message("user", (*head.content, TextBlock(marker))) if dropped else head)
    merge_adjacent([*(m for u in units[dropped:] for m in u), *turns[-1]], into=out)
    parts = [f"emptied {shrunk} tool result(s)"] if shrunk else []
    parts += [f"dropped {dropped_messages} message(s)"] if dropped else []
    return tuple(out), "; ".join(parts)


def _shrink_results(
    units: list[list[Message]], tokens: int, target: int
) -> tuple[list[list[Message]], int, int]:
    """Replace the largest tool-result bodies in ``units`` until ``tokens`` (the estimate of
    the whole conversation) fits ``target``; return the units, the new estimate and how many
    results were emptied."""
    out = [list(u) for u in units]
    candidates = sorted(
        (-estimate_block_tokens(b), u, i, j)
        for u, unit in enumerate(units)
        for i, m in enumerate(unit)
        for j, b in enumerate(m.content)
        if type(b) is ToolResultBlock
    )
    shrunk = 0
    for neg_size, u, i, j in candidates:
        if tokens <= target:
            break
        block = out[u][i].content[j]
        if not isinstance(block, ToolResultBlock):  # never: the candidates are results
            continue
        note = (
            f"[liteagent: tool result of about {-neg_size} tokens removed to fit the "
            "context window]"
        )
        smaller = ToolResultBlock(block.tool_use_id, note, is_error=block.is_error)
        saving = -neg_size - estimate_block_tokens(smaller)
        if saving <= 0:
            continue
        content = list(out[u][i].content)
        content[j] = smaller
        out[u][i] = Message(out[u][i].role, tuple(content), out[u][i].extra)
        tokens -= saving
        shrunk += 1
    return out, tokens, shrunk
