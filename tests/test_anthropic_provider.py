"""The Anthropic provider: the real ``anthropic`` client over real HTTP + SSE against the fake
Messages API server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic as anthropic_sdk
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import CancelToken, messages_from_dicts, messages_to_dicts
from liteagent.eventlog._interchange import message_from_dict
from liteagent.eventlog.errors import OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    CompactionBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from liteagent.providers import (
    AnthropicProvider,
    ContextOverflowError,
    OverloadedError,
    ProviderAuthError,
    ProviderRequestError,
    ProviderStreamError,
    ProviderUnavailableError,
    RateLimitError,
    anthropic,
)
from liteagent.providers._anthropic_convert import request_params
from liteagent.providers._contract import (
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
    Compact,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSchema,
    ToolUseStart,
)
from liteagent.providers.testing import (
    FakeMessagesServer,
    api_error,
    authentication_error,
    compaction,
    context_overflow,
    dropped_stream,
    error_response,
    message,
    overloaded,
    rate_limited,
    stalled_stream,
    stream_error,
    text,
    thinking,
    tool_use,
    truncated_stream,
    usage,
)

MODEL = "claude-test"


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    """A fake Messages API server, closed after the test."""
    with FakeMessagesServer() as s:
        yield s


def _provider(server: FakeMessagesServer, **kw: Any) -> AnthropicProvider:
    return AnthropicProvider(server.client(**kw), ())


def _request(*texts: str, **kw: Any) -> ModelRequest:
    messages = tuple(
        Message("user" if i % 2 == 0 else "assistant", (TextBlock(t),)) for i, t in enumerate(texts)
    )
    return ModelRequest(
        model=MODEL, messages=messages or (Message("user", (TextBlock("hi"),)),), **kw
    )


def _complete(server: FakeMessagesServer, request: ModelRequest, **kw: Any) -> ModelResponse:
    with _provider(server, **kw) as provider:
        return provider.complete(request)


def _events(provider: AnthropicProvider, request: ModelRequest, **kw: Any) -> list[Any]:
    with provider:
        return list(provider.stream(request, **kw))


# -- streaming and conversion ---------------------------------------------------------------------


def test_streamed_tool_use_is_assembled_exactly(server: FakeMessagesServer) -> None:
    """Thinking, text and a tool call with nested input split in odd fragments come back exactly,
    with all four usage fields."""
    tool_input = {"path": "src/ü.py", "edits": [{"old": "a\n", "new": "b"}], "n": 3, "ok": None}
    server.add_stream(
        message(
            [
                thinking("Let me look.", "sig-1"),
                text("Reading the file."),
                tool_use("toolu_1", "edit", tool_input),
            ],
            usage=usage(377, 65, cache_creation_input_tokens=100, cache_read_input_tokens=200),
        ),
        text_chunk=3,
        fragments=[1, 2, 3, 5, 8],
    )
    events = _events(_provider(server), _request("fix it"))
    final = events[-1]
    assert isinstance(final, ResponseComplete)
    expected = AssistantMessage(
        content=(
            ThinkingBlock("Let me look.", "sig-1"),
            TextBlock("Reading the file."),
            ToolUseBlock("toolu_1", "edit", tool_input),
        ),
        usage=Usage(
            input_tokens=377,
            output_tokens=65,
            cache_creation_input_tokens=100,
            cache_read_input_tokens=200,
        ),
        stop_reason="tool_use",
        model=final.response.message.model,
    )
    assert expected == final.response.message
    assert "Reading the file." == "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "Let me look." == "".join(e.thinking for e in events if isinstance(e, ThinkingDelta))
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    assert [ToolUseStart(2, "toolu_1", "edit")] == starts
    fragments = "".join(e.partial_json for e in events if isinstance(e, ToolInputDelta))
    assert tool_input == json.loads(fragments)
    assert 1 == sum(isinstance(e, ResponseComplete) for e in events)


def _tools(*names: str) -> tuple[ToolSchema, ...]:
    """Schemas of the tools a conversation's calls name (the API refuses tool blocks in a
    request that defines no tools)."""
    return tuple(ToolSchema(name=name) for name in names)


def test_request_carries_the_conversation_verbatim(server: FakeMessagesServer) -> None:
    """Tool results with is_error, signed thinking and compaction blocks are sent back as given."""
    server.add(message([text("ok")]))
    convo = (
        Message("user", (TextBlock("go"),)),
        Message(
            "assistant",
            (
                CompactionBlock(
                    content="summary", encrypted_content="enc", extra={"signature": "s"}
                ),
                ThinkingBlock("hmm", "sig"),
                ToolUseBlock("t1", "bash", {"command": "ls"}),
            ),
        ),
        Message("user", (ToolResultBlock("t1", "boom", is_error=True),)),
    )
    _complete(server, ModelRequest(model=MODEL, messages=convo, tools=_tools("bash"), cache=False))
    (req,) = server.requests
    assert [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "compaction",
                    "content": "summary",
                    "encrypted_content": "enc",
                    "signature": "s",
                },
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True},
            ],
        },
    ] == req.body["messages"]


def test_unsigned_thinking_is_not_sent(server: FakeMessagesServer) -> None:
    """A thinking block without a signature (redacted in an import) is left out of requests."""
    server.add(message([text("ok")]))
    convo = (
        Message("user", (TextBlock("go"),)),
        Message("assistant", (ThinkingBlock("unsigned"), TextBlock("done"))),
        Message("user", (TextBlock("more"),)),
    )
    _complete(server, ModelRequest(model=MODEL, messages=convo, cache=False))
    assert [{"type": "text", "text": "done"}] == server.requests[0].body["messages"][1]["content"]


def test_blank_text_and_emptied_messages_are_not_sent(server: FakeMessagesServer) -> None:
    """Text blocks without non-whitespace text (which the API refuses) are left out, also inside
    a tool result; a message left empty goes, and its neighbours merge so roles alternate."""
    server.add(message([text("ok")]))
    convo = (
        Message("user", (TextBlock("go"),)),
        Message("assistant", (TextBlock(""), ToolUseBlock("t1", "ls", {}))),
        Message("user", (ToolResultBlock("t1", (TextBlock(" \n"), TextBlock("out"))),)),
        Message("assistant", (TextBlock("  "),)),
        Message("user", (TextBlock("more"),)),
    )
    _complete(server, ModelRequest(model=MODEL, messages=convo, tools=_tools("ls"), cache=False))
    assert [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "out"}],
                },
                {"type": "text", "text": "more"},
            ],
        },
    ] == server.requests[0].body["messages"]


@pytest.mark.parametrize(
    "value", [2**64, -(2**63) - 1, 10**30], ids=["2**64", "-2**63-1", "10**30"]
)
def test_a_tool_input_the_log_cannot_store_is_kept_as_its_json_text(
    server: FakeMessagesServer, value: int
) -> None:
    """A streamed tool input holding an integer beyond 64 bits arrives as input_json (its exact
    canonical JSON), and goes back to the API as the exact value."""
    server.add(
        message([tool_use("toolu_1", "calc", {"n": value, "s": "é"})], stop_reason="tool_use")
    )
    server.add(message([text("ok")]))
    with _provider(server) as provider:
        got = provider.complete(_request("go")).message
        expected = json.dumps({"n": value, "s": "é"}, separators=(",", ":"))
        assert (ToolUseBlock("toolu_1", "calc", {}, input_json=expected),) == got.content
        provider.complete(
            ModelRequest(
                model=MODEL,
                messages=(
                    Message("user", (TextBlock("go"),)),
                    Message("assistant", got.content),
                    Message("user", (ToolResultBlock("toolu_1", "done"),)),
                ),
                tools=_tools("calc"),
                cache=False,
            )
        )
    assert {"n": value, "s": "é"} == server.requests[1].body["messages"][1]["content"][0]["input"]


def test_values_json_on_the_wire_cannot_carry_go_out_replaced(server: FakeMessagesServer) -> None:
    """A tool input kept as JSON text with a lone surrogate, and a native input holding a
    non-finite number (a block built in Python: the interchange format refuses one), go out as
    U+FFFD and null: the SDK's encoder would refuse the whole request (and every later one)
    otherwise."""
    server.add(message([text("ok")]))
    kept = message_from_dict(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "a",
                    "input": {"s": "x\ud800", "n": 2**64},
                },
            ],
        }
    )
    kept = Message("assistant", (*kept.content, ToolUseBlock("t2", "b", {"f": float("inf")})))
    convo = (
        Message("user", (TextBlock("go"),)),
        kept,
        Message("user", (ToolResultBlock("t1", "r1"), ToolResultBlock("t2", "r2"))),
    )
    _complete(
        server, ModelRequest(model=MODEL, messages=convo, tools=_tools("a", "b"), cache=False)
    )
    sent = server.requests[0].body["messages"][1]["content"]
    assert [{"s": "x\ufffd", "n": 2**64}, {"f": None}] == [b["input"] for b in sent]


def test_a_lone_surrogate_in_text_is_kept_as_json_text(server: FakeMessagesServer) -> None:
    """A text block holding a lone surrogate (a JSON escape) becomes a raw block with its exact
    JSON; usage numbers beyond 63 bits are bounded."""
    server.add(
        message([text("a\ud800b"), text("fine")], usage=usage(input_tokens=2**70, output_tokens=3))
    )
    got = _complete(server, _request("go")).message
    assert (type(got.content[0]), TextBlock("fine")) == (type(got.content[0]), got.content[1])
    assert {"type": "text", "text": "a\ud800b"} == json.loads(got.content[0].json)  # type: ignore
    assert Usage(input_tokens=2**63 - 1, output_tokens=3) == got.usage


def test_an_sdk_failure_it_does_not_classify_is_a_provider_error(
    server: FakeMessagesServer,
) -> None:
    """A tool input the SDK itself cannot parse (a broken surrogate escape: the SDK raises a
    plain ValueError) reaches the caller as ProviderStreamError, never a foreign exception."""
    server.add(message([tool_use("toolu_1", "calc", {"v": "\ud800x"})], stop_reason="tool_use"))
    with pytest.raises(ProviderStreamError, match="ValueError") as info:
        _complete(server, _request("go"))
    assert isinstance(info.value.__cause__, ValueError)


def test_tools_system_thinking_and_stop_sequences_are_sent(server: FakeMessagesServer) -> None:
    """Tool schemas, the system prompt, extended thinking and stop sequences reach the API."""
    server.add(message([text("ok")]))
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    request = _request(
        "hi",
        system="be brief",
        tools=(ToolSchema(name="read", description="d", input_schema=schema),),
        thinking_budget=2048,
        stop_sequences=("END",),
        max_tokens=3000,
        cache=False,
    )
    _complete(server, request)
    body = server.requests[0].body
    assert "be brief" == body["system"]
    assert [{"name": "read", "description": "d", "input_schema": schema}] == body["tools"]
    assert {"type": "enabled", "budget_tokens": 2048} == body["thinking"]
    assert (["END"], 3000, True) == (body["stop_sequences"], body["max_tokens"], body["stream"])


def test_prompt_caching_marks_the_stable_prefix(server: FakeMessagesServer) -> None:
    """Cache breakpoints go on the system prompt, the newest message and the user turn before."""
    server.add(message([text("ok")]))
    request = _request("first", "answer", "second", system="sys", tools=(ToolSchema(name="t"),))
    _complete(server, request)
    body = server.requests[0].body
    ephemeral = {"type": "ephemeral"}
    assert [{"type": "text", "text": "sys", "cache_control": ephemeral}] == body["system"]
    assert "cache_control" not in body["tools"][0]
    marked = [
        i for i, m in enumerate(body["messages"]) if any("cache_control" in b for b in m["content"])
    ]
    assert [0, 2] == marked


def test_no_cache_markers_when_caching_is_off(server: FakeMessagesServer) -> None:
    """cache=False sends the request without any cache_control."""
    server.add(message([text("ok")]))
    _complete(server, _request("a", "b", "c", system="sys", cache=False))
    assert "cache_control" not in repr(server.requests[0].body)


def test_compaction_block_comes_back_verbatim(server: FakeMessagesServer) -> None:
    """With native compaction on, the compaction block and its extra keys come back verbatim."""
    server.add_stream(
        message([compaction("summary", encrypted_content="enc", signature="s"), text("go on")])
    )
    response = _complete(server, _request("hi", context_edits=(Compact(),)))
    assert (
        CompactionBlock(content="summary", encrypted_content="enc", extra={"signature": "s"})
        == response.message.content[0]
    )


BLOCKS = st.one_of(
    st.builds(text, st.text(min_size=1, max_size=40)),
    st.builds(thinking, st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=10)),
    st.builds(
        lambda i, v: tool_use(f"toolu_{i}", "tool", {"v": v}),
        st.integers(0, 10**6),
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=10),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
            max_leaves=8,
        ),
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=st.lists(BLOCKS, min_size=1, max_size=4), chunk=st.integers(1, 7))
def test_responses_round_trip_through_the_wire(content: list[dict[str, Any]], chunk: int) -> None:
    """Any streamed content comes back as the blocks the API JSON describes."""
    with FakeMessagesServer() as srv:
        srv.add_stream(message(content), text_chunk=chunk, seed=chunk)
        with AnthropicProvider(srv.client(), ()) as provider:
            response = provider.complete(_request("hi"))
    assert (
        message_from_dict({"role": "assistant", "content": content}).content
        == response.message.content
    )


# -- native context editing and token counting -----------------------------------------------------


def test_context_edits_go_to_the_beta_endpoint(server: FakeMessagesServer) -> None:
    """Native edits are sent as context_management with their betas, clear_thinking first, and
    the applied edits the response reports are surfaced."""
    applied = [
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 4, "cleared_input_tokens": 20000}
    ]
    server.add_stream(message([text("ok")], context_management={"applied_edits": applied}))
    edits = (
        ClearToolUses(trigger_tokens=30000, keep_tool_uses=3, exclude_tools=("memory",)),
        Compact(trigger_tokens=150000),
        ClearThinking(keep_turns=1),
    )
    response = _complete(server, _request("hi", context_edits=edits))
    (req,) = server.requests
    assert {"context-management-2025-06-27", "compact-2026-01-12"} == set(
        req.headers["anthropic-beta"].split(",")
    )
    assert [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 30000},
            "keep": {"type": "tool_uses", "value": 3},
            "exclude_tools": ["memory"],
            "clear_tool_inputs": False,
        },
        {
            "type": "compact_20260112",
            "pause_after_compaction": False,
            "trigger": {"type": "input_tokens", "value": 150000},
        },
    ] == req.body["context_management"]["edits"]
    assert (
        AppliedEdit(
            type="clear_tool_uses_20250919", cleared_tool_uses=4, cleared_input_tokens=20000
        ),
    ) == response.applied_edits


def test_count_tokens(server: FakeMessagesServer) -> None:
    """count_tokens returns the API's count for the request."""
    server.add_count_tokens(1234)
    with _provider(server) as provider:
        assert 1234 == provider.count_tokens(_request("hello", system="sys"))
    assert "/v1/messages/count_tokens" == server.requests[0].path
    assert "sys" == server.requests[0].body["system"]


# -- errors ----------------------------------------------------------------------------------------


def test_context_overflow_carries_the_token_numbers(server: FakeMessagesServer) -> None:
    """A 400 'prompt is too long' becomes ContextOverflowError(tokens, maximum), not retried."""
    server.add(context_overflow(210432, 200000))
    with pytest.raises(ContextOverflowError) as info:
        _events(_provider(server), _request("big"))
    assert (210432, 200000, 1) == (info.value.tokens, info.value.maximum, len(server.requests))


def test_auth_error(server: FakeMessagesServer) -> None:
    """A 401 becomes ProviderAuthError."""
    server.add(authentication_error())
    with pytest.raises(ProviderAuthError):
        _events(_provider(server), _request())


def test_rate_limit_carries_retry_after(server: FakeMessagesServer) -> None:
    """429s past the client's retries become RateLimitError with the server's retry-after."""
    server.add(rate_limited(retry_after_ms=20), rate_limited(retry_after_ms=20))
    with pytest.raises(RateLimitError) as info:
        _events(_provider(server, max_retries=1), _request())
    assert (0.02, 2) == (info.value.retry_after, len(server.requests))


def test_overloaded(server: FakeMessagesServer) -> None:
    """529s past the client's retries become OverloadedError."""
    server.add(overloaded(), overloaded())
    with pytest.raises(OverloadedError):
        _events(_provider(server, max_retries=1), _request())


def test_server_error(server: FakeMessagesServer) -> None:
    """A 500 past the retries becomes ProviderUnavailableError."""
    server.add(error_response(500, "api_error", "boom", should_retry=False))
    with pytest.raises(ProviderUnavailableError):
        _events(_provider(server), _request())


def test_other_client_errors(server: FakeMessagesServer) -> None:
    """Another 4xx becomes ProviderRequestError with its status and type."""
    server.add(error_response(400, "invalid_request_error", "messages: bad"))
    with pytest.raises(ProviderRequestError) as info:
        _events(_provider(server), _request())
    assert (400, "invalid_request_error") == (info.value.status_code, info.value.error_type)


def test_no_connection() -> None:
    """A refused connection becomes ProviderUnavailableError."""
    with FakeMessagesServer() as srv:
        client = srv.client(max_retries=0)
    with AnthropicProvider(client, ()) as provider, pytest.raises(ProviderUnavailableError):
        list(provider.stream(_request()))


def test_overloaded_then_ok_takes_two_requests(server: FakeMessagesServer) -> None:
    """A 529 followed by a good stream succeeds with exactly two requests."""
    server.add(overloaded(), message([text("fine")]))
    response = _complete(server, _request())
    assert (TextBlock("fine"),) == response.message.content
    assert [0, 1] == [r.retry_count for r in server.requests]


@pytest.mark.parametrize(
    "broken",
    [dropped_stream(after=4), truncated_stream(after=5), stream_error(after=3)],
    ids=["dropped", "no-message-stop", "event-error"],
)
def test_broken_stream_gives_stream_error_and_no_message(
    server: FakeMessagesServer, broken: Any
) -> None:
    """A stream that breaks after it started raises ProviderStreamError and yields no message."""
    server.add(broken)
    seen: list[Any] = []
    with pytest.raises(ProviderStreamError), _provider(server) as provider:
        seen.extend(provider.stream(_request()))
    assert not any(isinstance(e, ResponseComplete) for e in seen)
    assert 1 == len(server.requests)


def test_stalled_stream_times_out_as_stream_error(server: FakeMessagesServer) -> None:
    """A stream that stalls past the read timeout raises ProviderStreamError."""
    server.add(stalled_stream(seconds=30, after=3))
    start = time.monotonic()
    with pytest.raises(ProviderStreamError):
        _events(_provider(server, timeout=0.3), _request())
    assert time.monotonic() - start < 10  # a hang guard: the stall lasts 30 s


# -- cancellation ----------------------------------------------------------------------------------


def test_cancel_mid_stream_returns_fast_and_closes_the_connection(
    server: FakeMessagesServer,
) -> None:
    """Cancelling a stalled stream returns long before the stall ends, yields no message, and
    the server sees the connection closed."""
    server.add(stalled_stream(seconds=30, after=4))
    cancel = CancelToken()
    seen: list[Any] = []
    timer = threading.Timer(0.3, cancel.cancel)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(OperationCancelledError), _provider(server) as provider:
            seen.extend(provider.stream(_request(), cancel=cancel))
    finally:
        timer.cancel()
    assert time.monotonic() - start < 10  # a hang guard: the stall lasts 30 s
    assert not any(isinstance(e, ResponseComplete) for e in seen)
    deadline = time.monotonic() + 10
    while not server.hangups and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [server.requests[0].request_id] == server.hangups


def test_cancel_before_start_sends_nothing(server: FakeMessagesServer) -> None:
    """A cancelled token stops the call before any request is made."""
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(OperationCancelledError):
        _events(_provider(server), _request(), cancel=cancel)
    assert [] == server.requests


# -- construction ----------------------------------------------------------------------------------


def test_factory_reads_key_and_url_from_the_environment(
    server: FakeMessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anthropic() uses ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL, sending the key as a bearer."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-secret")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    server.add(message([text("hi")]))
    provider = anthropic(http_client=anthropic_sdk.DefaultHttpxClient(trust_env=False))
    with provider, structlog.testing.capture_logs() as logs:
        provider.complete(_request())
    assert "Bearer sk-test-secret" == server.requests[0].headers["authorization"]
    assert "sk-test-secret" not in repr(provider)
    assert "sk-test-secret" not in repr(logs)


def test_factory_without_a_key_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """anthropic() with no key anywhere raises ProviderAuthError."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderAuthError):
        anthropic()


def test_capabilities_are_declared() -> None:
    """The Anthropic provider declares token counting and all three native edits."""
    assert {"token_counting", "clear_tool_uses", "clear_thinking", "compact"} == set(
        AnthropicProvider.capabilities
    )


def _strip_cache(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache(v) for v in value]
    return value


OUT_BLOCKS = st.one_of(
    st.builds(TextBlock, st.text(max_size=20).filter(str.strip)),
    st.builds(ThinkingBlock, st.text(max_size=20), st.text(min_size=1, max_size=8)),
    st.builds(
        ToolUseBlock,
        st.text(min_size=1, max_size=8),
        st.sampled_from(["a", "b"]),
        st.dictionaries(
            st.text(max_size=5), st.integers(-(2**63), 2**63) | st.text(max_size=5), max_size=3
        ),
    ),
    st.builds(
        ToolResultBlock, st.text(min_size=1, max_size=8), st.text(max_size=20), st.booleans()
    ),
    st.builds(CompactionBlock, st.none() | st.text(max_size=20), st.text(max_size=8)),
)


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(
        st.builds(
            Message,
            st.sampled_from(["user", "assistant"]),
            st.lists(OUT_BLOCKS, min_size=1, max_size=4).map(tuple),
        ),
        min_size=1,
        max_size=5,
    ),
    cache=st.booleans(),
)
def test_outbound_messages_are_the_interchange_shape(messages: list[Message], cache: bool) -> None:
    """What goes on the wire is messages_to_dicts of the conversation (cache markers aside), and
    it converts back to the same messages."""
    params, _ = request_params(ModelRequest(model=MODEL, messages=tuple(messages), cache=cache))
    assert messages_to_dicts(messages) == _strip_cache(params["messages"])
    assert messages == messages_from_dicts(_strip_cache(params["messages"]))


def test_a_retry_after_beyond_a_minute_is_raised_at_once(server: FakeMessagesServer) -> None:
    """A 429 asking to wait an hour is a RateLimitError at once, carrying the wait, for the
    caller to decide: the SDK slept as long as the server said (up to ~49 days), where no
    cancel reached it."""
    server.add(rate_limited(retry_after_ms=None, retry_after=3600))
    start = time.monotonic()
    with pytest.raises(RateLimitError) as info:
        _events(_provider(server, max_retries=2), _request())
    assert 3600 == info.value.retry_after
    assert 1 == len(server.requests)
    assert time.monotonic() - start < 30  # a hang guard: the server asked for an hour


def test_a_cancel_ends_the_wait_before_a_retry(server: FakeMessagesServer) -> None:
    """A cancel while waiting the 20 s a 529 asked for raises OperationCancelledError at
    once; nothing is sent again."""
    server.add(overloaded(retry_after_ms=20_000), message([text("late")]))
    cancel = CancelToken()
    timer = threading.Timer(0.3, cancel.cancel)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(OperationCancelledError):
            _events(_provider(server, max_retries=2), _request(), cancel=cancel)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 10  # a hang guard: the wait asked for is 20 s
    assert 1 == len(server.requests)


def test_retries_follow_the_clients_max_retries(server: FakeMessagesServer) -> None:
    """Retries happen as the SDK's did: ``max_retries`` times, each request carrying its
    retry count, the last error raised."""
    server.add(*(api_error() for _ in range(3)), message([text("never")]))
    with pytest.raises(ProviderUnavailableError):
        _events(_provider(server, max_retries=2), _request())
    assert [0, 1, 2] == [r.retry_count for r in server.requests]
