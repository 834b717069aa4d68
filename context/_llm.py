"""The summarizing compactor: older turns become one model-written summary.

:func:`llm_compactor` returns a :class:`~liteagent.context.Compactor` whose ``maybe_compact``:

1. runs the deterministic ``base`` compactor first (when one is given);
2. measures the result: its estimated tokens, or ``usage`` input + cache-creation + cache-read
   tokens when ``usage`` is given and larger (usage also counts the system prompt and tools,
   which the estimate does not). At or below ``token_threshold`` it returns the base result;
3. otherwise it keeps the first user prompt and the last ``keep_tail_turns`` turns verbatim and
   summarizes everything between them (the rest of the first turn and the middle turns) with
   the model, and returns ``[first prompt + summary, *tail]``: the summary is a text block
   ``"[liteagent: summary of the earlier conversation]\\n<summary>"`` in the first user message,
   which also takes the blocks of the tail's first message when that is a prompt, so roles keep
   alternating and every ``tool_use`` keeps its ``tool_result`` (cuts align to turns, which are
   agent steps, see :mod:`._turns`: one long task is summarized too).

The summarizer request is ``ModelRequest(model=model_name, system=<system_prompt>, messages=(one
user message,), max_tokens=max_summary_tokens, cache=False)``; the user message has the task,
the caller's ``instructions`` (what to keep or focus on; they steer the summary), the previous
summary when rolling, and the older turns rendered as plain text (:mod:`._render`). When that
text does not fit ``summarizer_window_tokens`` (estimated input tokens of system prompt and
message, plus ``max_summary_tokens``), it is summarized in chunks of whole turns, oldest first,
each call given the previous chunk's summary to extend ("rolling" summary); a single turn larger
than the window is split between messages, and a single message larger than the window is
split into consecutive pieces, so no call exceeds the window and nothing is left out.

Summaries are remembered (the last 16, per compactor): when the turns to summarize start with
turns already summarized under the same ``instructions``, only the new turns are sent, rolling
over the remembered summary; with no new turns no call is made. So a compactor run before every
model call (:func:`~liteagent.context.compaction`) makes one call per new turn, not one per
model call.

Cancellation: ``maybe_compact(..., cancel=token)`` passes ``token`` to every summarizer call
(and to the ``base`` compactor), so cancelling stops the model call in flight; the compaction
then raises :class:`~liteagent.eventlog.errors.OperationCancelledError` and nothing is remembered. A
``model`` whose ``complete`` takes no ``cancel`` is only stopped between calls.

Failures never raise and never block a run: a summarizer call that raises (any ``Exception``
except :class:`~liteagent.eventlog.errors.OperationCancelledError`, which propagates) or returns no
text is a failure, and the compactor returns the base result. After ``max_failures``
consecutive failures the circuit opens: the compactor makes no more model calls for the rest of
its life and returns the base result with a ``circuit_open`` report. A successful
summarization resets the count. A summary the model wrote that would not make the conversation
smaller (an enormous one) is not used, is not remembered, and counts as a failure; a
remembered summary that would not is not used either (no call was made: not a failure).

``fallback``: a compactor that reduces without a model, say ``default_compactor([snip_pass(),
micro_pass()])``, which drops the older turns a summary would have replaced. When given, a
failed summary and an open circuit return the fallback's result of the base result instead of
the base result, so a compaction that cannot summarize still reduces as one without a model
would.

Reports (``CompactResult.passes``): the base compactor's own reports (or one ``base`` report
when it gave none), then one ``summarize`` report per model call (tokens of the rendered chunk
before, of its summary after; detail ``chunk i/n``), or one ``summarize`` / ``circuit_open``
report saying why nothing was summarized, followed by the fallback's reports (or one
``fallback`` report) when it ran. ``tokens_before`` / ``tokens_after`` are the estimates
of the given messages and of the result.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from liteagent.eventlog import CancelToken
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog._messages import merge_adjacent, message_text
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError, OperationCancelledError
from liteagent.eventlog.types import Message, ModelRequest, ModelResponse, TextBlock, Usage

from ._contract import Compactor, CompactResult, PassReport, accepts_cancel
from ._render import cut_text, render_turn, text_tokens
from ._tokens import BYTES_PER_TOKEN, estimate_tokens
from ._turns import is_prompt, opens_turn, split_turns

__all__ = ["SUMMARY_HEADER", "SummarizerModel", "llm_compactor"]

SUMMARY_HEADER = "[liteagent: summary of the earlier conversation]"
"""The first line of the text block that carries a summary in the compacted conversation."""

DEFAULT_SUMMARY_SYSTEM_PROMPT = (
    "You summarize the conversation of a coding agent with its user so the agent can continue "
    "the task from the summary alone. Keep what matters for continuing: the user's goals, "
    "requests and constraints; decisions and their reasons; files read, created and changed; "
    "commands run and their outcomes; errors and how they were resolved; the current state and "
    "what remains to do. Be concise and factual. Output only the summary."
)

_TASK = "Summarize the conversation below (it continues after this part; the first user prompt "
_TASK += "is kept verbatim elsewhere)."
_CACHE_SIZE = 16
_MIN_ROOM = 64  # estimated tokens a chunk must be able to hold
_MESSAGE_TOKENS = 8  # estimate_tokens' overhead for a message with one block
_log = get_logger("liteagent.context")


class SummarizerModel(Protocol):
    """What the summarizer needs from a model: one blocking call (any
    :class:`liteagent.providers.ModelProvider` has it)."""

    def complete(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> ModelResponse:
        """Return the model's complete response to ``request``."""
        ...


class _EmptySummaryError(LiteAgentError):
    """Raised when the summarizer answered without text (counted as a failed summary, never
    raised out of the compactor)."""


class _Entry:
    """A remembered summary: of ``region`` (messages), under ``instructions``."""

    __slots__ = ("instructions", "region", "summary")

    def __init__(self, region: tuple[Message, ...], instructions: str | None, summary: str):
        self.region, self.instructions, self.summary = region, instructions, summary


def _reports(result: CompactResult, name: str) -> tuple[PassReport, ...]:
    """The reports of another compactor's ``result``, or one report ``name`` of the whole."""
    return result.passes or (
        PassReport(
            name=name,
            changed=result.changed,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
        ),
    )


def _usage_tokens(usage: Usage | None) -> int:
    if usage is None:
        return 0
    return usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens


def _split(
    messages: Sequence[Message], keep: int
) -> tuple[Message | None, list[Message], list[Message]]:
    """(first prompt or None, messages to summarize, tail) — the summary region is empty when
    the conversation has at most ``keep`` turns."""
    turns = split_turns(messages)
    if len(turns) <= keep:
        return None, [], list(messages)
    head = turns[0][0] if is_prompt(turns[0][0]) else None
    region = turns[0][1:] if head is not None else list(turns[0])
    if head is not None:
        # After an earlier compaction the first message holds its summary (and the prompt
        # merged after it): only the original prompt stays verbatim, the rest is summarized
        # again, so the first message does not grow with every compaction.
        at = next((i for i, b in enumerate(head.content) if _is_summary(b)), None)
        if at is not None:
            region.insert(0, Message("user", head.content[at:], head.extra))
            head = Message(head.role, head.content[:at], head.extra) if at else None
    for turn in turns[1:-keep]:
        region.extend(turn)
    tail = [m for turn in turns[-keep:] for m in turn]
    return head, region, tail


def _is_summary(block: object) -> bool:
    """Whether ``block`` is the text block carrying a summary (see :func:`_assemble`)."""
    return type(block) is TextBlock and block.text.startswith(SUMMARY_HEADER + "\n")


def _pieces(text: str, max_tokens: int) -> list[str]:
    """``text`` cut into consecutive pieces of at most ``max_tokens`` estimated tokens each
    (room left for a "(continued) " mark), in one linear pass: a rendered tool result of
    megabytes is cut once, not re-measured and copied for every chunk."""
    data = text.encode("utf-8", "surrogatepass")
    step = max(1, max_tokens - 5) * BYTES_PER_TOKEN  # "(continued) " is about 4 tokens
    if len(data) <= max(1, max_tokens) * BYTES_PER_TOKEN:
        return [text]
    out: list[str] = []
    i = 0
    while i < len(data):
        j = min(i + step, len(data))
        while i < j < len(data) and (data[j] & 0xC0) == 0x80:  # not inside a character
            j -= 1
        if j == i:  # a character longer than the step
            j = i + 1
            while j < len(data) and (data[j] & 0xC0) == 0x80:
                j += 1
        out.append(data[i:j].decode("utf-8", "surrogatepass"))
        i = j
    return out


def _assemble(head: Message | None, summary: str, tail: Sequence[Message]) -> list[Message]:
    block = TextBlock(f"{SUMMARY_HEADER}\n{summary}")
    first = Message("user", (*head.content, block) if head is not None else (block,))
    return merge_adjacent(tail, into=[first])


_CONTINUED = 5  # estimated tokens of a piece's line break and "(continued) " mark


def _add(parts: list[str], piece: str, continued: bool) -> None:
    """Add ``piece`` to a chunk's ``parts``: after the piece before it when it continues one
    already in the chunk, on a line of its own marked "(continued) " when it opens the chunk."""
    if continued and parts:
        parts[-1] += piece
    else:
        parts.append("(continued) " + piece if continued else piece)


class _Turn:
    """A rendered turn waiting to be summarized: its pieces (with their estimated tokens and
    whether each continues the message of the piece before it), and their total (kept as
    pieces are taken, never summed again)."""

    __slots__ = ("continued", "cost", "last", "pieces")

    def __init__(self, pieces: list[tuple[str, int, bool]]) -> None:
        self.pieces: deque[tuple[str, int, bool]] = deque(pieces)
        self.cost = sum(c for _, c, _ in pieces)
        self.last = ""
        self.continued = False

    def pop(self) -> int:
        """Take the first piece (into :attr:`last` and :attr:`continued`); return its tokens."""
        self.last, cost, self.continued = self.pieces.popleft()
        self.cost -= cost
        return cost

    def push(self, piece: str, cost: int) -> None:
        """Put the rest of a piece that was cut back in front."""
        self.pieces.appendleft((piece, cost, True))
        self.cost += cost


class _LLMCompactor(Compactor):
    def __init__(
        self,
        *,
        model: SummarizerModel,
        model_name: str,
        token_threshold: int,
        base: Compactor | None,
        fallback: Compactor | None,
        max_failures: int,
        keep_tail_turns: int,
        window: int,
        max_summary_tokens: int,
        system_prompt: str,
    ) -> None:
        self._model, self._model_name, self._threshold = model, model_name, token_threshold
        self._base, self._max_failures, self._keep = base, max_failures, keep_tail_turns
        self._fallback = fallback
        self._max_tokens, self._system = max_summary_tokens, system_prompt
        self._cancellable = accepts_cancel(model.complete)
        self._lock = threading.Lock()
        self._failures = 0
        self._cache: deque[_Entry] = deque(maxlen=_CACHE_SIZE)
        self._fixed = window - max_summary_tokens - text_tokens(system_prompt) - _MESSAGE_TOKENS
        self._usable = self._fixed - text_tokens(self._prompt("", None, None))
        if self._room("x" * (4 * self._usable), "x" * (4 * self._usable)) < _MIN_ROOM:
            raise InvalidArgumentError(
                f"summarizer_window_tokens={window} leaves too little room for the summarizer "
                f"input next to max_summary_tokens={max_summary_tokens} and the system prompt"
            )

    @property
    def spills(self) -> bool:
        """Whether the base or the fallback compactor may spill (the summary itself names no
        tool)."""
        return any(c is not None and c.spills for c in (self._base, self._fallback))

    @property
    def consecutive_failures(self) -> int:
        """How many summarizations failed in a row (``max_failures`` or more: circuit open)."""
        with self._lock:
            return self._failures

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        """Compact ``messages`` as the module docstring describes; never raises for a failing
        summarizer (only ``OperationCancelledError`` propagates, when ``cancel`` fires)."""
        original = tuple(messages)
        before = estimate_tokens(original)
        current = original
        reports: list[PassReport] = []
        if self._base is not None:
            base = self._base.run(original, usage, instructions, cancel=cancel)
            current = base.messages
            reports.extend(_reports(base, "base"))
        tokens = estimate_tokens(current)

        def done(result: Sequence[Message], *extra: PassReport) -> CompactResult:
            final = tuple(result)
            return CompactResult(
                messages=final,
                changed=final != original,
                tokens_before=before,
                tokens_after=estimate_tokens(final),
                passes=(*reports, *extra),
            )

        def unchanged(name: str, detail: str) -> PassReport:
            return PassReport(
                name=name, changed=False, tokens_before=tokens, tokens_after=tokens, detail=detail
            )

        def unsummarized(why: PassReport) -> CompactResult:
            """No summary after a failure: the fallback's result when there is a fallback."""
            if self._fallback is None:
                return done(current, why)
            fell = self._fallback.run(current, None, instructions, cancel=cancel)
            return done(fell.messages, why, *_reports(fell, "fallback"))

        if max(tokens, _usage_tokens(usage)) <= self._threshold:
            return done(current)
        with self._lock:
            failures = self._failures
        if failures >= self._max_failures:
            return unsummarized(
                unchanged(
                    "circuit_open",
                    (f"{failures} consecutive summarizer failures; the model is no longer called"),
                ),
            )
        head, region, tail = _split(current, self._keep)
        if not region:
            return done(
                current,
                unchanged(
                    "summarize",
                    (f"nothing to summarize: {self._keep} tail turn(s) cover the conversation"),
                ),
            )
        try:
            summary, calls, called = self._summarize(tuple(region), instructions, cancel)
        except OperationCancelledError:
            raise
        except Exception as e:
            if cancel is not None and cancel.cancelled:  # a model that failed its own way
                raise OperationCancelledError(cancel.reason or "cancelled") from e
            with self._lock:
                self._failures += 1
                failures = self._failures
            _log.warning("compaction.summarize_failed", error=repr(e), failures=failures)
            return unsummarized(
                unchanged(
                    "summarize",
                    (
                        f"failed ({failures}/{self._max_failures} consecutive): "
                        f"{type(e).__name__}: {e}; kept the base result"
                    ),
                ),
            )
        result = _assemble(head, summary, tail)
        too_long = called and text_tokens(summary) > 2 * self._max_tokens
        if too_long or estimate_tokens(result) >= tokens:
            if not called:  # a remembered summary: no model call was spent on it
                return done(
                    current,
                    *calls,
                    unchanged(
                        "summarize",
                        "the summary would not make the conversation smaller; kept the base result",
                    ),
                )
            # A summarizer that answers with more than it was given, or with far more than the
            # max_summary_tokens it was allowed, is failing too: counted, so that the circuit
            # opens instead of paying for a useless call every time, and never recorded (the
            # summary stays in the first message of every later request).
            with self._lock:
                self._failures += 1
                failures = self._failures
                self._cache = deque(
                    (e for e in self._cache if e.summary is not summary), maxlen=_CACHE_SIZE
                )
            _log.warning("compaction.summary_too_large", failures=failures)
            return unsummarized(
                unchanged(
                    "summarize",
                    f"failed ({failures}/{self._max_failures} consecutive): the summary "
                    + (
                        f"of about {text_tokens(summary)} tokens is over twice "
                        f"max_summary_tokens={self._max_tokens}"
                        if too_long
                        else "would not make the conversation smaller"
                    )
                    + "; kept the base result",
                ),
            )
        if called:
            with self._lock:
                self._failures = 0
        return done(result, *calls)

    # -- summarizing ------------------------------------------------------------------------

    def _remembered(
        self, region: tuple[Message, ...], instructions: str | None
    ) -> tuple[int, str | None]:
        """The longest remembered summary of a turn-aligned prefix of ``region``."""
        best: tuple[int, str | None] = (0, None)
        with self._lock:
            entries = list(self._cache)
        for e in entries:
            n = len(e.region)
            if not (e.instructions == instructions and best[0] < n <= len(region)):
                continue  # a longer region than this one (a shorter session, a restore) too
            aligned = n == len(region) or opens_turn(region[n - 1], region[n])
            if aligned and region[:n] == e.region:
                best = (n, e.summary)
        return best

    def _summarize(
        self,
        region: tuple[Message, ...],
        instructions: str | None,
        cancel: CancelToken | None = None,
    ) -> tuple[str, list[PassReport], bool]:
        """The summary of ``region``, the reports, and whether the model was called (raises
        on a failure)."""
        covered, previous = self._remembered(region, instructions)
        size = max(1, self._usable // 4)  # always fits the room (see _room)
        pending: deque[_Turn] = deque()
        for t in split_turns(region[covered:]):
            turn = _Turn(
                [
                    (p, text_tokens(p) + _CONTINUED, k > 0)
                    for r in render_turn(t)
                    for k, p in enumerate(_pieces(r, size))
                ]
            )
            if turn.pieces:
                pending.append(turn)
        summary = previous or "(the earlier conversation has no text to summarize)"
        if not pending:
            tokens = text_tokens(summary)
            detail = (
                "reused the remembered summary"
                if previous is not None
                else "the messages carry no text"
            ) + " (no model call)"
            return (
                summary,
                [
                    PassReport(
                        name="summarize",
                        changed=True,
                        tokens_before=tokens,
                        tokens_after=tokens,
                        detail=detail,
                    )
                ],
                False,
            )
        chunks: list[tuple[int, int]] = []
        while pending:
            chunk, used = self._take(pending, self._room(previous, instructions))
            request = ModelRequest(
                model=self._model_name,
                system=self._system,
                max_tokens=self._max_tokens,
                messages=(
                    Message("user", (TextBlock(self._prompt(chunk, previous, instructions)),)),
                ),
                cache=False,
            )
            if cancel is not None:
                cancel.raise_if_cancelled()
            if cancel is not None and self._cancellable:
                response = self._model.complete(request, cancel=cancel)
            else:
                response = self._model.complete(request)
            summary = message_text(response.message.content).strip()
            if not summary:
                raise _EmptySummaryError("the summarizer returned no text")
            chunks.append((used, text_tokens(summary)))
            previous = summary
        with self._lock:
            self._cache.append(_Entry(region, instructions, summary))
        rolled = f", rolling over a remembered summary of {covered} message(s)" if covered else ""
        return (
            summary,
            [
                PassReport(
                    name="summarize",
                    changed=True,
                    tokens_before=used,
                    tokens_after=out,
                    detail=f"chunk {i}/{len(chunks)}{rolled if i == 1 else ''}",
                )
                for i, (used, out) in enumerate(chunks, 1)
            ],
            True,
        )

    @staticmethod
    def _take(pending: deque[_Turn], room: int) -> tuple[str, int]:
        """Take whole turns that fit ``room`` estimated tokens from ``pending``; a first turn
        that does not fit gives the pieces that do, and a first piece that does not fit is
        cut (its rest stays pending)."""
        parts: list[str] = []
        used = 0
        while pending:
            turn = pending[0]
            if used + turn.cost <= room:
                for piece, _, continued in turn.pieces:
                    _add(parts, piece, continued)
                used += turn.cost
                pending.popleft()
                continue
            if parts:
                break
            while turn.pieces and used + turn.pieces[0][1] <= room:
                used += turn.pop()
                _add(parts, turn.last, turn.continued)
            if turn.pieces and (not parts or (turn.pieces[0][2] and room - used > _MIN_ROOM)):
                # the first piece alone, or the next piece of the message the chunk ends
                # with, is cut to fill the room (the rest stays pending)
                head, rest = cut_text(turn.pieces[0][0], room - used - _CONTINUED)
                turn.pop()
                _add(parts, head, turn.continued)
                used += text_tokens(head) + _CONTINUED
                turn.push(rest, text_tokens(rest) + _CONTINUED)
            if not turn.pieces:
                pending.popleft()
            break
        return "\n".join(parts), used

    def _room(self, previous: str | None, instructions: str | None) -> int:
        """Estimated tokens left for the chunk next to the system prompt, the frame, the
        instructions and the previous summary (each of these two cut to a quarter of the
        window's usable part), so that the whole request stays within the window."""
        return self._fixed - text_tokens(self._prompt("", previous, instructions)) - 1

    def _fit(self, text: str | None) -> str:
        return cut_text(text, self._usable // 4)[0] if text else ""

    def _prompt(self, chunk: str, previous: str | None, instructions: str | None) -> str:
        parts = [_TASK]
        if instructions:
            parts.append(f"Instructions for this summary:\n{self._fit(instructions)}")
        if previous:
            parts.append(
                "Summary of the conversation before this part (write one summary "
                "that covers it and the part below):\n<previous_summary>\n"
                f"{self._fit(previous)}\n</previous_summary>"
            )
        parts.append(f"<conversation>\n{chunk}\n</conversation>")
        return "\n\n".join(parts)


def llm_compactor(
    *,
    model: SummarizerModel,
    model_name: str,
    token_threshold: int,
    base: Compactor | None = None,
    fallback: Compactor | None = None,
    max_failures: int = 2,
    keep_tail_turns: int = 2,
    summarizer_window_tokens: int = 150_000,
    max_summary_tokens: int = 4096,
    system_prompt: str | None = None,
) -> Compactor:
    """A compactor that summarizes older turns with ``model`` once the conversation is above
    ``token_threshold`` (see the module docstring for the exact semantics).

    ``model`` is any object with ``complete(request, *, cancel=None) -> ModelResponse`` (a
    :class:`liteagent.providers.ModelProvider`); ``model_name`` the model it calls.
    ``system_prompt`` replaces the summarizer's default system prompt. ``fallback`` reduces
    without a model when no summary can be had (a failure, an open circuit). Raises
    :class:`InvalidArgumentError` for a model without ``complete``, a ``base`` or ``fallback``
    that is not a :class:`Compactor`, an empty ``model_name``,
    ``token_threshold < 0``, ``max_failures < 1``, ``keep_tail_turns < 1``,
    ``max_summary_tokens < 1``, or a window too small for the summarizer's input.
    """
    if not callable(getattr(model, "complete", None)):
        raise InvalidArgumentError(f"model must have complete(request), got {type(model).__name__}")
    if not isinstance(model_name, str) or not model_name:
        raise InvalidArgumentError("model_name must be a non-empty string")
    for name, value, least in (
        ("token_threshold", token_threshold, 0),
        ("max_failures", max_failures, 1),
        ("keep_tail_turns", keep_tail_turns, 1),
        ("max_summary_tokens", max_summary_tokens, 1),
        ("summarizer_window_tokens", summarizer_window_tokens, 1),
    ):
        if type(value) is not int or value < least:
            raise InvalidArgumentError(f"{name} must be an int >= {least}, got {shown(value)}")
    for name, compactor in (("base", base), ("fallback", fallback)):
        if compactor is not None and not isinstance(compactor, Compactor):
            raise InvalidArgumentError(
                f"{name} must be a Compactor, got {type(compactor).__name__}"
            )
    return _LLMCompactor(
        model=model,
        model_name=model_name,
        token_threshold=token_threshold,
        base=base,
        fallback=fallback,
        max_failures=max_failures,
        keep_tail_turns=keep_tail_turns,
        window=summarizer_window_tokens,
        max_summary_tokens=max_summary_tokens,
        system_prompt=DEFAULT_SUMMARY_SYSTEM_PROMPT if system_prompt is None else system_prompt,
    )
