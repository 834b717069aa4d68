"""The ContextEngine: a pure projection of a session's folded log into the view the model sees.

Per request the engine measures the estimated tokens (:func:`~._tokens.estimate_tokens` of the
messages, plus the fixed part: system prompt and tools) against the budget and escalates only as
far as needed:

1. **externalize** — always: archived tool results
   (:class:`~liteagent.eventlog.types.ContentArchived`) show a reference and a preview
   (:func:`~._archive.archive_marker`) instead of their body;
2. **normalize** — over budget: old tool results (all but ``keep_recent_results`` and those of
   the current turn) become one-line placeholders (an archived one keeps its reference line),
   and reads of a file read again or changed later are left out;
3. **select** — still over budget: the newest whole turns that fit are kept, after the first
   user prompt (with the latest user prompt, when it is older than them, appended to it) and one
   marker saying how many messages are left out. If the first prompt, the latest prompt and the
   current turn do not fit on their own, :class:`ContextBudgetError` is raised instead of cutting
   them.

The session adds two levels around it: **project** (a planner summarizes what select left out;
the summary is recorded as a compaction, which later projections start from) and **recover** (a
smaller budget after the provider reported an overflow).

The projection is pure: :func:`project_context` gives, for the same state and settings, the same
view byte for byte. A :class:`ContextEngine` gives the same result incrementally, in
O(new events + view) per request: it keeps the base (:mod:`._engine_base`) between calls.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Sequence

from liteagent.eventlog import SessionState
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import ContextSettings, Message, TextBlock

from ._engine_base import EngineBase
from ._engine_options import ContextBudgetError, ContextOptions, ContextView
from ._tokens import _MESSAGE_OVERHEAD as _MESSAGE_TOKENS
from ._tokens import estimate_block_tokens, estimate_tokens
from ._viewhash import message_digest, messages_digest

__all__ = ["ContextEngine", "create_context_engine", "left_out_note", "project_context"]


def left_out_note(count: int) -> str:
    """The marker of the select level for ``count`` left-out messages."""
    noun = "message is" if count == 1 else "messages are"
    return (
        f"[liteagent: {count} earlier {noun} left out of this view to fit the context "
        "budget; the session log keeps them]"
    )


@functools.lru_cache(maxsize=1024)
def _note_tokens(count: int) -> int:
    """``estimate_block_tokens`` of the marker for ``count`` left-out messages (the select
    level asks for it several times per request)."""
    return estimate_block_tokens(TextBlock(left_out_note(count)))


def _settings(value: ContextOptions | ContextSettings, max_tokens: int) -> ContextSettings:
    if isinstance(value, ContextSettings):
        return value
    return value.settings(max_tokens=max_tokens)


class ContextEngine:
    """Projects views of one session, incrementally (see the module docstring).

    One engine serves one session at a time and one settings' ``keep_recent_results`` and
    ``preview_chars``; it rebuilds by itself when the log was rewritten (restore, compaction).
    Not thread-safe: a session uses it from its own thread.
    """

    def __init__(self, settings: ContextSettings) -> None:
        if not isinstance(settings, ContextSettings):
            raise InvalidArgumentError(
                f"ContextEngine needs ContextSettings, got {type(settings).__name__}"
            )
        self.settings = settings
        self._base = EngineBase(
            keep_recent=settings.keep_recent_results, preview_chars=settings.preview_chars
        )

    def project(self, state: SessionState, *, budget: int | None = None) -> ContextView:
        """The view of ``state`` within ``budget`` (default: the settings' budget)."""
        s = self.settings
        limit = s.budget_tokens if budget is None else budget
        base = self._base
        base.sync(state)
        fixed = s.fixed_tokens
        total = base.prefix[-1] + fixed
        raw = base.raw_total + fixed
        archived = base.archived_total
        actions: list[str] = []
        if archived:
            actions.append(f"externalize: {archived} archived tool result(s) shown by reference")
        if total <= limit:
            level = "externalize" if archived else "none"
            return self._view(
                base.ext,
                base.ext_digest(),
                level,
                before=raw,
                after=total,
                limit=limit,
                actions=actions,
            )
        base.advance_old()
        normalized = total - base.saving_before(len(base.ext))
        native = s.native_edits
        if "clear_tool_uses" in native and normalized <= limit:
            actions.append(
                f"normalize: the provider clears old tool uses past {limit} tokens "
                f"(keeps {s.keep_recent_results})"
            )
            return self._view(
                base.ext,
                base.ext_digest(),
                "normalize",
                before=raw,
                after=normalized,
                limit=limit,
                actions=actions,
                native=native,
            )
        cleared, superseded = base.cleared_counts()
        actions.append(
            f"normalize: {cleared} old tool result(s) cleared, {superseded} "
            "superseded read(s) left out"
        )
        if normalized <= limit:
            return self._view(
                base.norm,
                messages_digest(base.norm_digests),
                "normalize",
                before=raw,
                after=normalized,
                limit=limit,
                actions=actions,
                native=tuple(e for e in native if e != "clear_tool_uses"),
            )
        return self._select(raw, total, limit, actions)

    def _view(
        self,
        messages: Sequence[Message],
        digest: bytes,
        level: str,
        *,
        before: int,
        after: int,
        limit: int,
        actions: list[str],
        left_out: tuple[int, int] = (0, 0),
        last_seq: int = 0,
        lead: int = 0,
        native: tuple[str, ...] = (),
    ) -> ContextView:
        return ContextView(
            messages=tuple(messages),
            level=level,
            tokens_before=before,
            tokens_after=after,
            budget=limit,
            actions=tuple(actions),
            digest=digest,
            left_out=left_out,
            left_out_last_seq=last_seq,
            lead=lead,
            native_edits=native,
        )

    def _select(self, raw: int, total: int, limit: int, actions: list[str]) -> ContextView:
        base = self._base
        n = len(base.ext)
        fixed = self.settings.fixed_tokens
        first = base.prompts[0] if base.prompts else -1
        latest = base.prompts[-1] if base.prompts else -1
        starts = base.turn_starts
        lo = bisect.bisect_right(starts, first)  # candidates: starts[lo:] (all <= last_turn)

        npre = base.norm_prefix()
        tail_end = npre[n]
        lead_est = npre[first + 1]  # the messages up to the first prompt, as normalized
        # the latest prompt's blocks (a prompt has no tool results: its estimate is its own)
        latest_est = (
            base.prefix[latest + 1] - base.prefix[latest] - _MESSAGE_TOKENS if latest > first else 0
        )

        def kept_latest(t: int) -> bool:
            return first < latest < t and base.ext[t].role == "assistant"

        def left(t: int) -> int:
            return t - first - 1 - (1 if kept_latest(t) else 0)

        def head(t: int) -> list[Message]:
            lead = list(base.norm[: first + 1])
            note = TextBlock(left_out_note(left(t)))
            if base.ext[t].role == "assistant" or not lead:
                extra = base.ext[latest].content if kept_latest(t) else ()
                last = lead[-1] if lead else Message("user", ())
                lead[-1:] = [Message("user", (*last.content, note, *extra), last.extra)]
            else:
                lead.append(Message("assistant", (note,)))
            return lead

        def cost(t: int) -> int:
            """``fixed + estimate_tokens(head(t)) + the normalized tail from t``, without
            building the head (see :func:`head`: the blocks it adds to the lead)."""
            note = _note_tokens(left(t))
            if base.ext[t].role == "assistant" or first < 0:
                added = (
                    note
                    + (latest_est if kept_latest(t) else 0)
                    + (_MESSAGE_TOKENS if first < 0 else 0)
                )
            else:
                added = note + _MESSAGE_TOKENS  # an assistant message holding the note
            return fixed + lead_est + added + tail_end - npre[t]

        if first < 0:  # no prompt at all: the view must start with the user marker
            while lo < len(starts) and base.ext[starts[lo]].role != "assistant":
                lo += 1
        if lo >= len(starts) or cost(starts[-1]) > limit:
            protected = cost(starts[-1]) if lo < len(starts) else total
            raise ContextBudgetError(
                f"the first prompt, the latest prompt and the current turn alone need about "
                f"{protected} tokens, over the budget of {limit}; nothing else can be cut",
                tokens=protected,
                budget=limit,
            )
        # The first candidate whose cost fits. cost(t) falls as t grows; bound the head's part
        # from above to bisect the prefix sums, then step to the exact first fit.
        most = _note_tokens(n) + latest_est + _MESSAGE_TOKENS
        allow = limit - fixed - lead_est - most
        guess = bisect.bisect_left(starts, bisect.bisect_left(npre, tail_end - allow))
        t = _first_fit(starts, lo, guess, lambda t: cost(t) <= limit)
        lead = head(t)
        messages = [*lead, *base.norm[t:]]
        digests = [message_digest(m) for m in lead] + base.norm_digests[t:]
        after = cost(t)
        actions.append(
            f"select: {left(t)} earlier message(s) left out, kept the newest {n - t} message(s)"
        )
        last_seq = base.last_seqs[t - 1] if t > 0 else 0
        native = tuple(e for e in self.settings.native_edits if e != "clear_tool_uses")
        return self._view(
            messages,
            messages_digest(digests),
            "select",
            before=raw,
            after=after,
            limit=limit,
            actions=actions,
            left_out=(first + 1, t),
            last_seq=last_seq,
            lead=len(lead),
            native=native,
        )

    def first_prompt_tokens(self, state: SessionState, message: Message) -> int | None:
        """When ``state`` has no user prompt yet, the estimated tokens of the smallest view
        holding ``message`` as the first prompt: the fixed part, the messages before it (as
        externalized) and the prompt itself, which the select level never cuts (so above the
        budget no request of the session could ever be sent). ``None`` once there is a first
        prompt: a later prompt that does not fit only fails its own turn."""
        base = self._base
        base.sync(state)
        if base.prompts:
            return None
        return self.settings.fixed_tokens + base.prefix[-1] + estimate_tokens((message,))

    def base_messages(self, start: int, stop: int) -> list[Message]:
        """Externalized base messages ``[start, stop)`` of the last projection (what a planner
        summarizes)."""
        return list(self._base.ext[start:stop])


def _first_fit(starts: Sequence[int], lo: int, guess: int, fits: Callable[[int], bool]) -> int:
    """The first of ``starts[lo:]`` that ``fits`` (which holds from some index on, and for the
    last one), searching from ``guess``."""
    k = min(max(guess, lo), len(starts) - 1)
    while k < len(starts) - 1 and not fits(starts[k]):
        k += 1
    while k > lo and fits(starts[k - 1]):
        k -= 1
    return starts[k]


def create_context_engine(
    options: ContextOptions | ContextSettings | None = None,
    *,
    max_tokens: int = 8192,
) -> ContextEngine:
    """An engine for ``options`` (default :class:`ContextOptions`), whose default budget
    reserves ``max_tokens`` for the output."""
    return ContextEngine(_settings(options or ContextOptions(), max_tokens))


def project_context(
    state: SessionState,
    options: ContextOptions | ContextSettings,
    *,
    budget: int | None = None,
    max_tokens: int = 8192,
) -> ContextView:
    """The view of ``state`` (pure: a fresh engine each call; see the module docstring)."""
    return ContextEngine(_settings(options, max_tokens)).project(state, budget=budget)
