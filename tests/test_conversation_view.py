"""The one incremental conversation view: on random logs, synced along random walks over their
prefixes (growing, and shrinking as a restore truncates), it is the conversation recomputed from
scratch; the ContextEngine's base built on it agrees with it byte for byte; and verify_replay
checks raw requests recorded from it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from liteagent.context import (
    ContextEngine,
    ContextOptions,
    estimate_tokens,
    project_context,
    request_digest,
    verify_replay,
)
from liteagent.context._archive import archive_ref
from liteagent.context._view import ConversationView
from liteagent.context._viewhash import combine_view_hash, message_digest, messages_digest
from liteagent.eventlog import SessionState, StoredEvent, fold
from liteagent.eventlog._eventcodec import kind_of
from liteagent.eventlog._messages import merge_adjacent
from liteagent.eventlog.types import (
    AssistantMessage,
    Compaction,
    ContentArchived,
    Event,
    Message,
    ModelRequest,
    ModelRequestRecord,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TurnAborted,
    UserPrompt,
)

_IDS = st.sampled_from(["t1", "t2", "t3"])
_TEXT = st.text(alphabet="ab東\n", max_size=6)
#: Bodies over the archive threshold used below (100 bytes), and small ones.
_BODY = st.one_of(_TEXT, st.builds(lambda c, n: c * n, st.sampled_from("xy"), st.integers(90, 300)))
_MESSAGES = st.lists(
    st.builds(
        Message,
        st.sampled_from(["user", "assistant"]),
        st.lists(st.builds(TextBlock, _TEXT), min_size=1, max_size=2).map(tuple),
    ),
    max_size=3,
).map(tuple)


@st.composite
def _logs(draw: st.DrawFn) -> list[Event]:
    """A log: prompts, replies calling tools, tool results (some archived), reminders, aborted
    turns and compactions whose replacement covers a prefix of it."""
    events: list[Event] = []
    for _ in range(draw(st.integers(0, 30))):
        choice = draw(st.integers(0, 9))
        if choice <= 1:
            events.append(
                UserPrompt(
                    content=(TextBlock(draw(_TEXT) or "go"),),
                    origin=draw(st.sampled_from(["user", "reminder"])),
                )
            )
        elif choice <= 3:
            blocks = draw(
                st.lists(
                    st.one_of(
                        st.builds(TextBlock, _TEXT),
                        st.builds(ToolUseBlock, _IDS, st.just("bash"), st.just({})),
                    ),
                    max_size=3,
                )
            )
            events.append(AssistantMessage(content=tuple(blocks)))
        elif choice <= 6:
            block = ToolResultBlock(draw(_IDS), draw(_BODY))
            events.append(ToolResult(block=block))
            if isinstance(block.content, str) and len(block.content) > 100 and draw(st.booleans()):
                events.append(
                    ContentArchived(
                        tool_use_id=block.tool_use_id,
                        ref=archive_ref(block.content),
                        chars=len(block.content),
                        size=len(block.content.encode()),
                    )
                )
        elif choice == 7:
            events.append(TurnAborted(reason="x", notice=draw(_TEXT) or None))
        else:
            events.append(
                Compaction(
                    first_seq=1,
                    last_seq=draw(st.integers(0, len(events))),
                    tokens_before=0,
                    tokens_after=0,
                    replacement=draw(_MESSAGES),
                )
            )
    return events


def _stored(events: list[Event]) -> list[StoredEvent]:
    return [StoredEvent(i + 1, 0.0, kind_of(e), e) for i, e in enumerate(events)]


def _expected(state: SessionState) -> tuple[list[Message], list[int]]:
    """The conversation the model is shown, from scratch: the latest compaction's replacement,
    then the entries after it, consecutive messages of one role joined; and the seq of the
    last entry in each message (the compaction's ``last_seq`` for its replacement)."""
    parts: list[tuple[Message, int]] = []
    last_seq = 0
    if state.compactions:
        _, record = state.compactions[-1]
        last_seq = record.last_seq
        parts = [(m, last_seq) for m in record.replacement]
    parts += [(e.message, e.seq) for e in state.entries if e.seq > last_seq]
    seqs: list[int] = []
    for k, (m, seq) in enumerate(parts):
        if k and parts[k - 1][0].role == m.role:
            seqs[-1] = seq
        else:
            seqs.append(seq)
    return merge_adjacent(m for m, _ in parts), seqs


_SETTINGS = settings(max_examples=150, deadline=None)
#: A budget nothing reaches, and a threshold the generated large bodies pass.
_OPTIONS = ContextOptions(budget_tokens=10**9, archive_threshold_bytes=100)


@_SETTINGS
@given(events=_logs(), walk=st.lists(st.integers(0, 40), min_size=1, max_size=12))
def test_the_incremental_view_is_the_conversation(events: list[Event], walk: list[int]) -> None:
    """Synced along a walk over the log's prefixes (a shorter one is a truncation), the view is
    the conversation recomputed from scratch, with each message's digest, estimate and last
    seq, and its O(1) digest is the digest of those messages."""
    stored = _stored(events)
    view = ConversationView()
    for step in walk:
        state = fold(stored[: min(step, len(stored))])
        messages = view.sync(state)
        expected, seqs = _expected(state)
        assert (expected, seqs) == (list(messages), view.seqs)
        assert [message_digest(m) for m in expected] == view.digests
        assert messages_digest(view.digests) == view.messages_digest()
        assert (estimate_tokens(expected), [estimate_tokens((m,)) for m in expected]) == (
            view.total_tokens,
            view.tokens,
        )
        assert messages is view.sync(state)  # unchanged: the same tuple


@_SETTINGS
@given(events=_logs(), walk=st.lists(st.integers(0, 40), min_size=1, max_size=12))
def test_the_engine_base_agrees_with_the_raw_view_byte_for_byte(
    events: list[Event], walk: list[int]
) -> None:
    """Along the same walk, the engine (incremental, one instance) projects what a fresh
    projection does; with nothing archived its view is the raw view, digest for digest."""
    stored = _stored(events)
    settings_ = _OPTIONS.settings(max_tokens=1)
    engine = ContextEngine(settings_)
    view = ConversationView()
    for step in walk:
        state = fold(stored[: min(step, len(stored))])
        projected = engine.project(state)
        assert project_context(state, settings_) == projected
        assert messages_digest(message_digest(m) for m in projected.messages) == (projected.digest)
        raw = view.sync(state)
        if not state.archived:
            assert (raw, view.messages_digest()) == (projected.messages, projected.digest)


@_SETTINGS
@given(events=_logs(), cuts=st.sets(st.integers(0, 40), max_size=5))
def test_raw_requests_recorded_from_the_view_verify(events: list[Event], cuts: set[int]) -> None:
    """A log whose raw requests were recorded, at random points, with the hash of the view
    then: verify_replay recomputes every one of them."""
    view = ConversationView()
    log: list[Event] = []
    for i, event in enumerate([*events, None]):
        if i in cuts:
            messages = view.sync(fold(_stored(log)))
            request = ModelRequest(model="m", messages=messages, system="s")
            head = request_digest(request)
            log.append(
                ModelRequestRecord(
                    view_hash=combine_view_hash(head, view.messages_digest()),
                    token_estimate=0,
                    model="m",
                    request_digest=head,
                )
            )
        if event is not None:
            log.append(event)
    report = verify_replay(_stored(log))
    assert (True, len(cuts & set(range(len(events) + 1)))) == (report.ok, len(report.checks))


def test_a_deep_copy_goes_on_by_itself() -> None:
    """copy.deepcopy of a view or an engine (as the benchmarks take one) continues
    independently."""
    import copy

    first = _stored([UserPrompt(content=(TextBlock("a"),))])
    more = _stored(
        [UserPrompt(content=(TextBlock("a"),)), AssistantMessage(content=(TextBlock("b"),))]
    )
    view = ConversationView()
    view.sync(fold(first))
    clone = copy.deepcopy(view)
    clone.sync(fold(more))
    assert (1, 2) == (len(view.sync(fold(first))), len(clone.messages))
    assert messages_digest(clone.digests) == clone.messages_digest()
    assert messages_digest(view.digests) == view.messages_digest()
    engine = ContextEngine(_OPTIONS.settings(max_tokens=1))
    engine.project(fold(first))
    twin = copy.deepcopy(engine)
    assert project_context(fold(more), _OPTIONS.settings(max_tokens=1)) == twin.project(fold(more))
    assert project_context(fold(first), _OPTIONS.settings(max_tokens=1)) == engine.project(
        fold(first)
    )
