"""The scripted provider: streaming and chunking, script items, loud failures, cancel, threads."""

from __future__ import annotations

import json
import threading
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import InvalidArgumentError, OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    Block,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from liteagent.providers import (
    TOKEN_COUNTING,
    CapabilityNotSupportedError,
    ContextOverflowError,
    ScriptError,
    UnexpectedRequestError,
    UnusedResponsesError,
    scripted,
)
from liteagent.providers._contract import (
    AppliedEdit,
    ClearToolUses,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)


def _request(text: str = "hi", **kwargs: Any) -> ModelRequest:
    return ModelRequest(model="m", messages=(Message("user", (TextBlock(text),)),), **kwargs)


def _say(*texts: str) -> AssistantMessage:
    return AssistantMessage(content=tuple(TextBlock(t) for t in texts), stop_reason="end_turn")


def test_text_streams_in_chunks_of_stream_chunk_characters() -> None:
    """A text block streams as deltas of stream_chunk characters, then the response."""
    message = _say("hello world")
    provider = scripted([message], stream_chunk=4)
    expected = [
        TextDelta(0, "hell"),
        TextDelta(0, "o wo"),
        TextDelta(0, "rld"),
        ResponseComplete(ModelResponse(message=message)),
    ]
    assert expected == list(provider.stream(_request()))


def test_without_stream_chunk_each_block_is_one_delta() -> None:
    """With stream_chunk=None every text block streams as a single delta."""
    message = _say("first block", "second")
    provider = scripted([message])
    expected = [
        TextDelta(0, "first block"),
        TextDelta(1, "second"),
        ResponseComplete(ModelResponse(message=message)),
    ]
    assert expected == list(provider.stream(_request()))


def test_thinking_streams_as_thinking_deltas() -> None:
    """A thinking block streams as ThinkingDelta pieces at its index."""
    message = AssistantMessage(content=(ThinkingBlock("ponder", signature="sig"), TextBlock("ok")))
    provider = scripted([message], stream_chunk=4)
    expected = [ThinkingDelta(0, "pond"), ThinkingDelta(0, "er"), TextDelta(1, "ok")]
    assert expected == list(provider.stream(_request()))[:-1]


def test_tool_use_streams_start_then_json_fragments() -> None:
    """A tool_use block streams ToolUseStart, then fragments that join to its input's JSON."""
    tool_input = {"path": "a.txt", "lines": [1, 2, 3], "nested": {"x": None}}
    message = AssistantMessage(content=(ToolUseBlock("t1", "read", tool_input),))
    events = list(scripted([message], stream_chunk=5).stream(_request()))
    assert ToolUseStart(0, "t1", "read") == events[0]
    fragments = [e for e in events[1:-1] if isinstance(e, ToolInputDelta)]
    assert len(events) - 2 == len(fragments)
    assert all(0 == f.index and len(f.partial_json) <= 5 for f in fragments)
    joined = "".join(f.partial_json for f in fragments)
    assert msgspec.json.encode(tool_input).decode() == joined
    assert tool_input == json.loads(joined)


def test_empty_text_and_unstreamable_blocks_give_no_live_event() -> None:
    """An empty text and a redacted thinking block appear only in the final message."""
    message = AssistantMessage(content=(RedactedThinkingBlock("xx"), TextBlock(""), TextBlock("a")))
    events = list(scripted([message]).stream(_request()))
    assert [TextDelta(2, "a"), ResponseComplete(ModelResponse(message=message))] == events


def test_complete_returns_the_scripted_message() -> None:
    """complete() returns a response carrying exactly the scripted message."""
    message = _say("done")
    assert ModelResponse(message=message) == scripted([message]).complete(_request())


def test_a_scripted_model_response_is_returned_whole() -> None:
    """A ModelResponse item keeps its applied edits and request id."""
    response = ModelResponse(
        message=_say("x"), applied_edits=(AppliedEdit(type="clear_tool_uses"),), request_id="r1"
    )
    assert response == scripted([response]).complete(_request())


def test_responses_are_used_in_order() -> None:
    """Call k gets response k."""
    provider = scripted([_say("one"), _say("two")])
    texts = [provider.complete(_request()).message.content for _ in range(2)]
    assert [(TextBlock("one"),), (TextBlock("two"),)] == texts


def test_a_callable_response_sees_the_request() -> None:
    """A callable item is called with the request and its message is streamed."""
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> AssistantMessage:
        seen.append(request)
        return _say(f"echo {len(request.messages)}")

    request = _request("question")
    response = scripted([answer]).complete(request)
    assert [request] == seen
    assert (TextBlock("echo 1"),) == response.message.content


def test_a_callable_returning_something_else_raises_script_error() -> None:
    """A callable that returns neither a message nor a response raises ScriptError."""
    provider = scripted([lambda request: "oops"])  # type: ignore[list-item,return-value]
    with pytest.raises(ScriptError, match="returned str"):
        provider.complete(_request())


def test_an_exception_item_is_raised_for_its_call() -> None:
    """An exception instance in the script is raised by that call, and the script moves on."""
    error = ContextOverflowError("too long", tokens=300_000, maximum=200_000)
    provider = scripted([error, _say("after")])
    with pytest.raises(ContextOverflowError) as info:
        provider.complete(_request())
    assert error is info.value
    assert (TextBlock("after"),) == provider.complete(_request()).message.content


def test_an_exception_from_a_callable_propagates() -> None:
    """A callable item that raises makes the call raise the same exception."""

    def fail(request: ModelRequest) -> AssistantMessage:
        raise ValueError("scripted failure")

    with pytest.raises(ValueError, match="scripted failure"):
        scripted([fail]).complete(_request())


def test_an_extra_call_raises_unexpected_request_error() -> None:
    """A call after the script ran out names the script size and the request's last message."""
    provider = scripted([_say("only")])
    provider.complete(_request())
    with pytest.raises(UnexpectedRequestError, match=r"call 2.* 1 response.*'surprise'"):
        provider.complete(_request("surprise"))


def test_assert_all_used_lists_the_unused_responses() -> None:
    """assert_all_used raises UnusedResponsesError naming each response left."""
    provider = scripted([_say("used"), _say("left"), ContextOverflowError("never")])
    provider.complete(_request())
    with pytest.raises(UnusedResponsesError, match=r"2 of 3.*#2.*'left'.*#3.*never"):
        provider.assert_all_used()


def test_assert_all_used_passes_when_every_response_was_taken() -> None:
    """assert_all_used returns quietly once the whole script was used."""
    provider = scripted([_say("a"), ContextOverflowError("b")])
    provider.complete(_request())
    with pytest.raises(ContextOverflowError):
        provider.complete(_request())
    provider.assert_all_used()


def test_requests_and_calls_are_recorded() -> None:
    """Every request that took a response is recorded in order, and calls counts them."""
    provider = scripted([_say("a"), _say("b")])
    first, second = _request("one"), _request("two")
    provider.complete(first)
    provider.complete(second)
    assert ([first, second], 2) == (provider.requests, provider.calls)


def test_the_unexpected_request_is_recorded_but_not_counted() -> None:
    """A request that found no response left is in requests; calls stays at the script size."""
    provider = scripted([])
    for text in ("late", "later"):
        with pytest.raises(UnexpectedRequestError, match=f"call {1 + (text == 'later')}:"):
            provider.complete(_request(text))
    assert ([_request("late"), _request("later")], 0) == (provider.requests, provider.calls)


def test_cancel_before_start_raises_and_takes_no_response() -> None:
    """A call with an already cancelled token raises OperationCancelledError and uses nothing."""
    token = CancelToken()
    token.cancel("user pressed stop")
    provider = scripted([_say("kept")])
    with pytest.raises(OperationCancelledError, match="user pressed stop"):
        list(provider.stream(_request(), cancel=token))
    assert (0, []) == (provider.calls, provider.requests)
    assert (TextBlock("kept"),) == provider.complete(_request()).message.content


def test_cancel_mid_stream_raises_without_a_response() -> None:
    """Cancelling after the first delta stops the stream with no ResponseComplete."""
    token = CancelToken()
    stream = scripted([_say("a long answer")], stream_chunk=2).stream(_request(), cancel=token)
    first = next(stream)
    token.cancel()
    with pytest.raises(OperationCancelledError):
        next(stream)
    assert TextDelta(0, "a ") == first
    assert [] == list(stream)


def test_cancel_after_the_last_delta_withholds_the_response() -> None:
    """Cancelling after the final delta still raises instead of yielding ResponseComplete."""
    token = CancelToken()
    stream = scripted([_say("all")]).stream(_request(), cancel=token)
    assert TextDelta(0, "all") == next(stream)
    token.cancel()
    with pytest.raises(OperationCancelledError):
        next(stream)


def test_complete_with_a_cancelled_token_raises() -> None:
    """complete() propagates the cancellation instead of returning a response."""
    token = CancelToken()
    token.cancel()
    with pytest.raises(OperationCancelledError):
        scripted([_say("x")]).complete(_request(), cancel=token)


def test_concurrent_calls_each_take_a_different_response() -> None:
    """Threads calling at once each get one response; every response is used exactly once."""
    n = 16
    provider = scripted([_say(str(i)) for i in range(n)], stream_chunk=1)
    barrier = threading.Barrier(n)
    results: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        message = provider.complete(_request()).message
        with lock:
            results.append(message.content[0].text)  # type: ignore[union-attr]

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(str(i) for i in range(n)) == sorted(results)
    assert n == provider.calls
    provider.assert_all_used()


def test_an_undeclared_context_edit_is_refused_before_taking_a_response() -> None:
    """A request with a ContextEdit the provider lacks raises CapabilityNotSupportedError."""
    provider = scripted([_say("x")])
    with pytest.raises(CapabilityNotSupportedError) as info:
        provider.complete(_request(context_edits=(ClearToolUses(),)))
    assert ("scripted", "clear_tool_uses", 0) == (
        info.value.provider,
        info.value.capability,
        provider.calls,
    )


def test_a_declared_context_edit_is_accepted() -> None:
    """With the capability declared, a request with that edit is answered."""
    provider = scripted([_say("x")], capabilities={"clear_tool_uses"})
    response = provider.complete(_request(context_edits=(ClearToolUses(),)))
    assert (TextBlock("x"),) == response.message.content


def test_count_tokens_estimates_with_the_capability() -> None:
    """With token_counting, count_tokens is len(JSON of the messages) // 4 and uses no response."""
    provider = scripted([], capabilities={TOKEN_COUNTING})
    request = _request("some words to count")
    assert len(msgspec.json.encode(request.messages)) // 4 == provider.count_tokens(request)
    assert 0 == provider.calls


def test_count_tokens_without_the_capability_raises() -> None:
    """Without token_counting, count_tokens raises CapabilityNotSupportedError."""
    with pytest.raises(CapabilityNotSupportedError, match="token_counting"):
        scripted([]).count_tokens(_request())


def test_the_name_appears_in_errors() -> None:
    """The name given to scripted() is the provider's name and prefixes its errors."""
    provider = scripted([], name="planner")
    with pytest.raises(UnexpectedRequestError, match=r"^planner: "):
        provider.complete(_request())
    assert "planner" == provider.name


@pytest.mark.parametrize(
    ("item", "match"),
    [(ContextOverflowError, "class ContextOverflowError"), ("text", "is a str")],
)
def test_a_bad_script_item_is_refused(item: Any, match: str) -> None:
    """An exception class or a non-item in the script raises InvalidArgumentError at once."""
    with pytest.raises(InvalidArgumentError, match=match):
        scripted([_say("ok"), item])


@pytest.mark.parametrize("chunk", [0, -1, 1.5])
def test_a_bad_stream_chunk_is_refused(chunk: Any) -> None:
    """stream_chunk must be None or a positive int."""
    with pytest.raises(InvalidArgumentError, match="stream_chunk"):
        scripted([], stream_chunk=chunk)


def test_an_unknown_capability_is_refused() -> None:
    """A misspelled capability raises InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match="token_count"):
        scripted([], capabilities={"token_count"})


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_blocks = st.one_of(
    st.builds(TextBlock, st.text()),
    st.builds(ThinkingBlock, st.text(), signature=st.text()),
    st.builds(
        ToolUseBlock,
        st.text(min_size=1),
        st.text(min_size=1),
        st.dictionaries(st.text(), _json, max_size=4),
    ),
    st.builds(ToolResultBlock, st.text(min_size=1), st.text()),
)


@settings(max_examples=150, deadline=None)
@given(content=st.lists(_blocks, max_size=6), chunk=st.none() | st.integers(1, 7))
def test_streamed_deltas_rebuild_the_scripted_message(
    content: list[Block], chunk: int | None
) -> None:
    """For any message: complete() returns it, and each block's deltas join to its content."""
    message = AssistantMessage(content=tuple(content))
    assert message == scripted([message], stream_chunk=chunk).complete(_request()).message
    pieces: dict[int, list[str]] = {}
    for event in scripted([message], stream_chunk=chunk).stream(_request()):
        if isinstance(event, TextDelta | ThinkingDelta | ToolInputDelta):
            piece = (
                event.text
                if isinstance(event, TextDelta)
                else (event.thinking if isinstance(event, ThinkingDelta) else event.partial_json)
            )
            assert chunk is None or len(piece) <= chunk
            pieces.setdefault(event.index, []).append(piece)
    expected: dict[int, str] = {}
    for i, block in enumerate(content):
        if isinstance(block, TextBlock) and block.text:
            expected[i] = block.text
        elif isinstance(block, ThinkingBlock) and block.thinking:
            expected[i] = block.thinking
        elif isinstance(block, ToolUseBlock):
            expected[i] = msgspec.json.encode(block.input).decode()
    assert expected == {i: "".join(p) for i, p in pieces.items()}


@pytest.mark.parametrize(
    "value", [2**64, -(2**63) - 1, "a\ud800"], ids=["2**64", "-2**63-1", "lone-surrogate"]
)
def test_a_scripted_input_the_log_cannot_store_is_answered_in_its_lossless_form(value: Any) -> None:
    """A scripted tool input holding an integer beyond 64 bits or a lone surrogate is answered
    as input {} with input_json (its canonical JSON), streamed as that exact JSON."""
    message = AssistantMessage(content=(ToolUseBlock("t1", "calc", {"v": value}),))
    events = list(scripted([message]).stream(_request()))
    final = events[-1]
    assert isinstance(final, ResponseComplete)
    expected = json.dumps({"v": value}, separators=(",", ":"))
    assert (ToolUseBlock("t1", "calc", {}, input_json=expected),) == final.response.message.content
    assert expected == "".join(e.partial_json for e in events if isinstance(e, ToolInputDelta))
