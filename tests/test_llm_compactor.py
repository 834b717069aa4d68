"""llm_compactor: threshold, what the summarizer is sent, the shape of the result, chunked
(rolling) summaries within the window, remembered summaries, and the circuit breaker."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from liteagent.context import (
    Compactor,
    CompactResult,
    estimate_tokens,
    llm_compactor,
    run_pipeline,
    split_turns,
)
from liteagent.context._llm import SUMMARY_HEADER
from liteagent.eventlog import CancelToken, memory_checkpointer
from liteagent.eventlog._messages import message_text
from liteagent.eventlog.errors import InvalidArgumentError, OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from liteagent.providers import AnthropicProvider, ScriptedProvider, ScriptItem, scripted
from liteagent.providers.testing import FakeMessagesServer, message, stalled_stream, text
from liteagent.sdk import create_lite_agent


def prompt(text: str) -> Message:
    """A user prompt."""
    return Message("user", (TextBlock(text),))


def turn(n: int, size: int = 300, tag: str = "") -> list[Message]:
    """A turn: prompt, a read_file call, its result of ``size`` characters, a closing text."""
    call = f"toolu_{tag}{n}"
    return [
        prompt(f"task {tag}{n}"),
        Message("assistant", (ToolUseBlock(call, "read_file", {"path": f"file{tag}{n}.py"}),)),
        Message("user", (ToolResultBlock(call, f"body{tag}{n} " + "x" * size),)),
        Message("assistant", (TextBlock(f"done {tag}{n}"),)),
    ]


def conversation(turns: int, size: int = 300, tag: str = "") -> list[Message]:
    """``turns`` turns in a row."""
    return [m for n in range(turns) for m in turn(n, size, tag)]


def summary(text: str) -> AssistantMessage:
    """A summarizer reply."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def request_text(request: ModelRequest) -> str:
    """All text the summarizer request carries."""
    return "\n".join(message_text(m.content) for m in request.messages)


def window_size(request: ModelRequest) -> int:
    """What a request takes of the summarizer's window: estimated input plus max_tokens."""
    system = -(-len((request.system or "").encode()) // 3)
    return estimate_tokens(request.messages) + system + request.max_tokens


class _ClearResults:
    """Test stand-in pass: empties every tool result outside the last turn."""

    name = "clear_results"

    def __call__(self, messages: Sequence[Message]) -> tuple[list[Message], str]:
        last = split_turns(messages)[-1]
        cut = len(messages) - len(last)
        out = [
            Message(
                m.role,
                tuple(
                    ToolResultBlock(b.tool_use_id, "[cleared]") if type(b) is ToolResultBlock else b
                    for b in m.content
                ),
            )
            for m in messages[:cut]
        ]
        return [*out, *messages[cut:]], "cleared"


class StandInBase(Compactor):
    """A deterministic base compactor for these tests (the real ones live elsewhere)."""

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
    ) -> CompactResult:
        return run_pipeline(messages, [_ClearResults()])


def compactor(model: ScriptedProvider, **kw: object) -> Compactor:
    """An llm_compactor with a small threshold and the given overrides."""
    options: dict[str, object] = {"model_name": "summarizer", "token_threshold": 100}
    options.update(kw)
    return llm_compactor(model=model, **options)  # type: ignore[arg-type]


# -- the threshold ------------------------------------------------------------------------------


def test_below_threshold_returns_the_messages_without_a_call() -> None:
    """At or below the threshold nothing changes and the model is not called."""
    model = scripted([])
    messages = conversation(4)
    result = compactor(model, token_threshold=10_000).maybe_compact(messages)
    assert (tuple(messages), False, 0) == (result.messages, result.changed, model.calls)


def test_below_threshold_returns_the_base_result() -> None:
    """The base runs first; when its result fits, that result is returned."""
    messages = conversation(4)
    base = StandInBase().maybe_compact(messages)
    result = compactor(
        scripted([]), token_threshold=base.tokens_after, base=StandInBase()
    ).maybe_compact(messages)
    assert (base.messages, ("clear_results",)) == (
        result.messages,
        tuple(p.name for p in result.passes),
    )


def test_usage_larger_than_the_estimate_triggers_a_summary() -> None:
    """Reported usage (input + cache tokens) above the threshold counts even when the
    estimate is below it."""
    model = scripted([summary("S")])
    messages = conversation(4)
    usage = Usage(input_tokens=10, cache_read_input_tokens=50_000)
    compactor(model, token_threshold=10_000).maybe_compact(messages, usage=usage)
    assert 1 == model.calls


def test_above_threshold_replaces_older_turns_with_the_summary() -> None:
    """First prompt + summary (merged with the tail's first prompt) + the tail turns. The two
    tail turns are the last two agent steps: the prompt "task 4" with its tool call and result,
    and the final reply."""
    messages = conversation(5)
    result = compactor(scripted([summary("the summary")])).maybe_compact(messages)
    tail = messages[16:]
    expected = (
        Message(
            "user",
            (TextBlock("task 0"), TextBlock(f"{SUMMARY_HEADER}\nthe summary"), TextBlock("task 4")),
        ),
        *tail[1:],
    )
    assert expected == result.messages
    assert result.changed
    assert estimate_tokens(result.messages) == result.tokens_after < result.tokens_before


def test_roles_alternate_after_compaction() -> None:
    """No two consecutive messages of the result have the same role."""
    result = compactor(scripted([summary("S")]), keep_tail_turns=1).maybe_compact(conversation(6))
    roles = [m.role for m in result.messages]
    assert all(a != b for a, b in itertools.pairwise(roles))


def test_tool_pairs_stay_whole_and_the_last_turn_is_verbatim() -> None:
    """Every tool_use in the result has its tool_result and the last turn is unchanged."""
    messages = conversation(6)
    result = compactor(scripted([summary("S")])).maybe_compact(messages)
    blocks = [b for m in result.messages for b in m.content]
    uses = {b.id for b in blocks if type(b) is ToolUseBlock}
    results = {b.tool_use_id for b in blocks if type(b) is ToolResultBlock}
    assert uses == results
    assert tuple(messages[-3:]) == result.messages[-3:]


def test_a_conversation_within_the_tail_is_not_summarized() -> None:
    """With no more turns than keep_tail_turns there is nothing to summarize: no call."""
    model = scripted([])
    result = compactor(model, keep_tail_turns=3).maybe_compact(conversation(3, size=3000))
    assert (False, 0, "summarize") == (result.changed, model.calls, result.passes[-1].name)


# -- the summarizer request ---------------------------------------------------------------------


def test_summarizer_request_holds_the_older_turns_and_not_the_tail() -> None:
    """The request renders turns after the first prompt up to the tail, as one user message."""
    model = scripted([summary("S")])
    compactor(model).maybe_compact(conversation(5))
    (request,) = model.requests
    text = request_text(request)
    assert ["user"] == [m.role for m in request.messages]
    assert "read_file" in text
    assert '"path":"file1.py"' in text
    assert "done 0" in text
    assert "task 3" in text
    assert "body3 " in text
    assert "done 3" in text
    assert "task 0" not in text
    assert "task 4" not in text
    assert "file4.py" not in text


def test_summarizer_request_uses_the_model_name_and_summary_budget() -> None:
    """The request names model_name and asks for at most max_summary_tokens."""
    model = scripted([summary("S")])
    compactor(model, max_summary_tokens=777).maybe_compact(conversation(5))
    assert ("summarizer", 777) == (model.requests[0].model, model.requests[0].max_tokens)


def test_instructions_steer_the_summary() -> None:
    """The caller's instructions are part of the summarizer prompt."""
    model = scripted([summary("S")])
    compactor(model).maybe_compact(conversation(5), instructions="keep every file path")
    assert "keep every file path" in request_text(model.requests[0])


def test_custom_system_prompt_is_sent() -> None:
    """system_prompt replaces the summarizer's default system prompt."""
    model = scripted([summary("S")])
    compactor(model, system_prompt="be brief").maybe_compact(conversation(5))
    assert "be brief" == model.requests[0].system


# -- chunks ---------------------------------------------------------------------------------------


def numbered(count: int = 40) -> list[ScriptItem]:
    """Script items answering call k with the summary "summary-k"."""
    return [lambda request, k=k: summary(f"summary-{k}") for k in range(count)]


def test_history_larger_than_the_window_is_summarized_in_chunks() -> None:
    """Several calls, each within the window, together covering every older turn."""
    model = scripted(numbered())
    messages = conversation(20, size=1500)
    window = 2500
    compactor(model, summarizer_window_tokens=window, max_summary_tokens=200).maybe_compact(
        messages
    )
    requests = model.requests
    assert 1 < len(requests)
    assert all(window_size(r) <= window for r in requests)
    text = "\n".join(request_text(r) for r in requests)
    assert all(f"body{n} " in text for n in range(1, 18))


def test_chunks_roll_over_the_previous_summary() -> None:
    """Each chunk after the first carries the previous chunk's summary."""
    model = scripted(numbered())
    compactor(model, summarizer_window_tokens=2500, max_summary_tokens=200).maybe_compact(
        conversation(20, size=1500)
    )
    requests = model.requests
    assert all(f"summary-{k}" in request_text(requests[k + 1]) for k in range(len(requests) - 1))
    assert "summary-" not in request_text(requests[0])


def test_chunk_reports_count_the_calls() -> None:
    """One summarize report per call, with its chunk number."""
    model = scripted(numbered())
    result = compactor(model, summarizer_window_tokens=2500, max_summary_tokens=200).maybe_compact(
        conversation(20, size=1500)
    )
    details = [p.detail for p in result.passes if p.name == "summarize"]
    assert [f"chunk {i}/{model.calls}" for i in range(1, model.calls + 1)] == details


def test_one_message_larger_than_the_window_is_split_not_dropped() -> None:
    """A tool result larger than the window goes to the summarizer in consecutive pieces."""
    model = scripted(numbered())
    body = "".join(f"{i:06d}" for i in range(2000))  # 12,000 characters
    messages = [
        *turn(0),
        prompt("task 1"),
        Message("assistant", (ToolUseBlock("big", "read_file", {"path": "big"}),)),
        Message("user", (ToolResultBlock("big", body),)),
        Message("assistant", (TextBlock("read it"),)),
        *turn(2),
        *turn(3),
    ]
    compactor(model, summarizer_window_tokens=2500, max_summary_tokens=200).maybe_compact(messages)
    text = "".join(request_text(r) for r in model.requests)
    assert 3 < model.calls
    assert all(window_size(r) <= 2500 for r in model.requests)
    assert all(f"{i:06d}" in text for i in range(0, 2000, 97))


# -- remembered summaries -------------------------------------------------------------------------


def test_the_same_history_reuses_the_summary_without_a_call() -> None:
    """A second compaction of the same turns makes no model call and gives the same result."""
    model = scripted([summary("S")])
    c = compactor(model)
    messages = conversation(5)
    assert c.maybe_compact(messages).messages == c.maybe_compact(messages).messages
    assert 1 == model.calls


def test_new_turns_are_summarized_on_top_of_the_remembered_summary() -> None:
    """After one more turn, only the new turn is sent, with the remembered summary."""
    model = scripted([summary("first summary"), summary("second summary")])
    c = compactor(model)
    c.maybe_compact(conversation(5))
    result = c.maybe_compact(conversation(6))
    text = request_text(model.requests[1])
    assert "first summary" in text
    assert "body4 " in text
    assert "body3 " not in text
    assert f"{SUMMARY_HEADER}\nsecond summary" in message_text(result.messages[0].content)


def test_a_shorter_history_than_a_remembered_one_is_summarized_not_a_failure() -> None:
    """After summarizing a long history, a shorter one (another session, the same one after a
    restore) is summarized anew: the remembered longer region is no prefix of it, and looking
    for one is no failure of the summarizer (it raised IndexError, which opened the circuit)."""
    model = scripted([summary("long"), summary("short"), summary("short again")])
    c = compactor(model, max_failures=1)
    c.maybe_compact(conversation(8))
    for turns in (4, 3):
        result = c.maybe_compact(conversation(turns))
        assert ["summarize"] == [r.name for r in result.passes if r.name != "base"]
        assert result.changed
    assert 3 == model.calls
    assert 0 == c.consecutive_failures  # type: ignore[attr-defined]


# -- failures and the circuit breaker -------------------------------------------------------------


def test_a_failing_summarizer_returns_the_base_result() -> None:
    """A raising summarizer call is reported and the base result is returned."""
    messages = conversation(5)
    result = compactor(scripted([RuntimeError("down")]), base=StandInBase()).maybe_compact(messages)
    assert StandInBase().maybe_compact(messages).messages == result.messages
    assert "failed (1/2 consecutive): RuntimeError: down" in result.passes[-1].detail


def test_circuit_opens_after_max_failures_and_stops_calling() -> None:
    """After max_failures failures in a row the model is not called again."""
    model = scripted([RuntimeError("down"), RuntimeError("down")])
    c = compactor(model, base=StandInBase(), max_failures=2)
    messages = conversation(5)
    results = [c.maybe_compact(messages) for _ in range(4)]
    base = StandInBase().maybe_compact(messages).messages
    assert 2 == model.calls
    assert [base] * 4 == [r.messages for r in results]
    assert ["summarize", "summarize", "circuit_open", "circuit_open"] == [
        r.passes[-1].name for r in results
    ]


class DropMiddle(Compactor):
    """A deterministic fallback for these tests: keeps the first and the last turn only."""

    spills = False

    def __init__(self) -> None:
        self.calls = 0

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
    ) -> CompactResult:
        self.calls += 1
        turns = split_turns(messages)
        kept = [*turns[0], *turns[-1]] if len(turns) > 2 else list(messages)
        return CompactResult(
            messages=tuple(kept),
            changed=len(kept) != len(messages),
            tokens_before=estimate_tokens(messages),
            tokens_after=estimate_tokens(kept),
        )


def test_a_failing_summarizer_runs_the_fallback_on_the_base_result() -> None:
    """With a fallback, a failed summary still reduces: the fallback's result of the base
    result is returned, reported after the failure."""
    messages = conversation(5)
    base = StandInBase().maybe_compact(messages).messages
    result = compactor(
        scripted([RuntimeError("down")]), base=StandInBase(), fallback=DropMiddle()
    ).maybe_compact(messages)
    assert DropMiddle().maybe_compact(base).messages == result.messages
    assert ["clear_results", "summarize", "fallback"] == [p.name for p in result.passes]
    assert result.passes[1].detail.startswith("failed (1/2 consecutive): RuntimeError: down")


def test_an_open_circuit_runs_the_fallback() -> None:
    """Once the circuit is open, each compaction returns the fallback's result, without a
    model call."""
    model = scripted([RuntimeError("down")])
    c = compactor(model, fallback=DropMiddle(), max_failures=1)
    messages = conversation(5)
    results = [c.maybe_compact(messages) for _ in range(2)]
    assert 1 == model.calls
    assert [DropMiddle().maybe_compact(messages).messages] * 2 == [r.messages for r in results]
    assert ["summarize", "circuit_open"] == [r.passes[-2].name for r in results]


def test_a_used_summary_leaves_the_fallback_alone() -> None:
    """A summary that is used: the fallback is not run."""
    fallback = DropMiddle()
    result = compactor(scripted([summary("S")]), fallback=fallback).maybe_compact(conversation(5))
    assert (True, 0) == (result.changed, fallback.calls)


def test_the_compactor_spills_when_its_fallback_does() -> None:
    """``spills`` is true when the base or the fallback may spill."""
    spilling = StandInBase()  # a Compactor's default: it may spill
    assert [False, True, True] == [
        compactor(scripted([])).spills,
        compactor(scripted([]), fallback=spilling).spills,
        compactor(scripted([]), base=spilling, fallback=DropMiddle()).spills,
    ]


def test_a_success_resets_the_failure_count() -> None:
    """fail, succeed, fail: the count restarts, so the next call is still made."""
    model = scripted([RuntimeError("a"), summary("S1"), RuntimeError("b"), summary("S2")])
    c = compactor(model, max_failures=2)
    results = [c.maybe_compact(conversation(5, tag=tag)) for tag in "pqrs"]
    assert 4 == model.calls
    assert [False, True, False, True] == [r.changed for r in results]


def test_an_empty_summary_counts_as_a_failure() -> None:
    """Empty or blank summaries are failures; two of them open the circuit."""
    model = scripted([summary(""), summary("   ")])
    c = compactor(model, max_failures=2)
    messages = conversation(5)
    results = [c.maybe_compact(messages) for _ in range(3)]
    assert (2, [False] * 3) == (model.calls, [r.changed for r in results])
    assert "circuit_open" == results[-1].passes[-1].name


def test_cancellation_propagates_and_is_not_a_failure() -> None:
    """OperationCancelledError from the summarizer is raised, not counted."""
    model = scripted([OperationCancelledError("stop"), summary("S")])
    c = compactor(model, max_failures=1)
    with pytest.raises(OperationCancelledError):
        c.maybe_compact(conversation(5))
    assert c.maybe_compact(conversation(5)).changed


def test_a_summary_that_does_not_shrink_is_not_used() -> None:
    """When the summary is larger than what it replaces, the base result is kept."""
    messages = conversation(4, size=0)
    result = compactor(scripted([summary("y" * 5000)]), token_threshold=0).maybe_compact(messages)
    assert (tuple(messages), False) == (result.messages, result.changed)


# -- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"model_name": ""},
        {"token_threshold": -1},
        {"max_failures": 0},
        {"keep_tail_turns": 0},
        {"summarizer_window_tokens": 500},
        {"base": object()},
        {"fallback": object()},
    ],
)
def test_bad_arguments_raise(kw: dict[str, object]) -> None:
    """Out-of-range arguments raise InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        compactor(scripted([]), **kw)


def test_a_model_without_complete_is_refused() -> None:
    """The model must have complete(request)."""
    with pytest.raises(InvalidArgumentError):
        llm_compactor(model=object(), model_name="m", token_threshold=1)  # type: ignore[arg-type]


# -- cancellation reaches the summarizer's model call ----------------------------------------------


def test_cancelling_a_compaction_stops_the_summarizer_call_and_frees_the_compactor(
    tmp_path: Path,
) -> None:
    """agent.compact() cancelled while the summarizer's call (the real client, a stalled fake
    server) is in flight: the call is stopped (the client hangs up), nothing is recorded, and
    the compactor actor takes the next compaction at once."""
    cp = memory_checkpointer()
    with FakeMessagesServer() as server, AnthropicProvider(server.client(), ()) as model:
        server.add(stalled_stream(message([text("never used")]), seconds=3600))
        server.add(message([text("the summary")]))
        summarizer = llm_compactor(
            model=model, model_name="m", token_threshold=0, keep_tail_turns=1
        )
        with create_lite_agent(
            model=scripted([summary("one " + "y" * 3000), summary("two")]),
            model_name="m",
            workdir=tmp_path,
            tools=[],
            checkpointer=cp,
            compactor=summarizer,
        ) as agent:
            agent.send("first")
            agent.send("second")
            head = cp.head(agent.session_id)
            token = CancelToken()

            def cancel_once_asked() -> None:
                deadline = time.monotonic() + 60
                while not server.requests and time.monotonic() < deadline:
                    time.sleep(0.01)
                token.cancel("changed my mind")

            threading.Thread(target=cancel_once_asked, daemon=True).start()
            with pytest.raises(OperationCancelledError):
                agent.compact(cancel=token)
            assert head == cp.head(agent.session_id)
            stats = agent.compact()
        deadline = time.monotonic() + 30  # the server notices the hang-up on its next poll
        while not server.hangups and time.monotonic() < deadline:
            time.sleep(0.01)
        hung_up = server.hangups
    assert stats.changed
    assert [server.requests[0].request_id] == hung_up


class CancelRecorder(Compactor):
    """A compactor recording the cancel token it is given (and whether it was asked)."""

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


class OldStyle(Compactor):
    """A compactor written before the cancel token existed."""

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
    ) -> CompactResult:
        before = estimate_tokens(messages)
        return CompactResult(
            messages=tuple(messages), changed=False, tokens_before=before, tokens_after=before
        )


def test_run_passes_the_token_to_compactors_that_take_it() -> None:
    """Compactor.run gives maybe_compact the token when it takes one; a base compactor inside
    llm_compactor gets it too."""
    token = CancelToken()
    recorder = CancelRecorder()
    recorder.run([prompt("a")], cancel=token)
    inner = CancelRecorder()
    llm_compactor(model=scripted([]), model_name="m", token_threshold=10**9, base=inner).run(
        [prompt("a")], cancel=token
    )
    assert [token, token] == [*recorder.tokens, *inner.tokens]


def test_a_compactor_without_the_cancel_parameter_still_runs() -> None:
    """A compactor whose maybe_compact takes no cancel works through run (and a fired token
    stops it before it starts)."""
    token = CancelToken()
    assert not OldStyle().run([prompt("a")], cancel=token).changed
    token.cancel()
    with pytest.raises(OperationCancelledError):
        OldStyle().run([prompt("a")], cancel=token)


def test_the_summarizer_gets_the_cancel_token() -> None:
    """Every summarizer call carries the token given to maybe_compact."""
    seen: list[CancelToken | None] = []

    class Model:
        def complete(
            self, request: ModelRequest, *, cancel: CancelToken | None = None
        ) -> ModelResponse:
            seen.append(cancel)
            return ModelResponse(message=summary("short"))

    token = CancelToken()
    llm_compactor(model=Model(), model_name="m", token_threshold=0, keep_tail_turns=1).run(
        conversation(3), cancel=token
    )
    assert [token] == seen


def test_a_summarizer_model_without_cancel_is_still_called() -> None:
    """A model whose complete() takes no cancel keeps working (it is not passed one)."""

    class Model:
        def complete(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(message=summary("short"))

    result = llm_compactor(model=Model(), model_name="m", token_threshold=0, keep_tail_turns=1).run(
        conversation(3), cancel=CancelToken()
    )
    assert SUMMARY_HEADER in message_text(result.messages[0].content)
