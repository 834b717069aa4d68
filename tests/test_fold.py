"""The fold: each event kind's effect on SessionState, apply's seq check, purity, and properties."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liteagent.eventlog import SessionState, StoredEvent, apply, conversation, fold
from liteagent.eventlog._eventcodec import kind_of
from liteagent.eventlog._events import Origin
from liteagent.eventlog._fold import CheckpointMark
from liteagent.eventlog._pvec import PVec
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    BackgroundStarted,
    Compaction,
    ContentArchived,
    ContextStatus,
    ConversationEntry,
    Event,
    FileSnapshot,
    Message,
    ModelRequestRecord,
    OpaqueEvent,
    PassRecord,
    SessionStarted,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TurnAborted,
    Usage,
    UserPrompt,
)

Body = Event | OpaqueEvent


def _stored(seq: int, body: Body, ts: float | None = None) -> StoredEvent:
    return StoredEvent(seq, float(seq) if ts is None else ts, kind_of(body), body)


def _numbered(bodies: Sequence[Body], start: int = 1) -> list[StoredEvent]:
    return [_stored(start + i, b) for i, b in enumerate(bodies)]


def _prompt(text: str, origin: Origin = "user") -> UserPrompt:
    return UserPrompt(content=(TextBlock(text),), origin=origin)


def _calls(*ids: str) -> AssistantMessage:
    return AssistantMessage(
        content=(TextBlock("calling"), *(ToolUseBlock(i, "bash", {"command": i}) for i in ids))
    )


def _result(tool_use_id: str) -> ToolResult:
    return ToolResult(block=ToolResultBlock(tool_use_id, "ok"), tool_name="bash")


_SNAPSHOT = FileSnapshot(path="a.py", tool_call_id="t1", pre_image=None, pre_hash=None)
_COMPACTION = Compaction(
    first_seq=1,
    last_seq=2,
    tokens_before=100,
    tokens_after=10,
    passes=(PassRecord(name="p", tokens_before=100, tokens_after=10),),
)
_REQUEST = ModelRequestRecord(view_hash="abc", token_estimate=42)


# -- each kind's effect --------------------------------------------------------------------------


def test_fold_of_nothing_is_the_empty_state() -> None:
    """Folding no events gives the default state."""
    assert SessionState() == fold([])


def test_session_started_is_recorded() -> None:
    """session_started sets `started`."""
    started = SessionStarted(workdir="/w", model="m", system_prompt="be brief")
    assert started == fold(_numbered([started])).started


def test_user_prompt_adds_conversation_entry() -> None:
    """A user prompt adds a user message entry with its seq."""
    state = fold(_numbered([SessionStarted(workdir="/w", model="m"), _prompt("hi")]))
    assert PVec([ConversationEntry(2, Message("user", (TextBlock("hi"),)))]) == state.entries


def test_user_origin_prompt_makes_checkpoint() -> None:
    """A prompt of origin "user" makes a checkpoint with its seq, ts and text."""
    state = fold([_stored(1, _prompt("hello"), ts=123.5)])
    assert PVec([CheckpointMark(1, 123.5, "hello")]) == state.checkpoints


def test_checkpoint_prompt_joins_text_blocks_only() -> None:
    """A checkpoint's prompt is the text blocks joined by newlines, other blocks ignored."""
    prompt = UserPrompt(content=(TextBlock("a"), ThinkingBlock("x"), TextBlock("b")))
    assert "a\nb" == fold(_numbered([prompt])).checkpoints[0].prompt


@pytest.mark.parametrize("origin", ["reminder", "repair", "background"])
def test_non_user_origin_prompt_makes_no_checkpoint(origin: Origin) -> None:
    """Prompts of origin reminder, repair or background make no checkpoint."""
    state = fold(_numbered([_prompt("note", origin)]))
    assert (0, 1) == (len(state.checkpoints), len(state.entries))


def test_assistant_message_adds_conversation_entry() -> None:
    """An assistant message adds an assistant message entry with its seq."""
    msg = _calls("t1")
    state = fold(_numbered([_prompt("go"), msg]))
    assert ConversationEntry(2, Message("assistant", msg.content)) == state.entries[-1]


def test_assistant_tool_calls_become_open_in_order() -> None:
    """The tool_use ids of an assistant message become open, in block order."""
    assert ("t1", "t2") == fold(_numbered([_calls("t1", "t2")])).open_tool_calls


def test_tool_calls_of_later_messages_are_added_after() -> None:
    """Open tool calls accumulate across assistant messages."""
    state = fold(_numbered([_calls("t1"), _calls("t2", "t3")]))
    assert ("t1", "t2", "t3") == state.open_tool_calls


def test_tool_result_closes_its_call() -> None:
    """A tool result removes its tool_use id from the open calls."""
    state = fold(_numbered([_calls("t1", "t2"), _result("t1")]))
    assert ("t2",) == state.open_tool_calls


def test_tool_result_for_unknown_call_changes_no_open_calls() -> None:
    """A tool result whose id is not open leaves the open calls as they were."""
    state = fold(_numbered([_calls("t1"), _result("zzz")]))
    assert ("t1",) == state.open_tool_calls


def test_tool_result_adds_user_entry_with_its_block() -> None:
    """A tool result adds a user message holding its block."""
    result = _result("t1")
    state = fold(_numbered([_calls("t1"), result]))
    assert ConversationEntry(2, Message("user", (result.block,))) == state.entries[-1]


def test_usage_is_summed_over_assistant_messages() -> None:
    """Usage of every assistant message is summed field by field."""
    a = AssistantMessage(content=(), usage=Usage(input_tokens=1, output_tokens=2))
    b = AssistantMessage(
        content=(),
        usage=Usage(input_tokens=10, cache_creation_input_tokens=3, cache_read_input_tokens=4),
    )
    expected = Usage(
        input_tokens=11, output_tokens=2, cache_creation_input_tokens=3, cache_read_input_tokens=4
    )
    assert expected == fold(_numbered([a, b])).usage


def test_file_snapshot_is_recorded_with_seq() -> None:
    """A file snapshot is recorded with its seq."""
    state = fold(_numbered([_prompt("x"), _SNAPSHOT]))
    assert PVec([(2, _SNAPSHOT)]) == state.snapshots


def test_compaction_is_recorded_with_seq() -> None:
    """A compaction is recorded with its seq."""
    state = fold(_numbered([_prompt("x"), _prompt("y"), _COMPACTION]))
    assert PVec([(3, _COMPACTION)]) == state.compactions


def test_model_request_is_recorded_with_seq() -> None:
    """A model request is recorded with its seq."""
    state = fold(_numbered([_prompt("x"), _REQUEST]))
    assert PVec([(2, _REQUEST)]) == state.model_requests


def test_archived_contents_are_recorded_with_their_seq() -> None:
    """Each content_archived event is kept, in order, with its seq."""
    a = ContentArchived(tool_use_id="t1", ref="sha256:" + "1" * 64, chars=3, size=3)
    b = ContentArchived(tool_use_id="t2", ref="sha256:" + "2" * 64, chars=4, size=8)
    assert PVec([(1, a), (3, b)]) == fold(_numbered([a, _prompt("x"), b])).archived


def test_latest_context_status_wins() -> None:
    """context_status is the most recent ContextStatus event."""
    first = ContextStatus(level="ok", tokens=1, budget=10)
    second = ContextStatus(level="high", tokens=9, budget=10, actions=("compact",))
    assert second == fold(_numbered([first, second])).context_status


def test_background_completed_is_counted() -> None:
    """Each background_completed event is counted."""
    events = _numbered([BackgroundCompleted(task_id="a"), BackgroundCompleted(task_id="b")])
    assert 2 == fold(events).background_completed


def test_turn_aborted_is_counted() -> None:
    """Each turn_aborted event is counted."""
    events = _numbered([TurnAborted(reason="cancelled"), TurnAborted(reason="crash")])
    assert 2 == fold(events).turns_aborted


def test_a_turn_aborted_notice_closes_the_turn_as_an_assistant_message() -> None:
    """A TurnAborted with a notice adds it as an assistant message, so the next prompt is a
    message of its own instead of joining the stopped turn's tool results."""
    state = fold(
        _numbered(
            [
                _prompt("go"),
                _calls("t1"),
                _result("t1"),
                TurnAborted(reason="failed", notice="[stopped]"),
                _prompt("next"),
            ]
        )
    )
    assert [
        Message("assistant", (TextBlock("[stopped]"),)),
        Message("user", (TextBlock("next"),)),
    ] == conversation(state)[-2:]


def test_a_turn_aborted_without_notice_adds_nothing() -> None:
    """A TurnAborted without a notice leaves the conversation as it was."""
    state = fold(_numbered([_prompt("go"), TurnAborted(reason="failed"), _prompt("next")]))
    assert [Message("user", (TextBlock("go"), TextBlock("next")))] == conversation(state)


@pytest.mark.parametrize(
    ("bodies", "expected"),
    [
        ([], False),
        ([_prompt("go")], True),
        ([_prompt("go"), _calls("t1")], False),
        ([_prompt("go"), _calls("t1"), _result("t1")], True),
        ([_prompt("go"), AssistantMessage(content=(TextBlock("done"),))], False),
        (
            [
                _prompt("go"),
                AssistantMessage(content=(TextBlock("done"),)),
                _prompt("[bg done]", "background"),
            ],
            False,
        ),
        ([_prompt("go"), TurnAborted(reason="x")], True),
        ([_prompt("go"), TurnAborted(reason="x", notice="[stopped]")], False),
    ],
    ids=["empty", "prompt", "calls", "results", "answered", "background", "abort", "closed"],
)
def test_turn_open_follows_the_conversation(bodies: list[Body], expected: bool) -> None:
    """turn_open: a prompt or tool result opens a turn, an answer or an abort notice ends it,
    a background notice between turns does not open one."""
    assert expected == fold(_numbered(bodies)).turn_open


def test_unknown_kinds_are_recorded_once_each() -> None:
    """OpaqueEvents add their kind to unknown_kinds, each kind once."""
    events = _numbered(
        [OpaqueEvent("k1", b"\x01"), OpaqueEvent("k2", b"\x02"), OpaqueEvent("k1", b"\x03")]
    )
    assert frozenset({"k1", "k2"}) == fold(events).unknown_kinds


def test_unknown_kinds_advance_head() -> None:
    """An OpaqueEvent still advances the head and last_ts."""
    state = fold([_stored(1, OpaqueEvent("k1", b"\x01"), ts=7.0)])
    assert (1, 7.0) == (state.head, state.last_ts)


@pytest.mark.parametrize(
    "body",
    [
        SessionStarted(workdir="/w", model="m"),
        UserPrompt(content=()),
        AssistantMessage(content=()),
        _result("t"),
        _SNAPSHOT,
        _COMPACTION,
        ContextStatus(level="ok", tokens=1, budget=2),
        _REQUEST,
        BackgroundCompleted(task_id="x"),
        TurnAborted(reason="r"),
        OpaqueEvent("future", b"\xc0"),
    ],
    ids=kind_of,
)
def test_every_kind_sets_head_and_last_ts(body: Body) -> None:
    """Every event kind moves head to its seq and last_ts to its ts."""
    state = apply(fold([_stored(1, _prompt("x"), ts=1.0)]), _stored(2, body, ts=5.5))
    assert (2, 5.5) == (state.head, state.last_ts)


def test_fold_from_given_state_continues_it() -> None:
    """fold(events, state) applies the events after state."""
    first = fold(_numbered([_prompt("a")]))
    state = fold(_numbered([_prompt("b")], start=2), first)
    assert ["a", "b"] == [c.prompt for c in state.checkpoints]


# -- apply's argument checks -----------------------------------------------------------------


@pytest.mark.parametrize("seq", [0, 1, 3, 4])
def test_apply_rejects_seq_not_following_head(seq: int) -> None:
    """apply raises InvalidArgumentError unless seq is head + 1."""
    state = fold(_numbered([_prompt("a")]))
    with pytest.raises(InvalidArgumentError, match=f"seq {seq} does not follow"):
        apply(state, _stored(seq, _prompt("b")))


def test_apply_rejects_first_event_not_seq_one() -> None:
    """The first event applied to an empty state must have seq 1."""
    with pytest.raises(InvalidArgumentError):
        fold([_stored(2, _prompt("a"))])


def test_apply_rejects_a_body_that_is_not_an_event() -> None:
    """apply raises InvalidArgumentError for a body that is not an event."""
    event = StoredEvent(1, 1.0, "user_prompt", "not an event")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not an event body"):
        apply(SessionState(), event)


# -- purity ------------------------------------------------------------------------------------

_HISTORY = [
    SessionStarted(workdir="/w", model="m"),
    _prompt("a"),
    _calls("t1"),
    _result("t1"),
    _SNAPSHOT,
    _REQUEST,
]


def test_apply_leaves_given_state_unchanged() -> None:
    """apply returns a new state; the state it was given still equals a fresh fold."""
    state = fold(_numbered(_HISTORY))
    apply(state, _stored(len(_HISTORY) + 1, _calls("t2")))
    assert fold(_numbered(_HISTORY)) == state


def test_branches_from_one_state_do_not_see_each_other() -> None:
    """Two different events applied to the same state give two independent states."""
    state = fold(_numbered(_HISTORY))
    seq = len(_HISTORY) + 1
    a = apply(state, _stored(seq, _prompt("branch a")))
    b = apply(state, _stored(seq, _prompt("branch b")))
    assert (
        fold(_numbered([*_HISTORY, _prompt("branch a")])),
        fold(_numbered([*_HISTORY, _prompt("branch b")])),
        fold(_numbered(_HISTORY)),
    ) == (a, b, state)


def test_branches_can_keep_growing_independently() -> None:
    """Extending both branches of one state keeps each equal to its own straight fold."""
    state = fold(_numbered(_HISTORY))
    n = len(_HISTORY)
    a = apply(state, _stored(n + 1, _SNAPSHOT))
    b = apply(state, _stored(n + 1, _COMPACTION))
    a2 = apply(a, _stored(n + 2, _REQUEST))
    b2 = apply(b, _stored(n + 2, _prompt("b")))
    assert (
        fold(_numbered([*_HISTORY, _SNAPSHOT, _REQUEST])),
        fold(_numbered([*_HISTORY, _COMPACTION, _prompt("b")])),
    ) == (a2, b2)


def test_failed_apply_leaves_state_unchanged() -> None:
    """A rejected apply does not change the state."""
    state = fold(_numbered(_HISTORY))
    with pytest.raises(InvalidArgumentError):
        apply(state, _stored(1, _prompt("late")))
    assert fold(_numbered(_HISTORY)) == state


# -- conversation ------------------------------------------------------------------------------


def test_conversation_of_empty_state_is_empty() -> None:
    """An empty state has no messages."""
    assert [] == conversation(SessionState())


def test_conversation_merges_consecutive_same_role_entries() -> None:
    """Tool results and a following reminder merge into one user message, in log order."""
    calls = _calls("t1", "t2")
    r1, r2 = _result("t1"), _result("t2")
    reminder = _prompt("remember", "reminder")
    state = fold(_numbered([_prompt("go"), calls, r1, r2, reminder]))
    expected = [
        Message("user", (TextBlock("go"),)),
        Message("assistant", calls.content),
        Message("user", (r1.block, r2.block, TextBlock("remember"))),
    ]
    assert expected == conversation(state)


def test_conversation_ignores_non_message_events() -> None:
    """Snapshots, requests, status and unknown events contribute no messages."""
    state = fold(
        _numbered(
            [
                _prompt("a"),
                _SNAPSHOT,
                _REQUEST,
                ContextStatus(level="ok", tokens=1, budget=2),
                OpaqueEvent("future", b"\xc0"),
                _prompt("b"),
            ]
        )
    )
    assert [Message("user", (TextBlock("a"), TextBlock("b")))] == conversation(state)


# -- properties --------------------------------------------------------------------------------

_ids = st.sampled_from(["t1", "t2", "t3", "t4"])
_texts = st.text(max_size=8)
_small = st.integers(0, 1000)

_bodies: st.SearchStrategy[Body] = st.one_of(
    st.builds(SessionStarted, workdir=_texts, model=_texts),
    st.builds(
        UserPrompt,
        content=st.lists(st.builds(TextBlock, _texts), max_size=2).map(tuple),
        origin=st.sampled_from(["user", "reminder", "repair", "background"]),
    ),
    st.builds(
        AssistantMessage,
        content=st.lists(
            st.one_of(
                st.builds(TextBlock, _texts),
                st.builds(ToolUseBlock, _ids, st.just("bash"), st.just({})),
            ),
            max_size=3,
        ).map(tuple),
        usage=st.builds(
            Usage,
            input_tokens=_small,
            output_tokens=_small,
            cache_creation_input_tokens=_small,
            cache_read_input_tokens=_small,
        ),
    ),
    st.builds(ToolResult, block=st.builds(ToolResultBlock, _ids, _texts)),
    st.builds(
        FileSnapshot,
        path=_texts,
        tool_call_id=_ids,
        pre_image=st.none(),
        pre_hash=st.none(),
    ),
    st.builds(
        Compaction,
        first_seq=_small,
        last_seq=_small,
        tokens_before=_small,
        tokens_after=_small,
    ),
    st.builds(ContextStatus, level=_texts, tokens=_small, budget=_small),
    st.builds(ModelRequestRecord, view_hash=_texts, token_estimate=_small),
    st.builds(BackgroundCompleted, task_id=_texts),
    st.builds(TurnAborted, reason=_texts),
    st.builds(OpaqueEvent, st.sampled_from(["k1", "k2"]), st.binary(min_size=1, max_size=4)),
)


@st.composite
def _event_lists(draw: st.DrawFn) -> list[StoredEvent]:
    bodies = draw(st.lists(_bodies, max_size=25))
    ts = draw(st.lists(st.floats(0, 1e9), min_size=len(bodies), max_size=len(bodies)))
    return [_stored(i + 1, b, t) for i, (b, t) in enumerate(zip(bodies, sorted(ts), strict=True))]


_FOLD_SETTINGS = settings(max_examples=100, deadline=None)


@_FOLD_SETTINGS
@given(events=_event_lists())
def test_fold_equals_reduce_apply(events: list[StoredEvent]) -> None:
    """fold(events) is apply reduced over the events from the empty state."""
    assert functools.reduce(apply, events, SessionState()) == fold(events)


@_FOLD_SETTINGS
@given(events=_event_lists(), data=st.data())
def test_fold_is_compositional(events: list[StoredEvent], data: st.DataObject) -> None:
    """fold(b, fold(a)) == fold(a + b) for any split point."""
    cut = data.draw(st.integers(0, len(events)))
    assert fold(events) == fold(events[cut:], fold(events[:cut]))


@_FOLD_SETTINGS
@given(events=_event_lists())
def test_fold_is_deterministic(events: list[StoredEvent]) -> None:
    """Folding the same events twice (from a list or an iterator) gives equal states."""
    assert fold(events) == fold(iter(list(events)))


@_FOLD_SETTINGS
@given(events=_event_lists())
def test_fold_counts_match_a_model(events: list[StoredEvent]) -> None:
    """Entries, checkpoints, records and counters match a direct count of the events."""
    bodies = [e.body for e in events]

    def count(*types: type) -> int:
        return sum(type(b) in types for b in bodies)

    state = fold(events)
    expected = (
        len(events),
        count(UserPrompt, AssistantMessage, ToolResult),
        sum(type(b) is UserPrompt and b.origin == "user" for b in bodies),
        count(FileSnapshot),
        count(Compaction),
        count(ModelRequestRecord),
        count(BackgroundCompleted),
        count(TurnAborted),
        frozenset(b.kind for b in bodies if type(b) is OpaqueEvent),
    )
    actual = (
        state.head,
        len(state.entries),
        len(state.checkpoints),
        len(state.snapshots),
        len(state.compactions),
        len(state.model_requests),
        state.background_completed,
        state.turns_aborted,
        state.unknown_kinds,
    )
    assert expected == actual


@_FOLD_SETTINGS
@given(events=_event_lists())
def test_open_tool_calls_match_a_model(events: list[StoredEvent]) -> None:
    """open_tool_calls are the tool_use ids in order, minus every id a later result answered."""
    model: list[str] = []
    for e in events:
        if type(e.body) is AssistantMessage:
            model.extend(b.id for b in e.body.content if type(b) is ToolUseBlock)
        elif type(e.body) is ToolResult:
            model = [c for c in model if c != e.body.block.tool_use_id]
    assert tuple(model) == fold(events).open_tool_calls


@_FOLD_SETTINGS
@given(events=_event_lists())
def test_every_intermediate_state_survives_later_applies(events: list[StoredEvent]) -> None:
    """Each state of a fold still equals a fresh fold of its prefix after later events."""
    states = [SessionState()]
    for e in events:
        states.append(apply(states[-1], e))
    assert [fold(events[:i]) for i in range(len(states))] == states


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c"])), max_size=12))
def test_background_open_is_the_tasks_started_and_not_ended(
    steps: list[tuple[bool, str]],
) -> None:
    """``background_open``: the started tasks no completion ended since, in start order (an end
    of a task never started, or ended twice, changes nothing), whether folded at once or one
    event at a time."""
    bodies: list[Body] = [
        BackgroundStarted(task_id=t) if start else BackgroundCompleted(task_id=t)
        for start, t in steps
    ]
    events = [_stored(i, b) for i, b in enumerate(bodies, start=1)]
    expected: list[str] = []
    for start, t in steps:
        expected = [x for x in expected if x != t]
        if start:
            expected.append(t)
    at_once = fold(events).background_open
    stepwise = functools.reduce(apply, events, SessionState()).background_open
    assert expected == [b.task_id for b in at_once]
    assert at_once == stepwise
