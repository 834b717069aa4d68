"""The fake Messages API server, driven by the real anthropic client over real HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import anthropic
import httpx2
import pytest

from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.providers import testing
from liteagent.providers.testing import (
    FakeMessagesServer,
    MessageResponse,
    api_error,
    authentication_error,
    compaction,
    context_overflow,
    dropped_stream,
    fake_messages_server,  # noqa: F401 - registers the fixture in this module
    iteration,
    message,
    overloaded,
    rate_limited,
    redacted_thinking,
    stalled_stream,
    stream_error,
    stream_events,
    text,
    thinking,
    tool_use,
    truncated_stream,
    usage,
)

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_INPUT = {
    "city": 'Paris "centre"',
    "when": {"days": [0, 1, {"hours": [9, 12.5, None]}], "tz": "Europe/Paris"},
    "units": ["°C", "km/h"],
    "flags": {"detailed": True, "empty": {}, "none": []},
}
FULL = message(
    [
        thinking("The user wants the weather; I should call the tool.", "sig-EqQB"),
        text("I'll check the weather in Paris for you."),
        tool_use("toolu_01", "get_weather", TOOL_INPUT),
    ],
    usage=usage(377, 65, cache_creation_input_tokens=120, cache_read_input_tokens=2048),
)
ODD_FRAGMENTS = (1, 2, 3, 5, 7, 11, 13)


@pytest.fixture
def server() -> Any:
    """A fresh server per test, closed afterwards."""
    with FakeMessagesServer() as fake:
        yield fake


def _stream_final(client: anthropic.Anthropic, **kw: Any) -> Any:
    with client.messages.stream(model="m", max_tokens=100, messages=USER, **kw) as stream:
        return stream.get_final_message()


def _create(client: anthropic.Anthropic) -> Any:
    return client.messages.create(model="m", max_tokens=100, messages=USER)


def test_streamed_message_is_assembled_exactly(server: FakeMessagesServer) -> None:
    """thinking + text + tool_use split in odd fragments come back exactly from the stream."""
    server.add(MessageResponse(FULL, fragments=ODD_FRAGMENTS))
    with server.client() as client:
        final = _stream_final(client)
    got = {
        "content": [block.to_dict() for block in final.content],
        "stop_reason": final.stop_reason,
        "usage": final.usage.to_dict(),
        "id": final.id,
    }
    assert {k: FULL[k] for k in ("content", "stop_reason", "usage", "id")} == got


def test_seeded_random_split_is_assembled_exactly(server: FakeMessagesServer) -> None:
    """The default seeded random split of tool input also reassembles to the same input."""
    server.add(MessageResponse(FULL, seed=7))
    with server.client() as client:
        final = _stream_final(client)
    assert TOOL_INPUT == final.content[2].input


def test_non_streamed_message_is_the_scripted_json(server: FakeMessagesServer) -> None:
    """The same message, requested without streaming, parses to exactly the scripted dict."""
    server.add(FULL)
    with server.client() as client:
        reply = _create(client)
    assert FULL == reply.to_dict()


def test_stream_flag_chooses_sse(server: FakeMessagesServer) -> None:
    """A scripted message goes out as SSE events when the request sets stream=true."""
    server.add(message("Hi there, friend"))
    with server.client() as client:
        stream = client.messages.create(model="m", max_tokens=9, messages=USER, stream=True)
        with stream:
            kinds = [event.type for event in stream]
    expected = [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert expected == kinds


def test_event_sequence_follows_the_api() -> None:
    """stream_events emits message_start, ping, the blocks, message_delta and message_stop."""
    names = [name for name, _ in stream_events(message([thinking("a", "s"), text("b")]))]
    expected = [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert expected == names


def test_tool_input_is_cut_at_the_given_sizes() -> None:
    """fragments= sets the input_json_delta sizes, after the API's leading empty delta."""
    reply = message([tool_use("t", "f", {"a": [1, 2]})])
    deltas = [
        d["delta"]["partial_json"]
        for name, d in stream_events(reply, fragments=(1, 4))
        if name == "content_block_delta"
    ]
    assert ["", "{", '"a":', " [1, 2]}"] == deltas


def test_text_is_split_into_several_deltas() -> None:
    """Text goes out as text_delta pieces of text_chunk characters."""
    deltas = [
        d["delta"]["text"]
        for name, d in stream_events(message("abcdefg"), text_chunk=3)
        if name == "content_block_delta"
    ]
    assert ["abc", "def", "g"] == deltas


def test_add_stream_refuses_a_non_streaming_request(server: FakeMessagesServer) -> None:
    """A stream scripted with add_stream answers a non-streaming request with a loud 500."""
    server.add_stream(message("only for streams"))
    with server.client() as client, pytest.raises(anthropic.InternalServerError) as caught:
        _create(client)
    assert "did not ask for one" in str(caught.value.api_message)
    assert 1 == len(server.requests)


def test_beta_stream_carries_compaction_and_context_management(
    server: FakeMessagesServer,
) -> None:
    """compaction and redacted_thinking blocks, iterations and applied_edits reach the beta type."""
    edits = [
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 4, "cleared_input_tokens": 20000}
    ]
    iterations = [iteration("compaction", 900, 80), iteration("message", 300, 20)]
    blocks = [
        compaction("Summary of the work so far", encrypted_content="enc", signature="sg"),
        redacted_thinking("opaque"),
        text("Continuing."),
    ]
    reply = message(
        blocks,
        stop_reason="compaction",
        usage=usage(300, 20, iterations=iterations),
        context_management={"applied_edits": edits},
    )
    server.add(reply)
    with (
        server.client() as client,
        client.beta.messages.stream(
            model="m", max_tokens=100, messages=USER, betas=["compact-2026-01-12"]
        ) as stream,
    ):
        final = stream.get_final_message()
    got = (
        [b.to_dict() for b in final.content],
        final.stop_reason,
        final.context_management.to_dict(),
        [i.to_dict() for i in final.usage.iterations],
    )
    assert (blocks, "compaction", {"applied_edits": edits}, iterations) == got


def test_json_reply_carries_context_management(server: FakeMessagesServer) -> None:
    """context_management is a top-level field of a non-streamed reply."""
    edits = [
        {
            "type": "clear_thinking_20251015",
            "cleared_thinking_turns": 2,
            "cleared_input_tokens": 3000,
        }
    ]
    server.add(message("ok", context_management={"applied_edits": edits}))
    with server.client() as client:
        reply = client.beta.messages.create(
            model="m", max_tokens=9, messages=USER, betas=["context-management-2025-06-27"]
        )
    assert edits == [e.to_dict() for e in reply.context_management.applied_edits]


def test_context_overflow_is_a_bad_request(server: FakeMessagesServer) -> None:
    """A context overflow raises BadRequestError with the API's message, after one attempt."""
    server.add(context_overflow(210432, 200000))
    with server.client() as client, pytest.raises(anthropic.BadRequestError) as caught:
        _stream_final(client)
    got = (caught.value.api_message, caught.value.type, len(server.requests))
    assert ("prompt is too long: 210432 tokens > 200000 maximum", "invalid_request_error", 1) == got


def test_authentication_error(server: FakeMessagesServer) -> None:
    """A 401 raises AuthenticationError and is not retried."""
    server.add(authentication_error())
    with server.client() as client, pytest.raises(anthropic.AuthenticationError):
        _create(client)
    assert 1 == len(server.requests)


def test_rate_limit_is_raised_after_the_retries(server: FakeMessagesServer) -> None:
    """429s are retried max_retries times, then RateLimitError is raised."""
    server.add(rate_limited(), rate_limited(), rate_limited())
    with server.client(max_retries=2) as client, pytest.raises(anthropic.RateLimitError):
        _create(client)
    assert [0, 1, 2] == [r.retry_count for r in server.requests]


def test_rate_limit_sends_retry_after_headers(server: FakeMessagesServer) -> None:
    """rate_limited sends retry-after-ms and, when asked, retry-after."""
    server.add(rate_limited(retry_after_ms=5, retry_after=0.005))
    with server.client(max_retries=0) as client, pytest.raises(anthropic.RateLimitError) as caught:
        _create(client)
    headers = caught.value.response.headers
    assert ("5", "0.005") == (headers["retry-after-ms"], headers["retry-after"])


def test_api_error_is_an_internal_server_error(server: FakeMessagesServer) -> None:
    """A 500 api_error raises InternalServerError."""
    server.add(api_error())
    with server.client(max_retries=0) as client, pytest.raises(anthropic.InternalServerError) as e:
        _create(client)
    assert (500, "api_error") == (e.value.status_code, e.value.type)


def test_overloaded_is_an_overloaded_error(server: FakeMessagesServer) -> None:
    """A 529 overloaded_error raises OverloadedError."""
    server.add(overloaded())
    with server.client(max_retries=0) as client, pytest.raises(anthropic.OverloadedError):
        _stream_final(client)
    assert 1 == len(server.requests)


def test_overloaded_then_success_is_retried(server: FakeMessagesServer) -> None:
    """A 529 then a message succeeds with two requests, retry counts 0 and 1."""
    server.add(overloaded(), message("recovered"))
    with server.client() as client:
        final = _stream_final(client)
    assert ("recovered", [0, 1]) == (
        final.content[0].text,
        [r.retry_count for r in server.requests],
    )


def test_dropped_stream_raises_remote_protocol_error(server: FakeMessagesServer) -> None:
    """A connection dropped mid-stream surfaces as a raw httpx2.RemoteProtocolError."""
    server.add(dropped_stream(FULL, after=6))
    with server.client() as client, pytest.raises(httpx2.RemoteProtocolError):
        _stream_final(client)
    assert 1 == len(server.requests)


def test_stall_raises_read_timeout(server: FakeMessagesServer) -> None:
    """A stream stalled past the client's read timeout raises httpx2.ReadTimeout, quickly."""
    server.add(stalled_stream(FULL, seconds=30, after=2))
    started = time.monotonic()
    with server.client(max_retries=0, timeout=0.3) as client, pytest.raises(httpx2.ReadTimeout):
        _stream_final(client)
    assert time.monotonic() - started < 10  # a hang guard: the stall lasts 30 s


def test_stall_shorter_than_the_timeout_completes(server: FakeMessagesServer) -> None:
    """A short stall delays the stream but the message still arrives whole."""
    server.add(stalled_stream(FULL, seconds=0.05, after=4))
    with server.client() as client:
        final = _stream_final(client)
    assert TOOL_INPUT == final.content[2].input


def test_truncated_stream_has_no_stop_reason(server: FakeMessagesServer) -> None:
    """A stream that ends without message_delta/message_stop gives stop_reason None."""
    server.add(truncated_stream(FULL))
    with server.client() as client:
        final = _stream_final(client)
    assert (None, 3) == (final.stop_reason, len(final.content))


def test_error_event_is_a_status_200_api_error(server: FakeMessagesServer) -> None:
    """An `event: error` mid-stream raises APIStatusError with status 200, not retried."""
    server.add(stream_error(FULL, after=4))
    with server.client() as client, pytest.raises(anthropic.APIStatusError) as caught:
        _stream_final(client)
    got = (caught.value.status_code, caught.value.type, type(caught.value), len(server.requests))
    assert (200, "overloaded_error", anthropic.APIStatusError, 1) == got


def test_count_tokens_defaults_to_a_quarter_of_the_body(server: FakeMessagesServer) -> None:
    """Unscripted count_tokens answers len(json.dumps(body)) // 4."""
    with server.client() as client:
        counted = client.messages.count_tokens(model="m", messages=USER)
    assert len(json.dumps(server.requests[0].body)) // 4 == counted.input_tokens


def test_count_tokens_answers_the_scripted_value(server: FakeMessagesServer) -> None:
    """A scripted count is returned on the count_tokens path, apart from the message script."""
    server.add_count_tokens(1234)
    with server.client() as client:
        counted = client.messages.count_tokens(model="m", messages=USER)
    assert (1234, "/v1/messages/count_tokens") == (counted.input_tokens, server.requests[0].path)


def test_beta_count_tokens_reports_original_tokens(server: FakeMessagesServer) -> None:
    """The beta form returns context_management.original_input_tokens."""
    server.add_count_tokens(42, original_input_tokens=100)
    with server.client() as client:
        counted = client.beta.messages.count_tokens(
            model="m",
            messages=USER,
            betas=["context-management-2025-06-27"],
            context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
        )
    assert (42, 100) == (counted.input_tokens, counted.context_management.original_input_tokens)


def test_count_tokens_can_fail(server: FakeMessagesServer) -> None:
    """count_tokens can be scripted to answer an error, here a context overflow."""
    server.add_count_tokens(context_overflow())
    with server.client() as client, pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="m", messages=USER)


def test_requests_are_recorded(server: FakeMessagesServer) -> None:
    """Each request is recorded with method, path, lower-cased headers, body and request id."""
    server.add(message("hi"))
    with server.client() as client:
        reply = client.messages.create(model="m", max_tokens=7, messages=USER, system="sys")
    [request] = server.requests
    got = (
        request.method,
        request.path,
        request.headers["authorization"],
        request.body,
        request.request_id,
        request.stream,
    )
    body = {"max_tokens": 7, "messages": USER, "model": "m", "system": "sys"}
    assert ("POST", "/v1/messages", "Bearer test", body, reply._request_id, False) == got


def test_error_responses_carry_a_request_id(server: FakeMessagesServer) -> None:
    """Errors carry the request-id header too, which the SDK exposes on the exception."""
    server.add(authentication_error())
    with server.client() as client, pytest.raises(anthropic.AuthenticationError) as caught:
        _create(client)
    assert server.requests[0].request_id == caught.value.request_id


def test_unscripted_request_fails_fast(server: FakeMessagesServer) -> None:
    """With nothing scripted, a request gets a 500 that is not retried and says so."""
    with server.client(max_retries=2) as client, pytest.raises(anthropic.InternalServerError) as e:
        _create(client)
    assert ("script was empty" in str(e.value.api_message), 1) == (True, len(server.requests))


def test_unknown_route_is_not_found(server: FakeMessagesServer) -> None:
    """A path the fake does not serve answers 404 not_found_error, once."""
    with server.client() as client, pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-fake")
    assert ("GET", 1) == (server.requests[0].method, len(server.requests))


def test_add_rejects_what_it_cannot_send(server: FakeMessagesServer) -> None:
    """add raises InvalidArgumentError for something that is neither a response nor a message
    dict."""
    with pytest.raises(InvalidArgumentError):
        server.add("not a message")  # type: ignore[arg-type]


def test_message_infers_its_stop_reason() -> None:
    """message() stops with tool_use when it holds a tool call, end_turn otherwise."""
    got = (message([tool_use("t", "f", {})])["stop_reason"], message("x")["stop_reason"])
    assert ("tool_use", "end_turn") == got


def test_async_client_streams(server: FakeMessagesServer) -> None:
    """The async client streams and assembles the same message."""
    server.add(MessageResponse(FULL, fragments=ODD_FRAGMENTS))

    async def run() -> Any:
        async with (
            server.async_client() as client,
            client.messages.stream(model="m", max_tokens=100, messages=USER) as stream,
        ):
            return await stream.get_final_message()

    assert FULL["content"] == [block.to_dict() for block in asyncio.run(run()).content]


def test_the_pytest_fixture_serves(fake_messages_server: FakeMessagesServer) -> None:  # noqa: F811 - the fixture imported above
    """The fake_messages_server fixture gives a running server."""
    fake_messages_server.add(message("from the fixture"))
    with fake_messages_server.client() as client:
        reply = _create(client)
    assert "from the fixture" == reply.content[0].text


def test_close_during_a_stall_returns_fast() -> None:
    """close() ends a stalled stream at once; the reader then sees a broken stream."""
    server = FakeMessagesServer()
    server.add(stalled_stream(FULL, seconds=30, after=1))
    with (
        server.client(max_retries=0) as client,
        client.messages.stream(model="m", max_tokens=100, messages=USER) as stream,
    ):
        first = next(iter(stream))
        started = time.monotonic()
        server.close()
        elapsed = time.monotonic() - started
        with pytest.raises(httpx2.RemoteProtocolError):
            stream.get_final_message()
    assert ("message_start", True) == (first.type, elapsed < 10)  # the stall lasts 30 s


def test_close_is_idempotent() -> None:
    """A second close() does nothing and the server reports itself closed."""
    server = FakeMessagesServer()
    server.close()
    server.close()
    assert server.closed


def test_exported_names() -> None:
    """The package exports exactly its documented names, each one present."""
    expected = {
        "COUNT_TOKENS_PATH",
        "DEFAULT_MODEL",
        "MESSAGES_PATH",
        "Drop",
        "FakeMessagesServer",
        "JSONResponse",
        "MessageResponse",
        "RecordedRequest",
        "Response",
        "SSEEvent",
        "Stall",
        "StreamResponse",
        "StreamStep",
        "api_error",
        "authentication_error",
        "compaction",
        "context_overflow",
        "dropped_stream",
        "encode_event",
        "error_body",
        "error_response",
        "fake_messages_server",
        "iteration",
        "message",
        "overloaded",
        "rate_limited",
        "redacted_thinking",
        "stalled_stream",
        "stream_error",
        "stream_events",
        "text",
        "thinking",
        "tool_use",
        "truncated_stream",
        "usage",
    }
    present = {name for name in testing.__all__ if hasattr(testing, name)}
    assert (expected, expected) == (set(testing.__all__), present)


@pytest.mark.processes
def test_package_imports_without_pytest() -> None:
    """The package imports in an interpreter where pytest cannot be imported."""
    code = (
        "import sys; sys.modules['pytest'] = None; "
        "import liteagent.providers.testing as t; print(t.FakeMessagesServer.__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert ("FakeMessagesServer\n", "") == (result.stdout, result.stderr)


def test_tool_blocks_without_tools_are_refused_as_the_api_does() -> None:
    """A request whose messages hold a tool_use or tool_result block but that defines no tools
    gets the API's 400 invalid_request_error; the script is not consumed, and the same request
    with its tools gets the scripted answer."""
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
    ]
    with FakeMessagesServer() as server, server.client(max_retries=0) as client:
        server.add(message([text("fine")]))
        with pytest.raises(anthropic.BadRequestError, match="must define tools"):
            client.messages.create(model="m", max_tokens=10, messages=messages)  # type: ignore[arg-type]
        assert 1 == server.pending
        tools = [{"name": "ls", "input_schema": {"type": "object"}}]
        reply = client.messages.create(
            model="m",
            max_tokens=10,
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
        )
    assert "fine" == reply.content[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "make",
    [
        lambda: testing.JSONResponse(object()),
        lambda: testing.JSONResponse({"x": float("nan")}),
        lambda: testing.JSONResponse({}, status=1000),
        lambda: testing.JSONResponse({}, status=True),
        lambda: testing.JSONResponse({}, headers={"X": "\ud800"}),
        lambda: testing.JSONResponse({}, headers={"X": "a\r\nX-Injected: yes"}),
        lambda: testing.JSONResponse({}, headers={5: "x"}),
        lambda: testing.JSONResponse({}, delay=-1),
        lambda: testing.MessageResponse(testing.message("hi"), text_chunk=0),
        lambda: testing.MessageResponse(None),  # type: ignore[arg-type]
        lambda: testing.StreamResponse([], status=99),
        lambda: testing.message(None),  # type: ignore[arg-type]
        lambda: testing.message([None]),  # type: ignore[list-item]
    ],
    ids=[
        "object-body",
        "nan-body",
        "status-1000",
        "status-bool",
        "header-surrogate",
        "header-crlf",
        "header-int-name",
        "negative-delay",
        "text-chunk-0",
        "message-None",
        "stream-status-99",
        "builder-None",
        "builder-[None]",
    ],
)
def test_a_response_the_server_cannot_send_is_refused_when_it_is_made(make: Any) -> None:
    """A scripted response the server could not send (a body that is no JSON, a status out of
    range, a header with CR/LF or a character latin-1 lacks, a text chunk of 0) is refused
    with InvalidArgumentError when it is made. It used to be queued, the server's handler
    thread died with a traceback, the client saw a connection error, and a CR/LF header
    injected another header."""
    with pytest.raises(InvalidArgumentError):
        make()
