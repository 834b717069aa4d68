"""Model-call middleware: compaction before each call (the log keeps everything), and reactive
compaction that trims once after a context overflow — against a stub call, the real anthropic
client talking to the fake Messages API server, and a whole agent."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from liteagent.context import (
    Compactor,
    CompactResult,
    compaction,
    estimate_tokens,
    llm_compactor,
    reactive_compaction,
    split_turns,
)
from liteagent.context._llm import SUMMARY_HEADER
from liteagent.context._middleware import trim_messages
from liteagent.eventlog import CancelToken, SessionState, conversation, fold, memory_checkpointer
from liteagent.eventlog._messages import message_text
from liteagent.eventlog.errors import ContextLimitError, InvalidArgumentError
from liteagent.eventlog.types import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolSchema,
    ToolUseBlock,
    Usage,
)
from liteagent.providers import (
    AnthropicProvider,
    ContextOverflowError,
    ProviderUnavailableError,
    scripted,
)
from liteagent.providers.testing import FakeMessagesServer, context_overflow, message, text
from liteagent.sdk import create_agent


def prompt(text: str) -> Message:
    """A user prompt."""
    return Message("user", (TextBlock(text),))


def turn(n: int, size: int = 600) -> list[Message]:
    """A turn: prompt, a tool call, its result of ``size`` characters, a closing text."""
    call = f"toolu_{n}"
    return [
        prompt(f"task {n}"),
        Message("assistant", (ToolUseBlock(call, "read_file", {"path": f"f{n}.py"}),)),
        Message("user", (ToolResultBlock(call, f"body{n} " + "x" * size),)),
        Message("assistant", (TextBlock(f"done {n}"),)),
    ]


def conversation_of(turns: int, size: int = 600) -> list[Message]:
    """``turns`` turns in a row."""
    return [m for n in range(turns) for m in turn(n, size)]


def reply(text: str, usage: Usage | None = None) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(
        content=(TextBlock(text),), usage=usage or Usage(), stop_reason="end_turn"
    )


def request_of(messages: Sequence[Message]) -> ModelRequest:
    """A request carrying ``messages`` (and the tool its calls name: the API refuses tool
    blocks in a request that defines no tools)."""
    tools = (ToolSchema(name="read_file"),)
    return ModelRequest(model="m", messages=tuple(messages), tools=tools, max_tokens=100)


def overflowing(times: int) -> tuple[list[ModelRequest], Callable[[ModelRequest], ModelResponse]]:
    """A stub call that raises ContextLimitError ``times`` times, then answers "ok"."""
    sent: list[ModelRequest] = []

    def call(request: ModelRequest) -> ModelResponse:
        sent.append(request)
        if len(sent) <= times:
            raise ContextLimitError("prompt is too long", tokens=20_000, maximum=10_000)
        return ModelResponse(message=reply("ok"))

    return sent, call


def pairs_whole(messages: Sequence[Message]) -> bool:
    """Whether tool_use ids and tool_result ids match one to one."""
    blocks = [b for m in messages for b in m.content]
    return {b.id for b in blocks if type(b) is ToolUseBlock} == {
        b.tool_use_id for b in blocks if type(b) is ToolResultBlock
    }


class KeepLastTurn(Compactor):
    """Test stand-in compactor: the first prompt and the last turn only."""

    def __init__(self) -> None:
        self.usages: list[Usage | None] = []

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
    ) -> CompactResult:
        self.usages.append(usage)
        turns = split_turns(messages)
        first, last = turns[0][0], turns[-1]
        out: tuple[Message, ...] = tuple(messages)
        if len(turns) >= 2 and last[0].role == "user":
            out = (Message("user", first.content + last[0].content), *last[1:])
        elif len(turns) >= 2:
            out = (first, *last)
        return CompactResult(
            messages=out,
            changed=out != tuple(messages),
            tokens_before=estimate_tokens(messages),
            tokens_after=estimate_tokens(out),
        )


# -- compaction -----------------------------------------------------------------------------------


def test_compaction_returns_the_same_request_when_nothing_changes() -> None:
    """An unchanged result sends the very same request object."""
    request = request_of([prompt("hi")])
    assert request is compaction(KeepLastTurn()).before_model(request, SessionState())


def test_compaction_replaces_the_messages_only() -> None:
    """A changed result replaces the messages; everything else of the request stays."""
    request = ModelRequest(
        model="m", messages=tuple(conversation_of(3)), system="sys", max_tokens=77
    )
    new = compaction(KeepLastTurn()).before_model(request, SessionState())
    assert ("m", "sys", 77, 2) == (new.model, new.system, new.max_tokens, len(new.messages))


def test_compaction_refuses_a_non_compactor() -> None:
    """compaction() needs a Compactor."""
    with pytest.raises(InvalidArgumentError):
        compaction(object())  # type: ignore[arg-type]


def test_agent_sends_compacted_messages_and_logs_everything(tmp_path: Path) -> None:
    """The provider sees the compacted view; the session log keeps every message."""
    provider = scripted([reply("one"), reply("two"), reply("three")])
    cp = memory_checkpointer()
    with create_agent(
        model=provider,
        model_name="m",
        tools=[],
        checkpointer=cp,
        workdir=tmp_path,
        use=[compaction(KeepLastTurn())],
    ) as agent:
        for text_ in ("first", "second", "third"):
            agent.send(text_)
        logged = conversation(fold(cp.read(agent.session_id)))
    assert [["first", "third"]] == [
        [b.text for b in m.content if type(b) is TextBlock] for m in provider.requests[2].messages
    ]
    assert ["first", "one", "second", "two", "third", "three"] == [
        message_text(m.content) for m in logged
    ]


def test_agent_passes_the_last_response_usage_to_the_compactor(tmp_path: Path) -> None:
    """The compactor gets the usage of the session's previous model response."""
    used = Usage(input_tokens=1234, cache_read_input_tokens=5)
    provider = scripted([reply("one", used), reply("two")])
    compactor = KeepLastTurn()
    with create_agent(
        model=provider, model_name="m", tools=[], workdir=tmp_path, use=[compaction(compactor)]
    ) as agent:
        agent.send("first")
        agent.send("second")
    assert [None, used] == compactor.usages


def test_agent_with_llm_compactor_sends_a_summary(tmp_path: Path) -> None:
    """With llm_compactor, later requests carry the summary instead of the older turns."""
    long = "a long answer " * 40
    provider = scripted([reply(f"{long}1"), reply(f"{long}2"), reply(f"{long}3")])
    summarizer = scripted([reply("summary A"), reply("summary B")])
    compactor = llm_compactor(
        model=summarizer, model_name="s", token_threshold=0, keep_tail_turns=1
    )
    cp = memory_checkpointer()
    with create_agent(
        model=provider,
        model_name="m",
        tools=[],
        checkpointer=cp,
        workdir=tmp_path,
        use=[compaction(compactor)],
    ) as agent:
        for text_ in ("first", "second", "third"):
            agent.send(text_)
        logged = conversation(fold(cp.read(agent.session_id)))
    (last,) = provider.requests[2].messages
    assert f"first\n{SUMMARY_HEADER}\nsummary B\nthird" == message_text(last.content)
    assert (2, 6) == (summarizer.calls, len(logged))


# -- trim_messages --------------------------------------------------------------------------------


def test_trim_empties_the_largest_tool_result_first() -> None:
    """Just over the target, only the largest tool result outside the last turn is emptied."""
    messages = [*turn(0, size=900), *turn(1, size=3000), *turn(2, size=600), *turn(3)]
    out, detail = trim_messages(messages, estimate_tokens(messages) - 100)
    assert "body1 " not in str(out)
    assert "body0 " in str(out)
    assert "body2 " in str(out)
    assert (len(messages), "emptied 1 tool result(s)") == (len(out), detail)


def test_trim_drops_the_oldest_turns_when_emptying_is_not_enough() -> None:
    """Then the oldest units go; the first prompt and the last turn stay, pairs stay whole."""
    messages = conversation_of(8)
    out, detail = trim_messages(messages, estimate_tokens(messages) // 5)
    first = message_text(out[0].content)
    assert first.startswith("task 0\n[liteagent: ")
    assert "dropped" in first
    assert "task 1" not in str(out)
    assert "task 6" in str(out)
    assert messages[-1] == out[-1]
    assert pairs_whole(out)
    assert "emptied 8 tool result(s); dropped" in detail


def test_trim_roles_alternate() -> None:
    """After dropping, no two consecutive messages share a role."""
    out, _ = trim_messages(conversation_of(8), 10)
    roles = [m.role for m in out]
    assert all(a != b for a, b in itertools.pairwise(roles))


def test_trim_keeps_a_single_turn_unchanged() -> None:
    """The first turn is also the last (a prompt, a call and its large result): nothing may be
    trimmed."""
    messages = turn(0, size=20_000)[:3]
    assert (tuple(messages), "") == trim_messages(messages, 10)


# -- reactive_compaction with a stub call -------------------------------------------------------


def test_reactive_retries_once_with_a_smaller_request() -> None:
    """One overflow: exactly two calls, the second smaller, and its response is returned."""
    sent, call = overflowing(1)
    response = reactive_compaction().wrap_model_call(request_of(conversation_of(8)), call)
    assert ("ok", 2) == (message_text(response.message.content), len(sent))
    assert estimate_tokens(sent[1].messages) < estimate_tokens(sent[0].messages)


def test_reactive_aims_below_the_reported_window() -> None:
    """The retried request shrinks by at least the reported overflow ratio."""
    sent, call = overflowing(1)
    reactive_compaction(floor_tokens=0).wrap_model_call(request_of(conversation_of(8)), call)
    assert estimate_tokens(sent[1].messages) <= 0.45 * estimate_tokens(sent[0].messages)


def test_reactive_does_not_loop() -> None:
    """Two overflows: the second propagates after exactly two calls."""
    sent, call = overflowing(5)
    with pytest.raises(ContextLimitError):
        reactive_compaction().wrap_model_call(request_of(conversation_of(8)), call)
    assert 2 == len(sent)


def test_reactive_reraises_when_nothing_can_be_trimmed() -> None:
    """A single-turn conversation cannot be trimmed: the error propagates after one call."""
    sent, call = overflowing(1)
    with pytest.raises(ContextLimitError):
        reactive_compaction().wrap_model_call(request_of(turn(0, size=50_000)[:3]), call)
    assert 1 == len(sent)


def test_reactive_leaves_other_errors_alone() -> None:
    """Errors other than a context overflow propagate without a retry."""
    sent: list[ModelRequest] = []

    def call(request: ModelRequest) -> ModelResponse:
        sent.append(request)
        raise ProviderUnavailableError("down")

    with pytest.raises(ProviderUnavailableError):
        reactive_compaction().wrap_model_call(request_of(conversation_of(4)), call)
    assert 1 == len(sent)


def test_reactive_refuses_a_negative_floor() -> None:
    """floor_tokens must be >= 0."""
    with pytest.raises(InvalidArgumentError):
        reactive_compaction(floor_tokens=-1)


# -- reactive_compaction with the real anthropic client -------------------------------------------


def test_reactive_recovers_against_the_fake_server() -> None:
    """One 400 overflow then a reply: two requests, the second smaller."""
    with FakeMessagesServer() as server, server.client() as client:
        server.add(context_overflow(tokens=40_000, maximum=20_000), message([text("fine")]))
        response = reactive_compaction().wrap_model_call(
            request_of(conversation_of(10)), AnthropicProvider(client, ()).complete
        )
        sizes = [len(r.raw_body) for r in server.requests]
    assert "fine" == message_text(response.message.content)
    assert 2 == len(sizes)
    assert sizes[1] < sizes[0]


def test_reactive_gives_up_after_two_overflows_against_the_fake_server() -> None:
    """Two overflows: ContextOverflowError after exactly two requests."""
    with FakeMessagesServer() as server, server.client() as client:
        server.add(context_overflow(), context_overflow(), message([text("never")]))
        with pytest.raises(ContextOverflowError):
            reactive_compaction().wrap_model_call(
                request_of(conversation_of(10)), AnthropicProvider(client, ()).complete
            )
        assert (2, 1) == (len(server.requests), server.pending)


def test_agent_recovers_from_an_overflow_in_a_long_conversation(tmp_path: Path) -> None:
    """An agent with reactive_compaction answers after an overflow; the log keeps it all."""
    long = "an answer with some length " * 30
    cp = memory_checkpointer()
    with FakeMessagesServer() as server, server.client() as client:
        server.add(*[message([text(f"{long}{i}")]) for i in range(5)])
        server.add(context_overflow(tokens=30_000, maximum=10_000), message([text("last")]))
        with create_agent(
            model=AnthropicProvider(client, ()),
            model_name="m",
            tools=[],
            checkpointer=cp,
            workdir=tmp_path,
            use=[reactive_compaction(floor_tokens=0)],
        ) as agent:
            for i in range(5):
                agent.send(f"question {i}")
            result = agent.send("final question")
            logged = conversation(fold(cp.read(agent.session_id)))
        sizes = [len(r.body["messages"]) for r in server.requests]
    assert "last" == result.text
    assert [1, 3, 5, 7, 9, 11] == sizes[:6]
    assert 7 == len(sizes)
    assert sizes[6] < 11
    assert 12 == len(logged)


class TokenRecorder(Compactor):
    """A compactor recording the cancel token each call gets."""

    def __init__(self) -> None:
        self.tokens: list[CancelToken | None] = []

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
        *,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        self.tokens.append(cancel)
        before = estimate_tokens(messages)
        return CompactResult(
            messages=tuple(messages), changed=False, tokens_before=before, tokens_after=before
        )


def test_the_compaction_middleware_passes_the_turns_cancel_token(tmp_path: Path) -> None:
    """compaction(compactor) runs the compactor with the turn's cancel token, so a cancelled
    turn stops a summarizer's call too."""
    recorder = TokenRecorder()
    token = CancelToken()
    with create_agent(
        model=scripted([AssistantMessage(content=(TextBlock("ok"),))]),
        model_name="m",
        workdir=tmp_path,
        tools=[],
        use=[compaction(recorder)],
    ) as agent:
        agent.send("go", cancel=token)
    assert [token] == recorder.tokens
