"""The ContextEngine inside a session: what the turn loop asks of it.

- :meth:`SessionContext.project` projects the view of a request (pure: see
  :mod:`liteagent.context`), with the request's provider-native edits;
- :meth:`SessionContext.plan` lets the planner summarize what the select level left out, within
  its timeout, and returns the compaction record to append (or a reason it could not);
- :meth:`SessionContext.recover_budget` sizes the retry after a context overflow;
- :meth:`SessionContext.archive` stores tool results over the threshold in the blob store
  (durably, before the next model call) and returns their :class:`ContentArchived` records;
- :meth:`SessionContext.check_first_prompt` refuses, before anything is written, a first
  prompt that could never be sent within the budget;
- :class:`LogArchiveReader` is what the ``context`` tool reads through: only references this
  session recorded in structured fields of its own events (``ContentArchived.ref``,
  ``Compaction.spilled``) or computed from the tool-result bodies of its own log; no text of
  a message is ever parsed for references.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from liteagent.context import (
    ContextBudgetError,
    ContextEngine,
    ContextOptions,
    ContextView,
    estimate_tokens,
    provider_compaction_planner,
)
from liteagent.context._bodies import spilled_text
from liteagent.context._engine import left_out_note
from liteagent.context._llm import SUMMARY_HEADER
from liteagent.context._tokens import fit_after_overflow, request_overhead_tokens
from liteagent.context._turns import is_prompt
from liteagent.eventlog import BlobStore, CancelToken, SessionState
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog.errors import (
    BlobNotFoundError,
    CodecError,
    LiteAgentError,
    OperationCancelledError,
)
from liteagent.eventlog.types import (
    ClearThinking,
    ClearToolUses,
    Compaction,
    ContentArchived,
    ContextEdit,
    ContextStatus,
    Message,
    PassRecord,
    TextBlock,
    ToolResult,
)
from liteagent.providers import COMPACT, ContextOverflowError, ModelProvider
from liteagent.providers._contract import ToolSchema
from liteagent.tools import UnknownReferenceError

__all__ = ["LogArchiveReader", "SessionContext"]

_log = get_logger("liteagent.context")
_READERS = frozenset({"context", "read_spilled"})  # what they return is already archived
_MAX_SHRINK = 4  # a recovery projects within no less than a quarter of the refused request
_PROBE_AFTER = 20  # answers within the ceiling before it goes (see answered())


class SessionContext:
    """The engine of one session and what goes with it (see the module docstring)."""

    def __init__(
        self,
        options: ContextOptions,
        *,
        provider: ModelProvider,
        max_tokens: int,
        system: str | None,
        tools: Sequence[ToolSchema],
        model_name: str = "",
        thinking: bool = False,
    ) -> None:
        self.options = options
        self.thinking = thinking  # clear_thinking is sent only when thinking is on
        self.planner = options.planner
        self.native_planner = False
        if (
            self.planner is None
            and options.native_edits
            and model_name
            and COMPACT in provider.capabilities
        ):
            self.planner = provider_compaction_planner(provider, model_name, tools=tools)
            self.native_planner = True
        self._failed_at = 0  # left-out size at the last planner failure (0: none)
        # The budget the last recovery from a context overflow projected within: the provider
        # refused more than that, so later requests start there (see project()).
        self.ceiling: int | None = None
        self._under_ceiling = 0  # answers in a row to requests projected within the ceiling
        self.settings = options.settings(
            max_tokens=max_tokens,
            fixed_tokens=request_overhead_tokens(system, tools),
            provider_edits=tuple(provider.capabilities),
        )
        self.engine = ContextEngine(self.settings)

    def check_first_prompt(self, state: SessionState, prompt: Message) -> None:
        """Raise :class:`~liteagent.context.ContextBudgetError` when ``prompt`` would be the
        session's first prompt and does not fit the budget on its own: every later view keeps
        the first prompt, so no request of the session could ever be sent."""
        need = self.engine.first_prompt_tokens(state, prompt)
        budget = self.settings.budget_tokens
        if need is not None and need > budget:
            raise ContextBudgetError(
                f"the first prompt needs about {need} tokens with the system prompt and tools, "
                f"over the budget of {budget}; it was not recorded",
                tokens=need,
                budget=budget,
            )

    def check_compaction(self, record: Compaction) -> None:
        """Raise :class:`~liteagent.context.ContextBudgetError` when ``record``'s replacement
        holds, up to its first prompt, more than the budget: every later view keeps those
        messages verbatim (a summary rides in the first prompt), so no request of the session
        could be sent again. Nothing is recorded then, and the session goes on as it was."""
        lead: list[Message] = []
        for m in record.replacement:
            lead.append(m)
            if is_prompt(m):
                break
        need = self.settings.fixed_tokens + estimate_tokens(lead)
        budget = self.settings.budget_tokens
        if need > budget:
            raise ContextBudgetError(
                f"the compaction's first prompt (with its summary) needs about {need} tokens with "
                f"the system prompt and tools, over the budget of {budget}; it was not recorded",
                tokens=need,
                budget=budget,
            )

    def resume(self, state: SessionState) -> None:
        """Take the :attr:`ceiling` back from the log of a session that comes back (after a
        restart or a passivation): the latest request's status, when it was projected within
        less than the configured budget under the same settings, shows a recovery's ceiling
        in force. Without it, the first request after every passivation spent the provider's
        refusal (and the one retry) finding the ceiling again."""
        status = state.context_status
        if (
            status is not None
            and status.settings == self.settings
            and 0 < status.budget < self.settings.budget_tokens
        ):
            self.ceiling = status.budget

    def project(self, state: SessionState, budget: int | None = None) -> ContextView:
        """The view of ``state`` (may raise :class:`~liteagent.context.ContextBudgetError`).

        Without ``budget``, after a context overflow the view is projected within the
        :attr:`ceiling` the recovery used, when what must be kept fits there: a provider whose
        window is smaller than the configured budget would otherwise refuse the first request
        of every later step and turn again, each time spending the one retry a request gets
        (a long session then failed on every send). When what must be kept needs more than the
        ceiling, the view is the smallest one there is (within the configured budget). The
        budget a view was projected within is recorded with it, so replay recomputes it, and
        :meth:`resume` takes the ceiling back from that record when the session comes back."""
        ceiling = self.ceiling
        if budget is None and ceiling is not None and ceiling < self.settings.budget_tokens:
            try:
                return self.engine.project(state, budget=ceiling)
            except ContextBudgetError as e:
                need = e.tokens
            # What must be kept needs more than the ceiling: the smallest view there is, when
            # the configured budget allows it (else the configured budget decides and raises).
            if ceiling < need < self.settings.budget_tokens:
                try:
                    return self.engine.project(state, budget=need)
                except ContextBudgetError:
                    pass
        return self.engine.project(state, budget=budget)

    def edits(self, view: ContextView) -> tuple[ContextEdit, ...]:
        """The provider-native edits ``view`` asks for."""
        out: list[ContextEdit] = []
        if "clear_thinking" in view.native_edits and self.thinking:
            out.append(ClearThinking(keep_turns=1))
        if "clear_tool_uses" in view.native_edits:
            out.append(
                ClearToolUses(
                    trigger_tokens=max(view.budget, 1),
                    keep_tool_uses=max(self.settings.keep_recent_results, 1),
                )
            )
        return tuple(out)

    def status(
        self, view: ContextView, level: str | None = None, actions: Sequence[str] = ()
    ) -> ContextStatus:
        """The record of the decision behind ``view``."""
        return ContextStatus(
            level=level or view.level,
            tokens=view.tokens_before,
            budget=view.budget,
            tokens_after=view.tokens_after,
            actions=(*view.actions, *actions),
            settings=self.settings,
        )

    def recover_budget(
        self, view: ContextView, error: ContextOverflowError, max_tokens: int
    ) -> int | None:
        """A smaller budget after ``error``, or ``None`` when it cannot be smaller."""
        fit = fit_after_overflow(view.tokens_after, error, max_tokens)
        if fit is not None:  # never below a quarter at once: a count that far from the
            fit = max(fit, view.tokens_after // _MAX_SHRINK)  # estimate is more likely wrong
        target = min(view.tokens_after // 2 if fit is None else fit, view.tokens_after - 1)
        if target <= 0:
            return None
        self.ceiling = target if self.ceiling is None else min(self.ceiling, target)
        self._under_ceiling = 0
        return target

    def answered(self, view: ContextView) -> None:
        """The provider answered a request of ``view``. After :data:`_PROBE_AFTER` answers
        in a row within the :attr:`ceiling`, the ceiling goes (the next request is projected
        within the configured budget again): an overflow reported once (a provider's glitch, a
        wrong count) no longer keeps the session's requests small for good, at the price of
        one refused request in every :data:`_PROBE_AFTER` (recovered within the same call, and
        the ceiling is set again) where the window really is smaller than the budget."""
        if self.ceiling is None or view.budget != self.ceiling:
            return
        self._under_ceiling += 1
        if self._under_ceiling >= _PROBE_AFTER:
            self._under_ceiling = 0
            self.ceiling = None

    # -- the planner --------------------------------------------------------------------------

    def plan(
        self, view: ContextView, state: SessionState, cancel: CancelToken
    ) -> tuple[Compaction | None, str]:
        """When ``view`` had to leave messages out, ask the planner to summarize what a view of
        half the budget would leave out (so the next requests fit without another summary);
        return the compaction record to append (``None`` with the reason when there is none).
        Raises :class:`OperationCancelledError` when ``cancel`` fires meanwhile (nothing
        committed)."""
        planner = self.planner
        if planner is None or view.level != "select" or view.left_out[1] <= view.left_out[0]:
            return None, ""
        try:
            half = self.engine.project(state, budget=max(view.budget // 2, 1))
        except ContextBudgetError:
            half = view
        if half.level == "select" and half.left_out[1] > view.left_out[1]:
            view = half
        start, stop = view.left_out
        if self._failed_at and stop - start < 2 * self._failed_at:
            return None, (
                f"project: the planner failed with {self._failed_at} messages left "
                f"out; it is asked again at {2 * self._failed_at}"
            )
        messages = self.engine.base_messages(start, stop)
        own = CancelToken()
        box: list[object] = []

        def run() -> None:
            try:
                box.append(planner(messages, cancel=own))
            except BaseException as e:  # noqa: BLE001 -- reported, never raised in a thread
                box.append(e)

        thread = threading.Thread(target=run, name="liteagent-planner", daemon=True)
        thread.start()
        timeout = self.options.planner_timeout_s
        deadline = time.monotonic() + timeout
        while thread.is_alive() and (left := deadline - time.monotonic()) > 0:
            if cancel.cancelled:
                own.cancel(cancel.reason or "cancelled")
                raise OperationCancelledError(cancel.reason or "cancelled")
            thread.join(min(0.05, left))
        if thread.is_alive():
            own.cancel("the planner timed out")
            self._failed_at = stop - start
            return None, (
                f"project: the planner timed out after {timeout:g}s; kept the selected view"
            )
        cancel.raise_if_cancelled()
        outcome = box[0] if box else None
        if isinstance(outcome, BaseException) or not isinstance(outcome, str) or not outcome:
            why = (
                f"{type(outcome).__name__}: {outcome}"
                if isinstance(outcome, BaseException)
                else "no summary"
            )
            _log.warning("context.planner_failed", error=why)
            self._failed_at = stop - start
            return None, f"project: the planner failed ({why}); kept the selected view"
        record = self._compaction(view, outcome)
        if record.tokens_after > view.budget:
            # An enormous summary would be recorded, left out by the next view and asked for
            # again on every request: a failure like no summary at all.
            _log.warning("context.planner_summary_too_large", tokens=record.tokens_after)
            self._failed_at = stop - start
            return None, (
                f"project: the planner's summary leaves about {record.tokens_after} tokens, "
                f"over the budget of {view.budget}; kept the selected view"
            )
        self._failed_at = 0
        who = "the provider's compaction" if self.native_planner else "the planner"
        return record, f"project: {who} summarized {stop - start} message(s)"

    def _compaction(self, view: ContextView, summary: str) -> Compaction:
        block = TextBlock(f"{SUMMARY_HEADER}\n{summary}")
        replacement = tuple(
            Message(m.role, tuple(block if _is_note(b) else b for b in m.content), m.extra)
            for m in view.messages[: view.lead]
        )
        after = estimate_tokens(replacement) + estimate_tokens(view.messages[view.lead :])
        return Compaction(
            first_seq=1,
            last_seq=view.left_out_last_seq,
            tokens_before=view.tokens_before,
            tokens_after=after + self.settings.fixed_tokens,
            summary=summary,
            passes=(
                PassRecord(
                    name="planner",
                    tokens_before=view.tokens_before,
                    tokens_after=after + self.settings.fixed_tokens,
                    detail=f"summarized {view.left_out[1] - view.left_out[0]} messages",
                ),
            ),
            replacement=replacement,
        )

    # -- the archive --------------------------------------------------------------------------

    def archive(self, results: Sequence[ToolResult], blobs: BlobStore) -> list[ContentArchived]:
        """Put the bodies over the threshold into ``blobs`` (durable when this returns); the
        results of the tools that read the archive are not archived again."""
        out: list[ContentArchived] = []
        limit = self.options.archive_threshold_bytes
        for r in results:
            body = r.block.content
            if not isinstance(body, str) or r.tool_name in _READERS:
                continue
            data = body.encode("utf-8", "surrogatepass")
            if len(data) <= limit:
                continue
            try:
                ref = blobs.put(data)
            except (LiteAgentError, OSError) as e:
                _log.warning(
                    "context.archive_failed", tool_use_id=r.block.tool_use_id, error=repr(e)
                )
                continue
            out.append(
                ContentArchived(
                    tool_use_id=r.block.tool_use_id, ref=ref, chars=len(body), size=len(data)
                )
            )
        return out


_NOTE_HEAD, _NOTE_TAIL = left_out_note(0).split("0", 1)


def _is_note(block: object) -> bool:
    """Whether ``block`` is the select level's left-out marker."""
    return (
        type(block) is TextBlock
        and block.text.startswith(_NOTE_HEAD.rstrip())
        and block.text.endswith(_NOTE_TAIL[-40:])
    )


class LogArchiveReader:
    """Reads archived and spilled content for the ``context`` tool, by reference, from what
    this session wrote itself:

    - a reference recorded in a structured field of one of its events — the ``ref`` of a
      :class:`ContentArchived` record, or one of a :class:`Compaction`'s ``spilled`` references
      (each computed from the body it moved) — is read from the blob store; when the blob store
      does not have it (a compactor that spilled into a memory store), from the body below;
    - any other reference must be that of a tool-result body of the session's own log
      (:func:`~liteagent.context.spilled_text`: computed from each body, the key a spill store
      gives it), and reads as that body. This is how the spills of model-call middleware
      (``compaction(...)``), which write nothing to the log, read back.

    Text in the conversation (a tool's output, the model's words, a marker inside a
    compaction's replacement) is never parsed for references, so a reference copied from
    elsewhere (another session's, a made-up one) is refused whatever it looks like."""

    def __init__(self, state: Callable[[], SessionState], blobs: BlobStore) -> None:
        self._state = state
        self._blobs = blobs

    def read_archived(self, ref: str) -> str:
        """The full text of ``ref`` (see :class:`liteagent.tools.ArchiveReader`)."""
        if not isinstance(ref, str):
            raise UnknownReferenceError(repr(ref))
        state = self._state()
        recorded = any(e.ref == ref for _, e in state.archived) or any(
            ref in record.spilled for _, record in state.compactions
        )
        if not recorded:
            text = spilled_text((entry.message for entry in state.entries), ref)
            if text is None:
                raise UnknownReferenceError(ref)
            return text
        try:
            # The store checks the content against its hash (CorruptBlobError otherwise).
            data = self._blobs.get(ref)
        except BlobNotFoundError:
            text = spilled_text((entry.message for entry in state.entries), ref)
            if text is None:
                raise
            return text
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as e:
            raise CodecError(f"the archived content {ref} is not UTF-8 text") from e
