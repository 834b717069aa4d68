"""A failed turn never wedges its session: the prompt after a refused or failed turn starts a
turn of its own, on the same session, and every request the model receives is one the Messages
API accepts. Randomized: failing and succeeding turns interleaved on one session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _turn_support import (
    FailingStore,
    PlannedModel,
    Tokens,
    all_tools,
    as_checkpointer,
    dump,
    events_of,
    reply,
    use,
    wire_problems,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liteagent.actors._turn import TurnFailedError
from liteagent.context import (
    ContextBudgetError,
    default_compactor,
    micro_pass,
    verify_replay,
)
from liteagent.eventlog import CancelToken, fold, memory_checkpointer
from liteagent.eventlog.errors import LiteAgentError, OperationCancelledError, StorageIOError
from liteagent.eventlog.types import AssistantMessage, ContextStatus, TextBlock, TurnAborted
from liteagent.providers import (
    AnthropicProvider,
    ContextOverflowError,
    ProviderRequestError,
    ProviderStreamError,
    replay,
    scripted,
)
from liteagent.providers.testing import (
    FakeMessagesServer,
    dropped_stream,
    error_response,
    message,
    text,
    tool_use,
)
from liteagent.sdk import create_agent, create_lite_agent


def test_a_refused_turn_does_not_wedge_the_session(tmp_path: Path) -> None:
    """After a turn refused for its size (a 12,000-character tool result in a 3,000-token
    budget), the next prompts start turns of their own and are answered, on the same session;
    the refused step is left out of their views."""
    provider = scripted([use("dump"), reply("ok"), reply("hi")])
    cp = memory_checkpointer()
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[dump],
        checkpointer=cp,
        context={"budget_tokens": 3000},
    ) as agent:
        with pytest.raises(ContextBudgetError):
            agent.send("dump it")
        assert "ok" == agent.send("just say ok").text
        assert "hi" == agent.send("hello?").text
        events = list(cp.read(agent.session_id))
    assert 3 == provider.calls
    last = provider.requests[-1].messages
    assert TextBlock("hello?") == last[-1].content[-1]
    assert all("x" * 12_000 not in repr(m) for m in last)
    assert verify_replay(events).ok


def test_the_refused_step_becomes_an_old_turn_closed_by_a_notice(tmp_path: Path) -> None:
    """The abort record's notice closes the refused turn (an assistant message in the
    conversation), so the next prompt is a message of its own, not part of the tool results."""
    provider = scripted([use("dump"), reply("ok")])
    cp = memory_checkpointer()
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[dump],
        checkpointer=cp,
        context={"budget_tokens": 3000},
    ) as agent:
        with pytest.raises(ContextBudgetError):
            agent.send("dump it")
        state = fold(cp.read(agent.session_id))
        agent.send("just say ok")
    aborted = [e for e in events_of(cp, agent.session_id) if isinstance(e, TurnAborted)]
    assert 1 == len(aborted)
    assert "ContextBudgetError" in str(aborted[0].notice)
    assert ("assistant", False) == (state.entries[-1].message.role, state.turn_open)


def test_compact_after_a_refused_turn_shrinks_the_refused_step(tmp_path: Path) -> None:
    """agent.compact() after a refused turn has something to do (the refused step is an old
    turn now, whose tool result a compactor may clear), and the session goes on from its
    result."""
    provider = scripted([use("dump"), reply("ok")])
    cp = memory_checkpointer()
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[dump],
        checkpointer=cp,
        context={"budget_tokens": 3000},
        compactor=default_compactor([micro_pass(keep_recent=0)]),
    ) as agent:
        with pytest.raises(ContextBudgetError):
            agent.send("dump it")
        stats = agent.compact()
        assert "ok" == agent.send("just say ok").text
    assert (True, True) == (stats.changed, stats.after < stats.before)


def test_a_turn_cut_by_max_turns_is_closed(tmp_path: Path) -> None:
    """A turn stopped by max_turns with its last tool results unanswered is closed, so the
    next prompt does not join those results."""
    provider = scripted([use("echo"), use("echo"), reply("fresh")])
    cp = memory_checkpointer()
    with create_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=all_tools(),
        checkpointer=cp,
        max_turns=2,
    ) as agent:
        assert "max_turns" == agent.send("loop").stop_reason
        assert not fold(cp.read(agent.session_id)).turn_open
        assert "fresh" == agent.send("next").text
    assert [TextBlock("next")] == list(provider.requests[-1].messages[-1].content)


# -- randomized: failing and succeeding turns on one session --------------------------------------

KINDS = [
    "text",
    "tool",
    "provider_error",
    "foreign_model_error",
    "tool_then_error",
    "huge",
    "tool_raises",
    "cancel_in_tool",
    "cancel_mid_stream",
    "max_turns",
    "unstorable",
    "store_fails",
    "store_fails_after_write",
    "store_fails_foreign",
    "middleware_fails",
    "overflow",
    "model_base_exception",
    "empty_reply",
    "blank_reply",
]


class Switch:
    """Middleware whose before_model hook raises when armed."""

    def __init__(self) -> None:
        self.armed = False

    def before_model(self, request: Any, state: Any) -> Any:
        if self.armed:
            self.armed = False
            raise RuntimeError("middleware bug")
        return request


def _plan(
    kind: str,
    i: int,
    *,
    model: PlannedModel,
    tokens: Tokens,
    store: FailingStore,
    switch: Switch,
    engine: bool,
) -> type[BaseException] | None:
    """Set up turn ``i`` of ``kind``; return the exception ``send`` must raise (None: none)."""
    done = reply(f"done {i}")
    plans: dict[str, tuple[list[Any], type[BaseException] | None]] = {
        "text": ([done], None),
        "tool": ([use("echo", text=f"t{i}"), done], None),
        "provider_error": ([ProviderStreamError("stream broke")], ProviderStreamError),
        "foreign_model_error": ([RuntimeError("sdk bug")], TurnFailedError),
        "tool_then_error": ([use("echo"), ProviderStreamError("broke")], ProviderStreamError),
        "huge": (([use("dump")], ContextBudgetError) if engine else ([use("dump"), done], None)),
        "tool_raises": (
            [
                use("raising", kind=["runtime", "keyboard", "exit", "custom", "generator"][i % 5]),
                done,
            ],
            None,
        ),
        "cancel_in_tool": ([use("cancel_me")], OperationCancelledError),
        "cancel_mid_stream": ([tokens.cancelling(done)], OperationCancelledError),
        "max_turns": ([use("echo"), use("echo"), use("echo")], None),
        "unstorable": ([use("echo", text=2**64 + i), done], None),
        "store_fails": ([done], StorageIOError),
        "store_fails_after_write": ([done], StorageIOError),
        "store_fails_foreign": ([done], TurnFailedError),
        "middleware_fails": ([], TurnFailedError),
        "overflow": (
            [
                ContextOverflowError("prompt is too long"),
                ContextOverflowError("prompt is too long"),
            ],
            ContextOverflowError,
        ),
        "model_base_exception": ([KeyboardInterrupt()], TurnFailedError),
        "empty_reply": ([AssistantMessage(content=(), stop_reason="end_turn")], None),
        "blank_reply": ([AssistantMessage(content=(TextBlock(" "), TextBlock("")))], None),
    }
    actions, expected = plans[kind]
    model.set_plan(*actions)
    if kind.startswith("store_fails"):
        error = (
            OSError(5, "disk on fire")
            if kind == "store_fails_foreign"
            else StorageIOError("disk on fire")
        )
        store.arm(error, after=1, written=kind == "store_fails_after_write")
    switch.armed = kind == "middleware_fails"
    return expected


def _run_session(kinds: list[str], tmp_path: Path, *, engine: bool = True) -> None:
    model = PlannedModel()
    tokens = Tokens()
    store = FailingStore()
    switch = Switch()
    cp = as_checkpointer(store)
    with create_agent(
        model=model.provider,
        model_name="m",
        workdir=tmp_path,
        tools=all_tools(),
        use=[switch],
        checkpointer=cp,
        max_turns=3,
        context={"budget_tokens": 3000} if engine else False,
    ) as agent:
        sid = agent.session_id
        for i, kind in enumerate([*kinds, "text"]):
            expected = _plan(
                kind, i, model=model, tokens=tokens, store=store, switch=switch, engine=engine
            )
            cancel = tokens.fresh()
            if expected is None:
                result = agent.send(f"prompt {i}: {kind}", cancel=cancel)
                if kind not in ("max_turns", "empty_reply", "blank_reply"):
                    assert f"done {i}" == result.text, kind
            else:
                with pytest.raises(expected) as info:
                    agent.send(f"prompt {i}: {kind}", cancel=cancel)
                assert isinstance(info.value, LiteAgentError)
                last = list(events_of(cp, sid))[-1]
                assert isinstance(last, TurnAborted), kind
            state = fold(cp.read(sid))
            assert ((), False) == (state.open_tool_calls, state.turn_open), kind
        events = list(cp.read(sid))
    assert [] == model.problems
    assert verify_replay(events).ok
    statuses = [e.body for e in events if isinstance(e.body, ContextStatus)]
    assert engine == bool(statuses)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=8), engine=st.booleans())
def test_failing_and_succeeding_turns_interleave_on_one_session(
    kinds: list[str], engine: bool, tmp_path: Path
) -> None:
    """Any sequence of failing turns (provider errors, foreign exceptions, budget refusals,
    cancellations, store failures, failing middleware, tools raising BaseExceptions, inputs the
    log cannot store, max_turns): each failure raises a liteagent error and ends with a
    turn-aborted record, the log folds with no open turn, the next good turn succeeds, every
    request is one the Messages API accepts, and every recorded request verifies (with the
    context engine on or off)."""
    _run_session(kinds, tmp_path, engine=engine)


@pytest.mark.soak
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=16), engine=st.booleans())
def test_failing_and_succeeding_turns_interleave_on_one_session_soak(
    kinds: list[str], engine: bool, tmp_path: Path
) -> None:
    """The randomized interleaving above, longer and more often."""
    _run_session(kinds, tmp_path, engine=engine)


@pytest.mark.parametrize("engine", [True, False], ids=["engine", "raw"])
def test_every_kind_of_failure_is_followed_by_a_good_turn(tmp_path: Path, engine: bool) -> None:
    """Each failure kind once, each followed by a good turn, in one session."""
    _run_session([k for kind in KINDS for k in (kind, "text")], tmp_path, engine=engine)


def test_a_cancelled_send_before_it_starts_writes_nothing(tmp_path: Path) -> None:
    """A send whose token already fired raises OperationCancelledError and writes nothing."""
    cp = memory_checkpointer()
    token = CancelToken()
    token.cancel("no")
    with create_agent(
        model=scripted([]), model_name="m", workdir=tmp_path, tools=[], checkpointer=cp
    ) as agent:
        with pytest.raises(OperationCancelledError):
            agent.send("go", cancel=token)
        assert [] == list(cp.read(agent.session_id))


# -- the same against the fake server, through the real client -------------------------------------

WIRE_KINDS = [
    "text",
    "tool",
    "api_error",
    "drop",
    "unstorable",
    "surrogate_text",
    "empty",
    "blank",
    "huge",
]


def _serve(kind: str, i: int, server: FakeMessagesServer) -> type[BaseException] | None:
    """Queue the answers of turn ``i`` of ``kind``; return the error ``send`` must raise."""
    done = message([text(f"done {i}")])
    if kind == "text":
        server.add(done)
    elif kind == "tool":
        server.add(
            message([tool_use(f"toolu_t{i}", "echo", {"text": "a"})], stop_reason="tool_use"), done
        )
    elif kind == "api_error":
        server.add(error_response(400, "invalid_request_error", "bad"))
        return ProviderRequestError
    elif kind == "drop":
        server.add(dropped_stream(done))
        return ProviderStreamError
    elif kind == "unstorable":
        server.add(
            message([tool_use(f"toolu_u{i}", "echo", {"text": 2**64 + i})], stop_reason="tool_use"),
            done,
        )
    elif kind == "surrogate_text":
        server.add(message([text("half \ud800 a pair")]))
    elif kind == "empty":
        server.add(message([]))
    elif kind == "blank":
        server.add(message([text(""), text(" ")]))
    else:
        server.add(message([tool_use(f"toolu_d{i}", "dump", {})], stop_reason="tool_use"))
        return ContextBudgetError
    return None


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(WIRE_KINDS), min_size=1, max_size=6))
def test_the_wire_stays_valid_after_failures_with_the_real_client(
    kinds: list[str], tmp_path: Path
) -> None:
    """Against the fake server through the real anthropic client: after API errors, dropped
    streams, budget refusals, inputs beyond 64 bits, lone surrogates, empty and blank answers,
    every request on the wire is one the Messages API accepts, and the next turn works."""
    cp = memory_checkpointer()
    with (
        FakeMessagesServer() as server,
        AnthropicProvider(server.client(max_retries=0), ()) as model,
        create_agent(
            model=model,
            model_name="m",
            workdir=tmp_path,
            tools=all_tools(),
            checkpointer=cp,
            context={"budget_tokens": 3000, "native_edits": False},
        ) as agent,
    ):
        for i, kind in enumerate([*kinds, "text"]):
            expected = _serve(kind, i, server)
            if expected is None:
                agent.send(f"prompt {i}")
            else:
                with pytest.raises(expected):
                    agent.send(f"prompt {i}")
            assert 0 == server.pending, kind
        bodies = [r.body["messages"] for r in server.requests]
    assert [] == [p for body in bodies for p in wire_problems(body)]
    assert verify_replay(cp.read(agent.session_id)).ok


def test_a_session_with_a_stopped_turn_replays_strictly(tmp_path: Path) -> None:
    """The replay provider expects, for the answer after a stopped turn, only the inputs after
    the turn's closing notice (which the conversation shows as an assistant message), so the
    recorded session replays in strict mode."""
    cp = memory_checkpointer()
    with create_agent(
        model=scripted([ProviderStreamError("broke"), reply("two done")]),
        model_name="m",
        workdir=tmp_path,
        tools=[],
        checkpointer=cp,
    ) as agent:
        with pytest.raises(ProviderStreamError):
            agent.send("one")
        agent.send("two")
        recorded = list(cp.read(agent.session_id))
    again = replay(recorded)
    with create_agent(
        model=again, model_name="m", workdir=tmp_path, tools=[], checkpointer=memory_checkpointer()
    ) as agent:
        assert "two done" == agent.send("two").text
    again.assert_all_used()
