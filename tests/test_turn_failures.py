"""Every exception inside a turn ends with a recorded turn-aborted event and a log that folds,
and reaches the caller as a liteagent error; what the model returned is stored losslessly even
when the log cannot hold it natively (an integer beyond 64 bits), and such a tool call gets an
error result."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _turn_support import (
    CustomStop,
    FailingStore,
    Raising,
    all_tools,
    as_checkpointer,
    echo,
    events_of,
    reply,
    use,
)

from liteagent.actors._turn import TurnFailedError
from liteagent.context import verify_replay
from liteagent.eventlog import (
    CancelToken,
    file_checkpointer,
    fold,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog._messages import message_text
from liteagent.eventlog.errors import LiteAgentError, StorageIOError
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    ContentArchived,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResult,
    ToolUseBlock,
    TurnAborted,
)
from liteagent.providers import AnthropicProvider, ModelProvider, scripted
from liteagent.providers._contract import ResponseComplete, StreamEvent, TextDelta
from liteagent.providers.testing import FakeMessagesServer, message, text, tool_use
from liteagent.sdk import create_agent, create_lite_agent
from liteagent.tools import Tool, ToolContext, ToolOutput, tool

BIG = 2**64


def _results(cp: Any, sid: str) -> list[ToolResult]:
    return [e for e in events_of(cp, sid) if isinstance(e, ToolResult)]


def _assert_aborted_and_folds(cp: Any, sid: str) -> None:
    """The log ends with a turn-aborted record and folds with no open turn."""
    events = list(cp.read(sid))
    assert isinstance(events[-1].body, TurnAborted)
    state = fold(events)
    assert ((), False) == (state.open_tool_calls, state.turn_open)


# -- defect 6: an unencodable model output ------------------------------------------------------


def test_a_scripted_tool_input_beyond_64_bits_is_stored_and_answered_with_an_error(
    tmp_path: Path,
) -> None:
    """A tool input holding 2**64 neither kills the turn nor goes unrecorded: the reply is
    stored with the input as its exact JSON text, the tool gets an error result naming it, and
    the model's next answer ends the turn."""
    provider = scripted([use("echo", text=BIG), reply("understood")])
    cp = memory_checkpointer()
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[echo], checkpointer=cp
    ) as agent:
        assert "understood" == agent.send("go").text
        sid = agent.session_id
    replies = [e for e in events_of(cp, sid) if isinstance(e, AssistantMessage)]
    call = replies[0].content[0]
    assert isinstance(call, ToolUseBlock)
    assert ({}, {"text": BIG}) == (call.input, json.loads(str(call.input_json)))
    [result] = _results(cp, sid)
    assert result.block.is_error is True
    assert str(BIG) in str(result.block.content)
    assert verify_replay(cp.read(sid)).ok


def test_a_tool_input_beyond_64_bits_from_the_real_client_is_stored(tmp_path: Path) -> None:
    """The same through the real anthropic client against the fake server: the streamed
    input JSON with 2**64 is kept exactly, the tool gets an error result, and the next request
    sends the exact value back."""
    cp = memory_checkpointer()
    with FakeMessagesServer() as server:
        server.add(message([tool_use("toolu_big", "echo", {"text": BIG})], stop_reason="tool_use"))
        server.add(message([text("understood")]))
        with (
            AnthropicProvider(server.client(), ()) as model,
            create_agent(
                model=model, model_name="m", workdir=tmp_path, tools=[echo], checkpointer=cp
            ) as agent,
        ):
            assert "understood" == agent.send("go").text
            sid = agent.session_id
        sent = server.requests[1].body["messages"]
    assert {"text": BIG} == sent[1]["content"][0]["input"]
    assert "tool_result" == sent[2]["content"][0]["type"]
    assert sent[2]["content"][0]["is_error"] is True
    assert [True] == [r.block.is_error for r in _results(cp, sid)]


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_tool_input_nested_too_deeply_aborts_the_turn_and_the_session_goes_on(
    tmp_path: Path, backend: str
) -> None:
    """A model answer whose tool input nests 400 levels (beyond what every read of the log
    could decode): the turn ends with a LiteAgentError saying so, nothing of the answer is
    stored, the tool never runs, and the next turn goes on."""
    deep: Any = 1
    for _ in range(400):
        deep = {"a": deep}
    provider = scripted(
        [
            AssistantMessage(
                content=(ToolUseBlock("t1", "echo", {"text": deep}),), stop_reason="tool_use"
            ),
            reply("after"),
        ]
    )
    cp = (
        file_checkpointer(tmp_path / "s")
        if backend == "file"
        else sqlite_checkpointer(tmp_path / "s.db")
    )
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[echo], checkpointer=cp
    ) as agent:
        with pytest.raises(LiteAgentError, match="nested more than 240 levels"):
            agent.send("go")
        sid = agent.session_id
        _assert_aborted_and_folds(cp, sid)
        assert "after" == agent.send("again").text
    assert [] == _results(cp, sid)
    assert not any(
        isinstance(e, AssistantMessage) and e.content[0] != reply("after").content[0]
        for e in events_of(cp, sid)
    )
    assert verify_replay(cp.read(sid)).ok


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_tool_input_holding_nan_is_stored_and_the_session_goes_on(
    tmp_path: Path, backend: str
) -> None:
    """A tool input holding NaN or an infinity (Python data a model's input can become) is
    stored as it is, the tool runs, and the next turns go on: the session is never wedged."""
    nan_input = {"n": float("nan"), "big": float("inf")}

    @tool
    def measure(n: float, big: float) -> str:
        """Name the numbers."""
        return f"{n} {big}"

    provider = scripted(
        [
            AssistantMessage(
                content=(ToolUseBlock("t1", "measure", nan_input),), stop_reason="tool_use"
            ),
            reply("first"),
            reply("second"),
        ]
    )
    cp = (
        file_checkpointer(tmp_path / "s")
        if backend == "file"
        else sqlite_checkpointer(tmp_path / "s.db")
    )
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[measure], checkpointer=cp
    ) as agent:
        assert "first" == agent.send("go").text
        assert "second" == agent.send("again").text
        sid = agent.session_id
    call = next(e for e in events_of(cp, sid) if isinstance(e, AssistantMessage)).content[0]
    assert isinstance(call, ToolUseBlock)
    assert float("inf") == call.input["big"]
    assert math.isnan(call.input["n"])
    assert [("nan inf", False)] == [(r.block.content, r.block.is_error) for r in _results(cp, sid)]
    assert verify_replay(cp.read(sid)).ok


def test_a_lone_surrogate_in_the_models_text_is_stored_losslessly(tmp_path: Path) -> None:
    """A text block holding a lone surrogate is stored as its exact JSON; the next request,
    which the SDK could not encode with it, carries U+FFFD in its place, and the session goes
    on."""
    cp = memory_checkpointer()
    with FakeMessagesServer() as server:
        server.add(message([text("a\ud800b")]))
        server.add(message([text("next")]))
        with (
            AnthropicProvider(server.client(), ()) as model,
            create_agent(
                model=model, model_name="m", workdir=tmp_path, tools=[], checkpointer=cp
            ) as agent,
        ):
            agent.send("go")
            assert "next" == agent.send("again").text
        sent = server.requests[1].body["messages"]
    assert [{"type": "text", "text": "a\ufffdb"}] == sent[1]["content"]
    stored = next(e for e in events_of(cp, agent.session_id) if isinstance(e, AssistantMessage))
    assert {"type": "text", "text": "a\ud800b"} == json.loads(str(stored.content[0].json))  # type: ignore[union-attr]


# -- every stage of the turn loop -----------------------------------------------------------------


class Hook:
    """Middleware raising ``error`` from the hook named ``where``."""

    def __init__(self, where: str, error: BaseException) -> None:
        self.where, self.error = where, error

    def before_model(self, request: ModelRequest, state: Any) -> ModelRequest:
        if self.where == "before":
            raise self.error
        return request

    def wrap_model_call(self, request: ModelRequest, call: Any) -> ModelResponse:
        if self.where == "wrap":
            raise self.error
        response: ModelResponse = call(request)
        return response


@pytest.mark.parametrize("where", ["before", "wrap"])
@pytest.mark.parametrize(
    "error",
    [RuntimeError("bug"), KeyboardInterrupt(), CustomStop("x")],
    ids=["runtime", "keyboard", "custom"],
)
def test_failing_middleware_aborts_the_turn_as_turn_failed(
    tmp_path: Path, where: str, error: BaseException
) -> None:
    """Middleware raising anything (BaseException included) aborts the turn: the log records
    it and folds, the caller gets TurnFailedError with the original as its cause, and the next
    send works."""
    cp = memory_checkpointer()
    hook = Hook(where, error)
    with create_agent(
        model=scripted([reply("fine")]),
        model_name="m",
        workdir=tmp_path,
        tools=[],
        use=[hook],
        checkpointer=cp,
    ) as agent:
        with pytest.raises(TurnFailedError) as info:
            agent.send("go")
        assert error is info.value.__cause__
        _assert_aborted_and_folds(cp, agent.session_id)
        hook.where = "nowhere"
        assert "fine" == agent.send("again").text


class BreakingModel(ModelProvider):
    """A provider that streams a delta, then raises ``error`` (the first call only)."""

    def __init__(self, error: BaseException) -> None:
        self.error: BaseException | None = error

    def stream(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        yield TextDelta(0, "partial")
        error, self.error = self.error, None
        if error is not None:
            raise error
        yield ResponseComplete(ModelResponse(message=reply("recovered")))


@pytest.mark.parametrize(
    "error",
    [ValueError("bad json"), GeneratorExit(), SystemExit(2)],
    ids=["value", "generator-exit", "system-exit"],
)
def test_a_provider_raising_anything_mid_stream_aborts_the_turn(
    tmp_path: Path, error: BaseException
) -> None:
    """A provider raising a foreign exception (or a BaseException) after streaming a delta:
    TurnFailedError, a recorded abort, and the next send works."""
    cp = memory_checkpointer()
    with create_agent(
        model=BreakingModel(error), model_name="m", workdir=tmp_path, tools=[], checkpointer=cp
    ) as agent:
        with pytest.raises(TurnFailedError):
            agent.send("go")
        _assert_aborted_and_folds(cp, agent.session_id)
        assert "recovered" == agent.send("again").text


@pytest.mark.parametrize(("after", "stage"), [(1, "the reply"), (2, "the tool results")])
@pytest.mark.parametrize("written", [False, True], ids=["not-written", "written"])
@pytest.mark.parametrize(
    "error", [StorageIOError("disk"), OSError(28, "full")], ids=["storage-error", "os-error"]
)
def test_a_store_failing_on_an_append_aborts_the_turn(
    tmp_path: Path, after: int, stage: str, written: bool, error: BaseException
) -> None:
    """The store failing the append of the reply or of the tool results (before or after it
    wrote): the caller gets a liteagent error, the abort is recorded, the log folds, and the
    next send works."""
    store = FailingStore()
    cp = as_checkpointer(store)
    provider = scripted([use("echo", text="a"), reply("fine")])
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[echo], checkpointer=cp
    ) as agent:
        store.arm(error, after=after, written=written)
        with pytest.raises(LiteAgentError) as info:
            agent.send("go")
        assert isinstance(info.value, StorageIOError) or error is info.value.__cause__, stage
        _assert_aborted_and_folds(cp, agent.session_id)
        assert "fine" == agent.send("again").text


@pytest.mark.parametrize("written", [False, True], ids=["not-written", "written"])
def test_a_store_failing_on_the_prompt_leaves_no_open_turn(tmp_path: Path, written: bool) -> None:
    """The append of the prompt itself failing: a foreign error reaches the caller as
    TurnFailedError; nothing stays open (a prompt the store wrote after all is closed by an
    abort record), and the next send works."""
    store = FailingStore()
    cp = as_checkpointer(store)
    with create_agent(
        model=scripted([reply("fine")]), model_name="m", workdir=tmp_path, tools=[], checkpointer=cp
    ) as agent:
        store.arm(OSError(5, "io"), written=written)
        with pytest.raises(TurnFailedError):
            agent.send("go")
        kinds = [e.kind for e in cp.read(agent.session_id)]
        assert (["session_started", "user_prompt", "turn_aborted"] if written else []) == kinds
        assert "fine" == agent.send("again").text


def test_a_failing_blob_store_while_archiving_aborts_the_turn(tmp_path: Path) -> None:
    """The blob store raising a foreign exception while a large result is archived: the turn
    aborts (recorded, the log folds) and the next send works; an OSError there only skips the
    archive."""
    store = FailingStore()
    cp = as_checkpointer(store)
    provider = scripted([use("dump"), reply("after os error"), use("dump"), reply("fine")])
    with create_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=all_tools(),
        checkpointer=cp,
        context={"archive_threshold_bytes": 1000},
    ) as agent:
        store.failing_blobs.error = OSError(5, "io")
        assert "after os error" == agent.send("dump").text
        assert not [e for e in events_of(cp, agent.session_id) if isinstance(e, ContentArchived)]
        store.failing_blobs.error = RuntimeError("blob bug")
        with pytest.raises(TurnFailedError):
            agent.send("dump again")
        _assert_aborted_and_folds(cp, agent.session_id)
        assert "fine" == agent.send("go on").text


class Loop(Tool):
    """A tool declaring a path that cannot be snapshotted (a symlink loop)."""

    name = "loop"
    description = "Change a file."
    ran = False

    @property
    def input_schema(self) -> dict[str, Any]:
        return {"type": "object"}

    def changed_paths(self, input: Any, ctx: ToolContext) -> list[Path]:
        return [ctx.workdir / "loop"]

    def run(self, input: Any, ctx: ToolContext) -> ToolOutput:
        Loop.ran = True
        return ToolOutput("changed")


def test_a_snapshot_that_fails_keeps_the_tool_from_running(tmp_path: Path) -> None:
    """When the pre-image of a declared path cannot be taken (a symlink loop), the tool does
    not run and its call gets an error result; the turn goes on."""
    os.symlink("loop", tmp_path / "loop")
    cp = memory_checkpointer()
    provider = scripted([use("loop"), reply("noted")])
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[Loop()], checkpointer=cp
    ) as agent:
        assert "noted" == agent.send("go").text
        [result] = _results(cp, agent.session_id)
    assert (True, False) == (result.block.is_error, Loop.ran)
    assert "could not be snapshotted" in str(result.block.content)


def test_a_change_to_a_file_whose_name_is_not_utf8_is_refused_plainly(tmp_path: Path) -> None:
    """edit_file on a file whose name is not UTF-8 (given as glob prints it): the snapshot
    that makes a restore undo it cannot record the name, so the tool does not run and says
    so; the file is as it was and the turn goes on. Reading it works."""
    name = os.fsdecode(b"caf\xe9.txt")
    (tmp_path / name).write_text("precious\n")
    cp = memory_checkpointer()
    provider = scripted(
        [
            use("edit_file", path="caf\\udce9.txt", old_string="precious", new_string="gone"),
            use("read_file", path="caf\\udce9.txt"),
            reply("noted"),
        ]
    )
    with create_lite_agent(
        model=provider, model_name="m", workdir=tmp_path, checkpointer=cp
    ) as agent:
        assert "noted" == agent.send("go").text
        edit, read = _results(cp, agent.session_id)
    assert edit.block.is_error
    assert "is not UTF-8" in str(edit.block.content)
    assert not read.block.is_error
    assert "precious" in str(read.block.content)
    assert "precious\n" == (tmp_path / name).read_text()


@pytest.mark.parametrize("kind", sorted(Raising.errors))
def test_a_tool_raising_any_base_exception_is_an_error_result(tmp_path: Path, kind: str) -> None:
    """A tool raising anything (KeyboardInterrupt, SystemExit, GeneratorExit, an unknown
    BaseException) gives an is_error result the model reads; the turn goes on."""
    cp = memory_checkpointer()
    provider = scripted([use("raising", kind=kind), reply("noted")])
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[Raising()], checkpointer=cp
    ) as agent:
        assert "noted" == agent.send("go").text
        [result] = _results(cp, agent.session_id)
    assert result.block.is_error is True
    assert "the tool failed" in str(result.block.content)


class Odd(Tool):
    """A tool returning ``value`` instead of a proper ToolOutput."""

    name = "odd"
    description = "Return something odd."

    def __init__(self, value: Any) -> None:
        self.value = value

    @property
    def input_schema(self) -> dict[str, Any]:
        return {"type": "object"}

    def run(self, input: Any, ctx: ToolContext) -> Any:
        return self.value


@pytest.mark.parametrize(
    ("value", "is_error", "shown"),
    [
        ("plain str", True, "not a ToolOutput"),
        (None, True, "not a ToolOutput"),
        (ToolOutput(b"bytes"), True, "not text"),  # type: ignore[arg-type]
        (ToolOutput("lone \udcff surrogate"), False, "lone \ufffd surrogate"),
    ],
    ids=["str", "none", "bytes-content", "lone-surrogate"],
)
def test_a_tool_returning_what_the_log_cannot_store_gets_a_readable_result(
    tmp_path: Path, value: Any, is_error: bool, shown: str
) -> None:
    """A tool returning something other than a ToolOutput of text, or text with a lone
    surrogate (a file name decoded with surrogateescape), never kills the turn."""
    cp = memory_checkpointer()
    provider = scripted([use("odd"), reply("noted")])
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[Odd(value)], checkpointer=cp
    ) as agent:
        assert "noted" == agent.send("go").text
        [result] = _results(cp, agent.session_id)
    assert is_error is (result.block.is_error is True)
    assert shown in str(result.block.content)


def test_a_prompt_that_is_not_text_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """An empty, blank or lone-surrogate prompt reaching the session core is refused with a
    liteagent error and nothing is written (the Messages API refuses empty text blocks)."""
    from liteagent.actors import SessionConfig
    from liteagent.actors._turn import SessionCore
    from liteagent.eventlog.errors import InvalidArgumentError

    cp = memory_checkpointer()
    core = SessionCore(
        "s1",
        SessionConfig(checkpointer=cp, provider=scripted([]), model_name="m", workdir=tmp_path),
    )
    for bad in ["", "  \n", "x\ud800"]:
        with pytest.raises(InvalidArgumentError):
            core.send(bad, CancelToken(), None)
    assert 0 == cp.head("s1")


def test_a_reply_whose_tool_text_is_empty_is_not_sent_back_empty(tmp_path: Path) -> None:
    """A model answer holding an empty text block is stored as it came, and the next request
    leaves that block out (the API refuses empty text blocks)."""
    cp = memory_checkpointer()
    with FakeMessagesServer() as server:
        server.add(
            message([text(""), tool_use("toolu_1", "echo", {"text": "a"})], stop_reason="tool_use")
        )
        server.add(message([text("done")]))
        with (
            AnthropicProvider(server.client(), ()) as model,
            create_agent(
                model=model, model_name="m", workdir=tmp_path, tools=[echo], checkpointer=cp
            ) as agent,
        ):
            assert "done" == agent.send("go").text
        sent = server.requests[1].body["messages"][1]["content"]
    assert ["tool_use"] == [b["type"] for b in sent]
    stored = next(e for e in events_of(cp, agent.session_id) if isinstance(e, AssistantMessage))
    assert TextBlock("") == stored.content[0]


@tool
def later(ctx: ToolContext) -> str:
    """Start a background job whose description and output hold lone surrogates."""
    assert ctx.start_background is not None
    ctx.start_background("odd \udcff job", lambda _token: ToolOutput("out \ud800 put"))
    return "started"


def test_a_background_result_holding_lone_surrogates_is_recorded(tmp_path: Path) -> None:
    """A background task's description and output with lone surrogates are recorded (as
    U+FFFD) instead of being lost, and the next turn sees them."""
    cp = memory_checkpointer()
    provider = scripted([use("later"), reply("started"), reply("seen")])
    with create_agent(
        model=provider, model_name="m", workdir=tmp_path, tools=[later], checkpointer=cp
    ) as agent:
        agent.send("start it")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            isinstance(e, BackgroundCompleted) for e in events_of(cp, agent.session_id)
        ):
            time.sleep(0.01)
        done = [e for e in events_of(cp, agent.session_id) if isinstance(e, BackgroundCompleted)]
        assert "seen" == agent.send("and?").text
    assert ["out \ufffd put"] == [d.summary for d in done]
    assert "odd \ufffd job" in message_text(provider.requests[-1].messages[-1].content)
