"""The replay provider: deterministic replay of a recorded session, and loud mismatches."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from liteagent.eventlog import (
    StoredEvent,
    conversation,
    fold,
    memory_checkpointer,
    messages_to_dicts,
)
from liteagent.eventlog.types import (
    AssistantMessage,
    Event,
    Message,
    OpaqueEvent,
    SessionStarted,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    UserPrompt,
)
from liteagent.providers import (
    ModelProvider,
    ReplayMismatchError,
    UnexpectedRequestError,
    UnusedResponsesError,
    replay,
)
from liteagent.providers._contract import (
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
)
from liteagent.providers._replay import replay_messages

SESSION = "s1"


def _prompt(text: str) -> UserPrompt:
    return UserPrompt(content=(TextBlock(text),))


def _result(tool_use_id: str, content: str, *, is_error: bool = False) -> ToolResult:
    block = (
        ToolResultBlock(tool_use_id, content, is_error)
        if is_error
        else ToolResultBlock(tool_use_id, content)
    )
    return ToolResult(block=block)


def _recorded_bodies() -> list[Event]:
    """A two-turn session: a tool call, two parallel calls (one failing), then a second prompt."""
    return [
        SessionStarted(workdir="/w", model="m"),
        _prompt("read a.txt"),
        AssistantMessage(
            content=(TextBlock("reading"), ToolUseBlock("t1", "read", {"path": "a.txt"})),
            stop_reason="tool_use",
        ),
        _result("t1", "hello"),
        AssistantMessage(
            content=(
                ToolUseBlock("t2", "write", {"path": "b.txt", "text": "hello"}),
                ToolUseBlock("t3", "shell", {"cmd": "false"}),
            ),
            stop_reason="tool_use",
        ),
        _result("t2", "ok"),
        _result("t3", "exit 1", is_error=True),
        AssistantMessage(content=(TextBlock("copied"),), stop_reason="end_turn"),
        _prompt("thanks"),
        AssistantMessage(content=(TextBlock("bye"),), stop_reason="end_turn"),
    ]


def _recorded_log() -> list[StoredEvent]:
    """The session stored in a memory checkpointer and read back."""
    with memory_checkpointer() as checkpointer:
        checkpointer.append(SESSION, _recorded_bodies())
        return list(checkpointer.read(SESSION))


Edit = Callable[[ToolResult], ToolResult]


def _drive(
    provider: ModelProvider, log: list[StoredEvent], edit: Edit = lambda r: r
) -> list[StoredEvent]:
    """A minimal agent loop: for each recorded prompt, ask the model with the conversation so
    far, append its reply, answer its tool calls with the recorded results (through ``edit``)
    until it stops calling tools. Returns the log it wrote."""
    results = {e.body.block.tool_use_id: e.body for e in log if isinstance(e.body, ToolResult)}
    prompts = [e.body for e in log if isinstance(e.body, UserPrompt)]
    with memory_checkpointer() as checkpointer:
        checkpointer.append(SESSION, [log[0].body])
        for prompt in prompts:
            checkpointer.append(SESSION, [prompt])
            while True:
                messages = conversation(fold(checkpointer.read(SESSION)))
                request = ModelRequest(model="m", messages=tuple(messages))
                reply = provider.complete(request).message
                checkpointer.append(SESSION, [reply])
                calls = [b for b in reply.content if isinstance(b, ToolUseBlock)]
                if not calls:
                    break
                checkpointer.append(SESSION, [edit(results[c.id]) for c in calls])
        return list(checkpointer.read(SESSION))


def _bodies(log: list[StoredEvent]) -> list[Event | OpaqueEvent]:
    return [e.body for e in log]


def _request(*messages: Message) -> ModelRequest:
    return ModelRequest(model="m", messages=messages)


def test_a_recorded_session_replays_to_the_same_log() -> None:
    """Driving the loop against the replay reproduces the recorded log exactly."""
    log = _recorded_log()
    provider = replay(log)
    assert _recorded_bodies() == _bodies(_drive(provider, log))
    assert 4 == provider.calls
    provider.assert_all_used()


def test_replay_accepts_bare_event_bodies() -> None:
    """A list of event bodies replays like the stored events."""
    provider = replay(_recorded_bodies())
    assert _recorded_bodies() == _bodies(_drive(provider, _recorded_log()))


def test_replay_ignores_events_that_are_not_conversation() -> None:
    """Opaque events of a newer writer do not disturb the replay."""
    bodies: list[Event | OpaqueEvent] = [*_recorded_bodies(), OpaqueEvent("future", b"\x80")]
    bodies.insert(3, OpaqueEvent("future", b"\x80"))
    provider = replay(bodies)
    assert _recorded_bodies() == _bodies(_drive(provider, _recorded_log()))


def test_replay_streams_the_recorded_message() -> None:
    """A replayed response streams like a scripted one, with the configured chunk size."""
    log = _recorded_log()
    events = list(
        replay(log, stream_chunk=4).stream(_request(Message("user", (TextBlock("read a.txt"),))))
    )
    expected = [
        TextDelta(0, "read"),
        TextDelta(0, "ing"),
        ToolUseStart(1, "t1", "read"),
        ToolInputDelta(1, '{"pa'),
        ToolInputDelta(1, 'th":'),
        ToolInputDelta(1, '"a.t'),
        ToolInputDelta(1, 'xt"}'),
        ResponseComplete(ModelResponse(message=log[2].body)),  # type: ignore[arg-type]
    ]
    assert expected == events


def test_a_different_tool_result_is_a_mismatch() -> None:
    """A tool result whose content differs from the recording raises ReplayMismatchError."""

    def edit(result: ToolResult) -> ToolResult:
        return _result("t1", "changed") if result.block.tool_use_id == "t1" else result

    with pytest.raises(
        ReplayMismatchError, match=r"call 2 .*seq 5.*input 1.*'hello'.*got.*'changed'"
    ):
        _drive(replay(_recorded_log()), _recorded_log(), edit)


def test_a_different_error_flag_is_a_mismatch() -> None:
    """A tool result that lost its is_error flag does not match the recording."""

    def edit(result: ToolResult) -> ToolResult:
        return _result("t3", "exit 1") if result.block.tool_use_id == "t3" else result

    with pytest.raises(ReplayMismatchError, match=r"call 3 .*input 2"):
        _drive(replay(_recorded_log()), _recorded_log(), edit)


def test_tool_results_in_another_order_are_a_mismatch() -> None:
    """The recorded order of tool results is part of the match."""
    swapped = _request(
        Message("user", (TextBlock("read a.txt"),)),
        Message("assistant", (TextBlock("x"),)),
        Message("user", (ToolResultBlock("t3", "exit 1", True), ToolResultBlock("t2", "ok"))),
    )
    provider = replay(_recorded_log(), strict=True)
    provider.complete(_request(Message("user", (TextBlock("read a.txt"),))))
    provider.complete(
        _request(Message("assistant", ()), Message("user", (ToolResultBlock("t1", "hello"),)))
    )
    with pytest.raises(ReplayMismatchError, match="call 3"):
        provider.complete(swapped)


def test_a_different_user_text_is_a_mismatch() -> None:
    """A first request whose prompt differs from the recorded one raises ReplayMismatchError."""
    with pytest.raises(ReplayMismatchError, match=r"call 1 .*'read a.txt'.*got.*'read b.txt'"):
        replay(_recorded_log()).complete(_request(Message("user", (TextBlock("read b.txt"),))))


def test_split_user_messages_match_their_merged_blocks() -> None:
    """Inputs are compared block by block, so splitting a user message does not matter."""
    provider = replay(_recorded_log())
    provider.complete(_request(Message("user", (TextBlock("read a.txt"),))))
    provider.complete(
        _request(
            Message("assistant", ()), Message("user", (ToolResultBlock("t1", "hello", False),))
        )
    )
    request = _request(
        Message("assistant", ()),
        Message("user", (ToolResultBlock("t2", "ok"),)),
        Message("user", (ToolResultBlock("t3", "exit 1", True),)),
    )
    assert (TextBlock("copied"),) == provider.complete(request).message.content


def test_a_call_beyond_the_recording_is_unexpected() -> None:
    """After the last recorded response, another call raises UnexpectedRequestError."""
    log = _recorded_log()
    provider = replay(log)
    _drive(provider, log)
    with pytest.raises(UnexpectedRequestError, match=r"call 5.* 4 response"):
        provider.complete(_request(Message("user", (TextBlock("more"),))))


def test_unused_recorded_responses_fail_assert_all_used() -> None:
    """assert_all_used lists the recorded responses never requested, with their seqs."""
    provider = replay(_recorded_log())
    provider.complete(_request(Message("user", (TextBlock("read a.txt"),))))
    with pytest.raises(UnusedResponsesError, match=r"3 of 4.*#2 assistant at seq 5"):
        provider.assert_all_used()


def test_non_strict_replay_skips_the_check() -> None:
    """With strict=False any request gets the next recorded response."""
    provider = replay(_recorded_log(), strict=False)
    texts = [provider.complete(_request()).message.content[0] for _ in range(4)]
    assert [
        TextBlock("reading"),
        ToolUseBlock("t2", "write", {"path": "b.txt", "text": "hello"}),
        TextBlock("copied"),
        TextBlock("bye"),
    ] == texts
    provider.assert_all_used()


def test_replay_messages_answers_from_a_dict_transcript() -> None:
    """A transcript in the Anthropic dict shape replays its assistant messages in order."""
    messages = conversation(fold(_recorded_log()))
    provider = replay_messages(messages_to_dicts(messages))
    assert messages == conversation(fold(_drive(provider, _recorded_log())))
    provider.assert_all_used()
