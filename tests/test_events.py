"""The event vocabulary: every kind round-trips through every backend, unknown kinds stay opaque,
bad events are refused with nothing written, defaults fill absent fields, and old readers decode
bodies of newer writers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from liteagent.eventlog import (
    Checkpointer,
    file_checkpointer,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog._contract import decode_stored
from liteagent.eventlog._eventcodec import EVENT_KINDS, encode_body, kind_of
from liteagent.eventlog._nesting import MAX_NESTING
from liteagent.eventlog.errors import CodecError, InvalidEventError
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    BackgroundStarted,
    Block,
    BranchCreated,
    Compaction,
    CompactionBlock,
    ContentArchived,
    ContextSettings,
    ContextStatus,
    Event,
    FileSnapshot,
    Forked,
    Message,
    ModelRequestRecord,
    OpaqueEvent,
    PassRecord,
    RawBlock,
    RedactedThinkingBlock,
    RestoreFile,
    RestoreFinished,
    RestoreStarted,
    SessionStarted,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TranscriptImported,
    TurnAborted,
    Usage,
    UserPrompt,
)

SID = "s1"

# One event per kind, with every optional field set to a non-default value.


def decode_body(kind: str, data: bytes | memoryview) -> Event | OpaqueEvent:
    """The body ``decode_stored`` (every backend's decoder) reads from ``data`` of ``kind``."""
    return decode_stored("s", 1, 0.0, kind, data).body


SAMPLES: dict[str, Event] = {
    "session_started": SessionStarted(workdir="/w", model="m", system_prompt="be brief"),
    "user_prompt": UserPrompt(
        content=(
            TextBlock("hi", extra={"cache_control": {"type": "ephemeral"}}),
            RawBlock({"type": "image", "source": {"type": "base64", "data": "AAAA"}}),
        ),
        origin="reminder",
    ),
    "assistant_message": AssistantMessage(
        content=(
            ThinkingBlock("hmm", "sig"),
            RedactedThinkingBlock("xyz"),
            CompactionBlock(None, "enc"),
            TextBlock("ok"),
            ToolUseBlock("t1", "bash", {"command": "ls", "n": [1, 2.5, None, True, {"a": "b"}]}),
            ToolUseBlock("t2", "bash", {}, input_json='{"n":18446744073709551616}'),
            RawBlock({"type": "text"}, json='{"type":"text","text":"\\ud800"}'),
        ),
        usage=Usage(
            input_tokens=1,
            output_tokens=2,
            cache_creation_input_tokens=3,
            cache_read_input_tokens=4,
        ),
        stop_reason="tool_use",
        model="claude",
    ),
    "tool_result": ToolResult(
        block=ToolResultBlock("t1", (TextBlock("out"),), is_error=True),
        tool_name="bash",
        untracked=True,
    ),
    "file_snapshot": FileSnapshot(
        path="a.py",
        tool_call_id="t1",
        pre_image="sha256:" + "0" * 64,
        pre_hash="1" * 64,
        post_hash="2" * 64,
        truncated=True,
    ),
    "compaction": Compaction(
        first_seq=1,
        last_seq=5,
        tokens_before=1000,
        tokens_after=100,
        summary="sum",
        passes=(PassRecord(name="trim", tokens_before=1000, tokens_after=100, detail="d"),),
        instructions="keep code",
        replacement=(Message("user", (TextBlock("go"),)),),
        spilled=("sha256:" + "3" * 64,),
    ),
    "context_status": ContextStatus(
        level="high",
        tokens=90,
        budget=100,
        tokens_after=50,
        actions=("compact",),
        settings=ContextSettings(budget_tokens=100, keep_recent_results=2, fixed_tokens=7),
    ),
    "model_request": ModelRequestRecord(
        view_hash="abc",
        token_estimate=42,
        model="claude",
        request_digest="d" * 64,
        native_edits=("clear_tool_uses: 3 tool uses",),
    ),
    "content_archived": ContentArchived(
        tool_use_id="t1", ref="sha256:" + "0" * 64, chars=5, size=6
    ),
    "background_started": BackgroundStarted(
        task_id="bg1", tool_call_id="t1", description="sleep 1", pid=7, host="h", process="p"
    ),
    "background_completed": BackgroundCompleted(task_id="bg1", ok=False, summary="failed"),
    "turn_aborted": TurnAborted(reason="cancelled", notice="[liteagent: stopped]"),
    "restore_started": RestoreStarted(
        to_seq=3,
        conversation=True,
        files=(
            RestoreFile(
                path="a.py",
                target="sha256:" + "0" * 64,
                target_hash="1" * 64,
                backup=None,
                backup_hash=None,
            ),
        ),
    ),
    "restore_finished": RestoreFinished(started_seq=7, outcome="rolled_back", reason="disk full"),
    "branch_created": BranchCreated(
        origin="s1",
        at_seq=4,
        files=(
            RestoreFile(
                path="a.py",
                target=None,
                target_hash=None,
                backup="sha256:" + "2" * 64,
                backup_hash="2" * 64,
            ),
        ),
        head_after=3,
        digest_after="d" * 64,
        made_by="undo",
        undo_of="branch..x",
    ),
    "forked": Forked(origin="s1", at_seq=4, workdir="/elsewhere"),
    "transcript_imported": TranscriptImported(
        shapes=((2, {"id": "m1", "n": [1, 2.5, None]}, True), (3, None, True))
    ),
}

_FACTORIES: dict[str, Callable[[Path], Checkpointer]] = {
    "memory": lambda _tmp: memory_checkpointer(),
    "file": lambda tmp: file_checkpointer(tmp / "sessions"),
    "sqlite": lambda tmp: sqlite_checkpointer(tmp / "x.db"),
}


@pytest.fixture(params=sorted(_FACTORIES))
def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """Each backend in turn, closed after the test."""
    cp = _FACTORIES[request.param](tmp_path)
    yield cp
    cp.close()


def _bodies(cp: Checkpointer, sid: str = SID) -> list[Event | OpaqueEvent]:
    return [e.body for e in cp.read(sid)]


def _tool_input_event(value: Any) -> UserPrompt:
    return UserPrompt(content=(ToolUseBlock("t1", "bash", {"value": value}),))


# -- the vocabulary ------------------------------------------------------------------------------


def test_samples_cover_every_kind() -> None:
    """The samples here hold one event of every kind in EVENT_KINDS."""
    assert EVENT_KINDS == frozenset(SAMPLES)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_kind_of_each_event_is_its_tag(kind: str) -> None:
    """kind_of gives each event's kind tag."""
    assert kind == kind_of(SAMPLES[kind])


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_kind_round_trips(checkpointer: Checkpointer, kind: str) -> None:
    """An event of each kind is read back equal, with its kind and seq 1."""
    checkpointer.append(SID, [SAMPLES[kind]])
    (stored,) = checkpointer.read(SID)
    assert (1, kind, SAMPLES[kind]) == (stored.seq, stored.kind, stored.body)


def test_all_kinds_in_one_batch_round_trip(checkpointer: Checkpointer) -> None:
    """A batch holding every kind is read back in order."""
    events = [SAMPLES[k] for k in sorted(SAMPLES)]
    checkpointer.append(SID, events)
    assert events == _bodies(checkpointer)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_encode_then_decode_body_is_identity(kind: str) -> None:
    """decode_body(encode_body(e)) == e for every kind."""
    assert SAMPLES[kind] == decode_body(*encode_body(SAMPLES[kind]))


# -- unknown kinds -------------------------------------------------------------------------------

_FUTURE = OpaqueEvent("future_kind", msgspec.msgpack.encode({"x": [1, 2, {"y": None}], "z": "w"}))


def test_decode_body_of_unknown_kind_is_opaque() -> None:
    """decode_body of a kind this version does not know gives an OpaqueEvent with the bytes."""
    assert _FUTURE == decode_body("future_kind", memoryview(_FUTURE.data))


def test_opaque_event_round_trips_byte_exactly(checkpointer: Checkpointer) -> None:
    """An OpaqueEvent is read back with the same kind and bytes."""
    checkpointer.append(SID, [_FUTURE])
    (stored,) = checkpointer.read(SID)
    assert ("future_kind", _FUTURE) == (stored.kind, stored.body)


def test_opaque_event_read_back_appends_again_unchanged(checkpointer: Checkpointer) -> None:
    """An OpaqueEvent that was read back can be appended again and reads back the same."""
    checkpointer.append(SID, [_FUTURE])
    (first,) = checkpointer.read(SID)
    checkpointer.append("s2", [first.body])
    assert [_FUTURE] == _bodies(checkpointer, "s2")


def test_opaque_event_between_known_events_keeps_order(checkpointer: Checkpointer) -> None:
    """Known events around an OpaqueEvent are read back in order."""
    events = [SAMPLES["user_prompt"], _FUTURE, SAMPLES["turn_aborted"]]
    checkpointer.append(SID, events)
    assert events == _bodies(checkpointer)


_BAD_OPAQUE = [b"", b"\x01\x02", b"hello", b"\xc1", b"\x92\x01"]


@pytest.mark.parametrize("data", _BAD_OPAQUE)
@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
def test_opaque_event_with_non_msgpack_bytes_never_poisons_session(
    tmp_path: Path, backend: str, data: bytes
) -> None:
    """An OpaqueEvent whose bytes are not one msgpack value is refused or read back exactly."""
    cp = _FACTORIES[backend](tmp_path)
    try:
        before = SAMPLES["user_prompt"]
        after = SAMPLES["turn_aborted"]
        cp.append(SID, [before])
        batch: list[Event | OpaqueEvent] = [OpaqueEvent("future_kind", data), after]
        try:
            cp.append(SID, batch)
        except (InvalidEventError, CodecError):
            batch = []
        assert [before, *batch] == _bodies(cp)
    finally:
        cp.close()


def test_opaque_event_of_known_kind_with_invalid_body_is_refused(
    checkpointer: Checkpointer,
) -> None:
    """An OpaqueEvent claiming a known kind whose bytes are not that event writes nothing."""
    checkpointer.append(SID, [SAMPLES["turn_aborted"]])
    with pytest.raises((InvalidEventError, CodecError)):
        checkpointer.append(SID, [OpaqueEvent("user_prompt", b"\xc1")])
    assert [SAMPLES["turn_aborted"]] == _bodies(checkpointer)


@pytest.mark.parametrize(
    "bad", [OpaqueEvent("", b"\xc0"), OpaqueEvent("k", "text")], ids=["empty-kind", "str-data"]
)
def test_malformed_opaque_event_is_refused(checkpointer: Checkpointer, bad: OpaqueEvent) -> None:
    """An OpaqueEvent with an empty kind or non-bytes data raises InvalidEventError."""
    with pytest.raises(InvalidEventError):
        checkpointer.append(SID, [bad])


# -- refused events write nothing ------------------------------------------------------------

_NON_EVENTS = [{"kind": "user_prompt", "content": []}, "user_prompt", None]


@pytest.mark.parametrize("bad", _NON_EVENTS, ids=["dict", "str", "None"])
def test_non_event_in_batch_raises_invalid_event(checkpointer: Checkpointer, bad: Any) -> None:
    """A batch holding a non-event raises InvalidEventError."""
    with pytest.raises(InvalidEventError, match=type(bad).__name__):
        checkpointer.append(SID, [SAMPLES["turn_aborted"], bad])


@pytest.mark.parametrize("bad", _NON_EVENTS, ids=["dict", "str", "None"])
def test_non_event_in_batch_writes_nothing(checkpointer: Checkpointer, bad: Any) -> None:
    """A batch refused for a non-event leaves the session's events as they were."""
    checkpointer.append(SID, [SAMPLES["session_started"]])
    with pytest.raises(InvalidEventError):
        checkpointer.append(SID, [SAMPLES["turn_aborted"], bad])
    assert (1, [SAMPLES["session_started"]]) == (checkpointer.head(SID), _bodies(checkpointer))


@pytest.mark.parametrize("bad", _NON_EVENTS, ids=["dict", "str", "None"])
def test_non_event_creates_no_session(checkpointer: Checkpointer, bad: Any) -> None:
    """A refused first append leaves no session behind."""
    with pytest.raises(InvalidEventError):
        checkpointer.append(SID, [bad])
    assert ([], 0) == (checkpointer.list(), checkpointer.head(SID))


@pytest.mark.parametrize("events", [None, "abc", SAMPLES["turn_aborted"]], ids=repr)
def test_events_argument_must_be_an_iterable_of_events(
    checkpointer: Checkpointer, events: Any
) -> None:
    """Passing something other than an iterable of events as the batch raises InvalidEventError."""
    with pytest.raises(InvalidEventError):
        checkpointer.append(SID, events)


_UNENCODABLE = [2**64, -(2**63) - 1, object()]


@pytest.mark.parametrize("value", _UNENCODABLE, ids=["2**64", "-2**63-1", "object"])
def test_unencodable_value_raises_codec_error(checkpointer: Checkpointer, value: Any) -> None:
    """An event holding a value msgpack cannot encode raises CodecError naming the kind."""
    with pytest.raises(CodecError, match="cannot encode user_prompt event"):
        checkpointer.append(SID, [_tool_input_event(value)])


@pytest.mark.parametrize("value", _UNENCODABLE, ids=["2**64", "-2**63-1", "object"])
def test_unencodable_value_writes_nothing(checkpointer: Checkpointer, value: Any) -> None:
    """A batch refused by the codec leaves head and events unchanged."""
    checkpointer.append(SID, [SAMPLES["session_started"]])
    with pytest.raises(CodecError):
        checkpointer.append(SID, [SAMPLES["turn_aborted"], _tool_input_event(value)])
    assert (1, [SAMPLES["session_started"]]) == (checkpointer.head(SID), _bodies(checkpointer))


def test_largest_encodable_ints_round_trip(checkpointer: Checkpointer) -> None:
    """Ints at the edges of msgpack's range (2**64-1, -2**63) are stored exactly."""
    event = _tool_input_event([2**64 - 1, -(2**63)])
    checkpointer.append(SID, [event])
    assert [event] == _bodies(checkpointer)


def test_set_in_tool_input_reads_back_as_a_list(checkpointer: Checkpointer) -> None:
    """A set inside a tool input is stored as a msgpack array and reads back as a list."""
    checkpointer.append(SID, [_tool_input_event({1, 2})])
    assert [_tool_input_event(sorted({1, 2}))] == _bodies(checkpointer)


def test_non_str_key_in_tool_input_is_refused(checkpointer: Checkpointer) -> None:
    """An event whose tool input has a non-str key is refused and the session stays readable."""
    checkpointer.append(SID, [SAMPLES["turn_aborted"]])
    bad = UserPrompt(content=(ToolUseBlock("t1", "bash", {1: 2}),))  # type: ignore[dict-item]
    with pytest.raises(CodecError):
        checkpointer.append(SID, [bad])
    assert [SAMPLES["turn_aborted"]] == _bodies(checkpointer)


def _nested(levels: int) -> Any:
    """A value of ``levels`` nested maps and arrays (alternating), a number inside."""
    value: Any = 1
    for n in range(levels):
        value = {"a": value} if n % 2 else [value]
    return value


def _at_stack_depth(frames: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` called under ``frames`` more Python frames (a reader deep inside a program)."""
    return fn() if frames == 0 else _at_stack_depth(frames - 1, fn)


def test_an_event_nested_as_deeply_as_allowed_reads_back_from_a_deep_stack(
    checkpointer: Checkpointer,
) -> None:
    """An event whose body nests MAX_NESTING levels (its own map, the content array, the
    block and the input are four of them) is stored and reads back even 500 frames deep in a
    program, where msgspec's recursion reaches Python's limit sooner."""
    event = _tool_input_event(_nested(MAX_NESTING - 4))
    checkpointer.append(SID, [event])
    assert [event] == _at_stack_depth(500, lambda: _bodies(checkpointer))


@pytest.mark.parametrize("levels", [MAX_NESTING - 3, 900, 5000])
def test_an_event_nested_deeper_than_allowed_is_refused(
    checkpointer: Checkpointer, levels: int
) -> None:
    """One level more than MAX_NESTING, or far more (beyond what msgspec can decode at all),
    is a CodecError saying so, whatever the writer's own stack: nothing is written."""
    checkpointer.append(SID, [SAMPLES["turn_aborted"]])
    for frames in (0, 300):
        with pytest.raises(CodecError, match=f"nest (more than {MAX_NESTING} levels|too deeply)"):
            _at_stack_depth(
                frames, lambda: checkpointer.append(SID, [_tool_input_event(_nested(levels))])
            )
    assert [SAMPLES["turn_aborted"]] == _bodies(checkpointer)
    deep = msgspec.msgpack.encode(_nested(MAX_NESTING + 1))
    with pytest.raises(InvalidEventError, match=f"nest more than {MAX_NESTING} levels"):
        checkpointer.append(SID, [OpaqueEvent("future_kind", deep)])
    shallow = msgspec.msgpack.encode(_nested(MAX_NESTING))
    assert 2 == checkpointer.append(SID, [OpaqueEvent("future_kind", shallow)])


# -- UserPrompt.text -----------------------------------------------------------------------------


def test_user_prompt_text_joins_text_blocks_with_newlines() -> None:
    """UserPrompt.text is its text blocks joined by newlines."""
    assert "a\nb" == UserPrompt(content=(TextBlock("a"), TextBlock("b"))).text


def test_user_prompt_text_ignores_other_blocks() -> None:
    """UserPrompt.text skips blocks that are not text."""
    content: tuple[Block, ...] = (
        ToolResultBlock("t1", "result text"),
        TextBlock("a"),
        RawBlock({"type": "image"}),
    )
    assert "a" == UserPrompt(content=content).text


def test_user_prompt_text_of_no_text_is_empty() -> None:
    """UserPrompt.text is empty when there are no text blocks."""
    assert "" == UserPrompt(content=()).text


# -- defaults and evolution --------------------------------------------------------------------

_MINIMAL: list[tuple[dict[str, Any], Event]] = [
    (
        {"kind": "session_started", "workdir": "/w", "model": "m"},
        SessionStarted(workdir="/w", model="m", system_prompt=None),
    ),
    (
        {"kind": "user_prompt", "content": [{"type": "text", "text": "hi"}]},
        UserPrompt(content=(TextBlock("hi"),), origin="user"),
    ),
    (
        {"kind": "assistant_message", "content": []},
        AssistantMessage(content=(), usage=Usage(), stop_reason=None, model=None),
    ),
    (
        {"kind": "assistant_message", "content": [], "usage": {"output_tokens": 5}},
        AssistantMessage(content=(), usage=Usage(input_tokens=0, output_tokens=5)),
    ),
    (
        {"kind": "tool_result", "block": {"type": "tool_result", "tool_use_id": "t1"}},
        ToolResult(block=ToolResultBlock("t1"), tool_name=None, untracked=False),
    ),
    (
        {
            "kind": "file_snapshot",
            "path": "a",
            "tool_call_id": "t",
            "pre_image": None,
            "pre_hash": None,
        },
        FileSnapshot(
            path="a",
            tool_call_id="t",
            pre_image=None,
            pre_hash=None,
            post_hash=None,
            truncated=False,
        ),
    ),
    (
        {
            "kind": "compaction",
            "first_seq": 1,
            "last_seq": 2,
            "tokens_before": 10,
            "tokens_after": 5,
            "passes": [{"name": "p", "tokens_before": 10, "tokens_after": 5}],
        },
        Compaction(
            first_seq=1,
            last_seq=2,
            tokens_before=10,
            tokens_after=5,
            summary=None,
            passes=(PassRecord(name="p", tokens_before=10, tokens_after=5, detail=""),),
            instructions=None,
        ),
    ),
    (
        {"kind": "context_status", "level": "ok", "tokens": 1, "budget": 2},
        ContextStatus(level="ok", tokens=1, budget=2, tokens_after=None, actions=()),
    ),
    (
        {"kind": "model_request", "view_hash": "h", "token_estimate": 3},
        ModelRequestRecord(view_hash="h", token_estimate=3, model=None),
    ),
    (
        {"kind": "background_completed", "task_id": "b"},
        BackgroundCompleted(task_id="b", ok=True, summary=""),
    ),
    ({"kind": "turn_aborted", "reason": "r"}, TurnAborted(reason="r")),
]


@pytest.mark.parametrize(("body", "expected"), _MINIMAL, ids=lambda x: str(x)[:40])
def test_absent_optional_fields_take_their_defaults(body: dict[str, Any], expected: Event) -> None:
    """A body written without its optional fields decodes with their defaults."""
    assert expected == decode_body(body["kind"], msgspec.msgpack.encode(body))


def test_a_tool_result_whose_untracked_is_null_is_a_codec_error() -> None:
    """A tool_result body holding ``untracked: null`` (no writer makes one: the flag is a bool)
    is refused with CodecError naming the field, the session and the seq."""
    body = {"kind": "tool_result", "block": {"type": "tool_result", "tool_use_id": "t1"}}
    data = msgspec.msgpack.encode({**body, "untracked": None})
    with pytest.raises(CodecError, match=r"untracked") as info:
        decode_stored("s", 7, 0.0, "tool_result", data)
    assert ("s", 7) == (info.value.session_id, info.value.seq)


def test_default_fields_are_not_written() -> None:
    """Fields left at their defaults are omitted from the encoded body."""
    _, data = encode_body(UserPrompt(content=(TextBlock("hi"),)))
    expected = {"kind": "user_prompt", "content": [{"type": "text", "text": "hi"}]}
    assert expected == msgspec.msgpack.decode(data)


class _UserPromptV2(
    msgspec.Struct,
    frozen=True,
    tag_field="kind",
    tag="user_prompt",
    omit_defaults=True,
    kw_only=True,
):
    """A newer writer's user_prompt: one more defaulted field."""

    content: tuple[Block, ...]
    origin: str = "user"
    priority: int = 0


class _UsageV2(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """A newer writer's Usage: one more defaulted field."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


class _AssistantMessageV2(
    msgspec.Struct,
    frozen=True,
    tag_field="kind",
    tag="assistant_message",
    omit_defaults=True,
    kw_only=True,
):
    """A newer writer's assistant_message: a new top-level field and a new field inside usage."""

    content: tuple[Block, ...]
    usage: _UsageV2 = _UsageV2()
    stop_reason: str | None = None
    service_tier: str = "standard"


def test_newer_body_with_extra_field_decodes_into_current_class() -> None:
    """A body carrying a field this version does not know decodes, the field ignored."""
    data = msgspec.msgpack.encode(
        _UserPromptV2(content=(TextBlock("hi"),), origin="reminder", priority=3)
    )
    expected = UserPrompt(content=(TextBlock("hi"),), origin="reminder")
    assert expected == decode_body("user_prompt", data)


def test_newer_body_with_extra_nested_field_decodes_into_current_class() -> None:
    """Unknown fields at the top and inside a nested struct are both ignored."""
    data = msgspec.msgpack.encode(
        _AssistantMessageV2(
            content=(TextBlock("ok"),),
            usage=_UsageV2(input_tokens=1, output_tokens=2, reasoning_tokens=7),
            stop_reason="end_turn",
            service_tier="priority",
        )
    )
    expected = AssistantMessage(
        content=(TextBlock("ok"),),
        usage=Usage(input_tokens=1, output_tokens=2),
        stop_reason="end_turn",
    )
    assert expected == decode_body("assistant_message", data)


def test_current_body_decodes_in_newer_reader() -> None:
    """A body this version writes decodes in a newer class, which fills in its new field."""
    _, data = encode_body(UserPrompt(content=(TextBlock("hi"),), origin="repair"))
    expected = _UserPromptV2(content=(TextBlock("hi"),), origin="repair", priority=0)
    assert expected == msgspec.msgpack.decode(data, type=_UserPromptV2)
