"""Adversarial context management through the public API: nothing wedges, nothing is lost.

A seeded adversary drives ``create_lite_agent`` (scripted model, memory/file/SQLite
checkpointers) with tiny budgets, a model whose real window is smaller than the configured
budget (overflows that persist after recovery, with and without the reported numbers), prompts
and tool results larger than the whole budget, results of megabytes, many calls per message,
thinking blocks, reads of archived references at random offsets, manual ``compact()`` and
``iter_compact()`` (with instructions, closed early, cancelled), restores to before and after
compactions, and summarizers and planners that fail, hang, or answer with nothing or with far
too much. After every operation:

- the operation returned, or raised a ``LiteAgentError``, within a bound; after a failed send a
  short prompt still goes through;
- every request the model received keeps each ``tool_use`` with its ``tool_result`` (and roles
  alternating), and every marker in it names a tool of that same request;
- every read of a reference through the ``context`` tool succeeded and gave the original text;
- the log only grew (restores aside), and ``verify_replay`` recomputes every request.

Regressions of the defects the adversary found are pinned one by one below it.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_context_mix import content, readback_problems

from liteagent.context import (
    Compactor,
    CompactResult,
    ContextBudgetError,
    ContextOptions,
    PassReport,
    default_compactor,
    estimate_tokens,
    llm_compactor,
    reactive_compaction,
    verify_replay,
)
from liteagent.context._archive import refs_in
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    file_checkpointer,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog.errors import LiteAgentError, OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    Compaction,
    ContextStatus,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
)
from liteagent.providers import CLEAR_TOOL_USES, ContextOverflowError, scripted
from liteagent.providers._contract import ModelRequest, ModelResponse
from liteagent.providers.testing import (
    FakeMessagesServer,
    context_overflow,
    message,
    text,
    tool_use,
)
from liteagent.sdk import create_agent, create_lite_agent
from liteagent.tools import tool

_BOUND_S = 30.0  # no operation may take longer (the slowest hang is a 0.3 s planner timeout)
_MARKER_TOOL = re.compile(r"read it with the (\S+) tool|(\w+)\(ref=")


@tool(read_only=True)
def emit(seed: int, size: int) -> str:
    """Print a deterministic text of about ``size`` characters."""
    return content(seed, size)


# -- what every request must hold -------------------------------------------------------------


def _texts(m: Message) -> list[str]:
    out = []
    for b in m.content:
        for name in ("text", "content", "thinking"):
            value = getattr(b, name, None)
            if isinstance(value, str):
                out.append(value)
    return out


def request_problems(i: int, request: ModelRequest) -> list[str]:
    """What request ``i`` breaks: a tool_use without its tool_result in the next message (or
    the reverse), a tool use id called twice, roles that do not alternate, an empty message,
    a marker naming a tool the request does not carry."""
    tools = {t.name for t in request.tools}
    msgs = request.messages
    out: list[str] = []
    ids = [b.id for m in msgs for b in m.content if type(b) is ToolUseBlock]
    if len(ids) != len(set(ids)):
        out.append(f"request {i}: a tool use id is called twice")
    if not msgs or msgs[-1].role != "user":
        out.append(f"request {i}: does not end with a user message")
    for k, m in enumerate(msgs):
        where = f"request {i} message {k}"
        if not m.content:
            out.append(f"{where}: empty")
        if k and msgs[k - 1].role == m.role:
            out.append(f"{where}: two {m.role} messages in a row")
        uses = sorted(b.id for b in m.content if type(b) is ToolUseBlock)
        if m.role == "assistant" and uses:
            after = msgs[k + 1] if k + 1 < len(msgs) else None
            answers = (
                sorted(b.tool_use_id for b in after.content if type(b) is ToolResultBlock)
                if after is not None
                else None
            )
            if answers != uses:
                out.append(f"{where}: calls {uses[:4]}, answered by {(answers or [])[:4]}")
        results = sorted(b.tool_use_id for b in m.content if type(b) is ToolResultBlock)
        if results:
            before = msgs[k - 1] if k else None
            called = (
                sorted(b.id for b in before.content if type(b) is ToolUseBlock)
                if before is not None and before.role == "assistant"
                else []
            )
            if called != results:
                out.append(f"{where}: results {results[:4]} for calls {called[:4]}")
        for body in _texts(m):
            if "[liteagent:" not in body:
                continue
            for match in _MARKER_TOOL.finditer(body):
                name = match.group(1) or match.group(2)
                if name not in tools:
                    out.append(f"{where}: a marker names {name!r}, the request has {tools}")
    return out


def read_errors(events: list[Any]) -> list[str]:
    """Reads through the context tool that failed (the adversary only reads references it was
    shown, with offsets inside them: every one must succeed)."""
    return [
        f"seq {e.seq}: {str(e.body.block.content)[:200]}"
        for e in events
        if isinstance(e.body, ToolResult)
        and e.body.tool_name == "context"
        and e.body.block.is_error
    ]


# -- the adversary's model, summarizer and planner ---------------------------------------------


@dataclass
class Model:
    """A scripted model with a real window (``window`` estimated tokens, ``None``: the budget)
    that it refuses requests over, with or without the numbers; it calls many tools at once,
    thinks, and reads the references it is shown at random offsets."""

    rng: random.Random
    window: int | None
    numbers: bool
    max_size: int
    quiet: bool = False
    steps: int = 0
    max_steps: int = 3
    calls: int = 0
    lengths: dict[str, int] = field(default_factory=dict)

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.calls += 1
        rng = self.rng
        est = estimate_tokens(request.messages)
        if self.window is not None and est > self.window:
            if self.numbers:
                raise ContextOverflowError("prompt is too long", tokens=est, maximum=self.window)
            raise ContextOverflowError("prompt is too long")
        self.steps += 1
        thinking: list[Any] = []
        if rng.random() < 0.3:
            thinking.append(ThinkingBlock(thinking=content(self.calls, 2000), signature="sig"))
        if self.quiet or self.steps > self.max_steps:
            return AssistantMessage(
                content=(*thinking, TextBlock(f"done {self.calls}")), stop_reason="end_turn"
            )
        shown = self._shown(request)
        uses = []
        for k in range(rng.choice([1, 2, 5, 12, 30])):
            uid = f"toolu_{self.calls}_{k}"
            if shown and rng.random() < 0.35:
                ref = rng.choice(sorted(shown))
                length = shown[ref]
                uses.append(
                    ToolUseBlock(
                        uid,
                        "context",
                        {
                            "ref": ref,
                            "offset": rng.randrange(length) if length else 0,
                            "limit": rng.choice([1, 7, 500, 20_000]),
                        },
                    )
                )
            else:
                size = rng.choice([10, 900, 5_000, 40_000, rng.randrange(1, self.max_size)])
                uses.append(ToolUseBlock(uid, "emit", {"seed": rng.randrange(10**6), "size": size}))
        return AssistantMessage(
            content=(*thinking, TextBlock(f"step {self.calls}"), *uses), stop_reason="tool_use"
        )

    def _shown(self, request: ModelRequest) -> dict[str, int]:
        """The references in markers of the request, with the length of what they name."""
        out = {}
        for m in request.messages:
            for body in _texts(m):
                for ref in refs_in(body):
                    if ref in self.lengths:
                        out[ref] = self.lengths[ref]
        return out


class Summarizer:
    """A summarizing model that answers, fails, answers nothing or far too much, or hangs
    until cancelled, as ``mode`` says at each call."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.calls = 0

    def complete(self, request: ModelRequest, *, cancel: CancelToken | None = None) -> Any:
        self.calls += 1
        mode = self.mode
        if mode == "raise":
            raise RuntimeError("the summarizer is down")
        if mode == "hang":
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if cancel is not None and cancel.cancelled:
                    raise OperationCancelledError("cancelled")
                time.sleep(0.005)
        summary = {"empty": "  ", "huge": "S" * 2_000_000}.get(mode, "summary 東京 ✓")
        return ModelResponse(
            message=AssistantMessage(content=(TextBlock(summary),), stop_reason="end_turn")
        )


def planner_of(rng: random.Random) -> Any:
    """A planner that summarizes, fails, answers nothing or too much, holds a lone surrogate,
    or outlives its timeout, at random."""

    def planner(messages: Any, *, cancel: CancelToken) -> str:
        mode = rng.choice(["ok", "ok", "empty", "huge", "raise", "surrogate", "slow"])
        if mode == "raise":
            raise RuntimeError("the planner is down")
        if mode == "slow":
            time.sleep(0.5)
        return {"empty": "", "huge": "P" * 300_000, "surrogate": "half \ud800 of it"}.get(
            mode, f"planned summary of {len(messages)} messages"
        )

    return planner


# -- the driver ---------------------------------------------------------------------------------


@dataclass
class Adversary:
    seed: int
    backend: str
    tmp: Path
    ops: int
    max_size: int
    log: list[str] = field(default_factory=list)

    def checkpointer(self) -> Checkpointer:
        if self.backend == "memory":
            return memory_checkpointer()
        if self.backend == "file":
            return file_checkpointer(self.tmp / "home")
        return sqlite_checkpointer(self.tmp / "log.db")

    def run(self) -> None:  # noqa: PLR0915 -- one driver loop, read top to bottom
        rng = random.Random(self.seed)
        budget = rng.choice([2_500, 6_000, 20_000])
        options = ContextOptions(
            budget_tokens=budget,
            archive_threshold_bytes=rng.choice([256, 4096, 10**9]),  # 10**9: never archived
            keep_recent_results=rng.choice([0, 1, 3]),
            preview_chars=rng.choice([0, 64]),
            planner=planner_of(random.Random(rng.randrange(2**32))) if rng.random() < 0.5 else None,
            planner_timeout_s=0.3,
        )
        window = rng.choice([None, None, budget * 6 // 10, budget * 8 // 10])
        model = Model(
            random.Random(rng.randrange(2**32)), window, rng.random() < 0.5, self.max_size
        )
        summarizer = Summarizer()
        compactor = llm_compactor(
            model=summarizer,
            model_name="summarizer",
            token_threshold=rng.choice([0, budget // 4]),
            base=default_compactor(budget_bytes=rng.choice([2_000, 200_000]), max_tokens=None)
            if rng.random() < 0.5
            else None,
            max_failures=2,
            keep_tail_turns=1,
            summarizer_window_tokens=4_000,
            max_summary_tokens=500,
        )
        provider = scripted([model] * 100_000)
        self.log.append(f"budget={budget} window={window} numbers={model.numbers} {options}")
        (self.tmp / "work").mkdir(exist_ok=True)
        with (
            self.checkpointer() as cp,
            create_lite_agent(
                model=provider,
                model_name="m",
                workdir=self.tmp / "work",
                tools=[emit],
                checkpointer=cp,
                context=options,
                max_tokens=256,
                max_turns=8,
                compactor=compactor,
            ) as agent,
        ):
            sid = agent.session_id
            self._send(agent, "start: " + content(self.seed, 200), model)  # a small first prompt
            before = list(cp.read(sid))
            for op in range(self.ops):
                kind = rng.choices(
                    ["send", "big_prompt", "compact", "iter_compact", "cancel_compact", "restore"],
                    [10, 1, 2, 1, 1, 1],
                )[0]
                summarizer.mode = rng.choice(["ok", "ok", "raise", "empty", "huge"])
                self.log.append(f"op {op}: {kind} summarizer={summarizer.mode}")
                seen = len(provider.requests)
                truncated = False
                started = time.monotonic()
                if kind in ("send", "big_prompt"):
                    size = budget * 5 if kind == "big_prompt" else rng.randrange(1, budget)
                    model.steps, model.max_steps = 0, rng.choice([0, 1, 3, 6])
                    self._send(agent, f"prompt {op}: " + content(op, size), model)
                elif kind == "compact":
                    instructions = rng.choice([None, "keep the decisions", "東京 \U0001d518"])
                    self._compact(lambda i=instructions: agent.compact(i))
                elif kind == "iter_compact":
                    stop_after = rng.choice([0, 1, 100])

                    def iterate(stop_after: int = stop_after) -> None:
                        it = agent.iter_compact("focus on files")
                        try:
                            for n, _progress in enumerate(it):
                                if n >= stop_after:
                                    break
                        finally:
                            it.close()

                    self._compact(iterate)
                elif kind == "cancel_compact":
                    summarizer.mode = "hang"
                    token = CancelToken()
                    threading.Timer(rng.choice([0.0, 0.05]), token.cancel, ("enough",)).start()
                    self._compact(lambda t=token: agent.compact("x", cancel=t))
                else:
                    points = agent.list_checkpoints(sid)
                    if points:
                        try:
                            agent.restore(sid, rng.choice(points).seq)
                            truncated = True
                        except LiteAgentError as e:
                            self.log.append(f"  restore raised {type(e).__name__}: {e}")
                elapsed = time.monotonic() - started
                assert elapsed < _BOUND_S, (f"{kind} took {elapsed:.1f}s", self.log[-4:])
                for i, r in enumerate(provider.requests[seen:], seen):
                    self.check(request_problems(i, r))
                now = list(cp.read(sid))
                if not truncated:
                    assert now[: len(before)] == before, ("the log was rewritten", self.log[-4:])
                before = now
                report = verify_replay(now)
                self.check([f"seq {c.seq}: {c.problem}" for c in report.mismatches])
                self.check(readback_problems(now))
                self.check(read_errors(now))
                self.remember(now)

    def remember(self, events: list[Any]) -> None:
        """Tell the model the length of every tool result body (what a reference names)."""
        from liteagent.context._archive import archive_ref

        for e in events:
            if isinstance(e.body, ToolResult) and isinstance(e.body.block.content, str):
                body = e.body.block.content
                self.model_lengths[archive_ref(body)] = len(body)

    model_lengths: dict[str, int] = field(default_factory=dict)

    def check(self, problems: list[str]) -> None:
        assert not problems, (problems[:5], self.log[-6:])

    def _send(self, agent: Any, prompt: str, model: Model) -> None:
        model.lengths = self.model_lengths
        try:
            agent.send(prompt)
        except LiteAgentError as e:
            self.log.append(f"  send raised {type(e).__name__}: {str(e)[:160]}")
        else:
            return
        model.quiet = True  # nothing wedged: a short prompt answered with words goes through
        try:
            agent.send("short and sweet")
        finally:
            model.quiet = False

    def _compact(self, run: Any) -> None:
        try:
            run()
        except LiteAgentError as e:
            self.log.append(f"  compaction raised {type(e).__name__}: {e}")
            if not isinstance(e, OperationCancelledError):
                raise


def adversary(tmp: Path, seed: int, backend: str, ops: int, max_size: int) -> None:
    Adversary(seed, backend, tmp, ops, max_size).run()


@pytest.mark.parametrize(("seed", "backend"), [(1, "memory"), (2, "sqlite"), (3, "file")])
def test_context_adversary(tmp_path: Path, seed: int, backend: str) -> None:
    """A few seeded adversarial sessions: every property of the module docstring holds."""
    adversary(tmp_path, seed, backend, ops=14, max_size=300_000)


@pytest.mark.soak
@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
@pytest.mark.parametrize("seed", range(10))
def test_context_adversary_soak(tmp_path: Path, seed: int, backend: str) -> None:
    """Many more, longer sessions with results of megabytes."""
    adversary(tmp_path, 1000 + seed * 31 + len(backend), backend, ops=30, max_size=3_000_000)


# -- regressions found by the adversary ---------------------------------------------------------


def _reply(words: str = "ok") -> AssistantMessage:
    return AssistantMessage(content=(TextBlock(words),), stop_reason="end_turn")


def _summarizing(summarizer: Summarizer, **options: Any) -> Any:
    return llm_compactor(
        model=summarizer,
        model_name="summarizer",
        token_threshold=10,
        keep_tail_turns=1,
        **options,
    )


def test_an_enormous_summary_counts_as_a_failure_and_opens_the_circuit(tmp_path: Path) -> None:
    """A summarizer answering with more than it was given (or far more than max_summary_tokens)
    used to reset the failure count and be called on every compaction; now each such answer is
    a failure, the circuit opens after max_failures, nothing of it is recorded, and the
    conversation goes on."""
    summarizer = Summarizer()
    summarizer.mode = "huge"
    cp = memory_checkpointer()
    with create_lite_agent(
        model=scripted([_reply()] * 20),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        compactor=_summarizing(summarizer, max_failures=2),
        context={"budget_tokens": 6_000},
        max_tokens=256,
    ) as agent:
        for i in range(5):
            agent.send(f"step {i}: " + "z" * 600)
            assert not agent.compact().changed
        assert 2 == summarizer.calls
        assert "ok" == agent.send("still here").text
        events = list(cp.read(agent.session_id))
    assert not [e for e in events if isinstance(e.body, Compaction)]
    assert verify_replay(events).ok


def test_a_summary_far_over_max_summary_tokens_is_not_recorded(tmp_path: Path) -> None:
    """A summary smaller than the conversation but far over the max_summary_tokens the model
    was allowed (a conversation of megabytes) would sit in the first message of every later
    request, over the budget: every send then failed with ContextBudgetError. It is now a
    failed summary, and the session goes on."""
    summarizer = Summarizer()
    summarizer.mode = "huge"  # 2,000,000 characters, less than the results below
    cp = memory_checkpointer()
    calls = [
        AssistantMessage(
            content=(ToolUseBlock(f"toolu_{i}", "emit", {"seed": i, "size": 1_500_000}),),
            stop_reason="tool_use",
        )
        for i in range(2)
    ]
    with create_lite_agent(
        model=scripted([*calls, _reply(), _reply(), _reply("after")]),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        compactor=_summarizing(summarizer, summarizer_window_tokens=1_000_000),
        context={"budget_tokens": 6_000, "archive_threshold_bytes": 1024},
        max_tokens=256,
    ) as agent:
        agent.send("work")
        agent.send("more")
        assert not agent.compact().changed
        assert "after" == agent.send("go on").text
        events = list(cp.read(agent.session_id))
    assert not [e for e in events if isinstance(e.body, Compaction)]
    assert verify_replay(events).ok


def test_repeated_summaries_keep_the_first_message_small(tmp_path: Path) -> None:
    """Each summarizing compaction kept the previous summary (and the prompt merged after it)
    in the first message and added its own, which the engine never cuts: after a few rounds
    every send failed with ContextBudgetError. Now an earlier summary is summarized again and
    the first message holds the original prompt and one summary."""
    summarizer = Summarizer()
    cp = memory_checkpointer()
    provider = scripted([_reply()] * 40)
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        compactor=_summarizing(summarizer),
        context={"budget_tokens": 6_000},
        max_tokens=256,
    ) as agent:
        for i in range(14):
            agent.send(f"step {i}: " + "z" * 3000)
            agent.compact(f"round {i}")
        first = provider.requests[-1].messages[0]
        events = list(cp.read(agent.session_id))
    texts = [b.text for b in first.content if isinstance(b, TextBlock)]
    assert 1 == sum(t.startswith("[liteagent: summary") for t in texts), texts
    assert estimate_tokens([first]) < 2_500  # the first prompt, a summary, the latest prompt
    assert verify_replay(events).ok


def test_a_planner_summary_over_the_budget_is_not_recorded(tmp_path: Path) -> None:
    """A planner answering with a summary larger than the budget had it recorded as a
    compaction on every request (the next view left it out and asked again); now it is a
    failed summary: nothing is recorded and the planner waits, as after any failure."""
    asked: list[int] = []

    def planner(messages: Any, *, cancel: CancelToken) -> str:
        asked.append(len(messages))
        return "P" * 30_000

    cp = memory_checkpointer()
    with create_lite_agent(
        model=scripted([_reply()] * 20),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        context={"budget_tokens": 3_000, "planner": planner},
        max_tokens=256,
    ) as agent:
        for i in range(10):
            agent.send(f"hello {i} " + "z" * 2000)
        events = list(cp.read(agent.session_id))
    assert not [e for e in events if isinstance(e.body, Compaction)]
    assert 3 >= len(asked)
    assert verify_replay(events).ok


def _window_model(window: int, numbers: bool) -> Any:
    """A model whose real window is ``window`` estimated tokens."""

    def answer(request: ModelRequest) -> AssistantMessage:
        est = estimate_tokens(request.messages)
        if est > window:
            if numbers:
                raise ContextOverflowError("prompt is too long", tokens=est, maximum=window)
            raise ContextOverflowError("prompt is too long")
        return _reply(f"fine at {est}")

    return answer


@pytest.mark.parametrize("numbers", [False, True])
def test_a_window_smaller_than_the_budget_does_not_fail_every_later_send(
    tmp_path: Path, numbers: bool
) -> None:
    """A provider whose window is far below the configured budget refused the first request
    of every send, and one retry within half of it was not enough: once the history was
    past twice the window, every send failed. Now the budget the recovery found is where
    later requests start (recorded, so replay verifies), and sends that fit go through."""
    cp = memory_checkpointer()
    with create_lite_agent(
        model=scripted([_window_model(2_500, numbers)] * 200),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        context={"budget_tokens": 40_000},
        max_tokens=256 if numbers else 8192,
    ) as agent:
        outcomes = []
        for i in range(24):
            try:
                agent.send(f"part {i}: " + "y" * 1_200)
                outcomes.append("ok")
            except ContextOverflowError:
                outcomes.append("overflow")
        events = list(cp.read(agent.session_id))
    assert outcomes.count("overflow") <= 2, outcomes
    assert ["ok"] * 8 == outcomes[-8:], outcomes
    statuses = [e.body for e in events if isinstance(e.body, ContextStatus)]
    assert any(s.budget < 40_000 and s.level != "recover" for s in statuses)
    assert verify_replay(events).ok


def test_the_ceiling_an_overflow_taught_survives_passivation_and_restart(tmp_path: Path) -> None:
    """The budget a recovery found is taken back from the log when the session comes back: a
    session passivated for idleness, and one resumed by a new agent on the same store, send
    their next request within it, without the provider refusing one first."""
    refused: list[int] = []
    model = _window_model(2_500, True)

    def counting(request: ModelRequest) -> AssistantMessage:
        try:
            return model(request)
        except ContextOverflowError:
            refused.append(1)
            raise

    cp = memory_checkpointer()

    def agent(**kwargs: Any) -> Any:
        return create_lite_agent(
            model=scripted([counting] * 100),
            model_name="m",
            workdir=tmp_path,
            tools=[emit],
            checkpointer=cp,
            context={"budget_tokens": 40_000},
            max_tokens=256,
            **kwargs,
        )

    with agent(idle_timeout_s=0.05) as first:
        sid = first.session_id
        for i in range(10):
            first.send(f"part {i}: " + "y" * 1_200, session_id=sid)
        learned = len(refused)
        assert learned >= 1  # the window was found by a refusal
        deadline = time.monotonic() + 30
        while first.host_stats().live and time.monotonic() < deadline:
            time.sleep(0.01)  # passivated: its actor (and the ceiling in memory) is gone
        assert 0 == first.host_stats().live
        first.send("after a passivation: " + "y" * 1_200, session_id=sid)
        assert learned == len(refused)
    with agent() as second:
        second.send("after a restart: " + "y" * 1_200, session_id=sid)
        assert learned == len(refused)
    assert verify_replay(list(cp.read(sid))).ok


def test_an_overflow_reporting_a_window_below_the_output_reserve_is_retried(
    tmp_path: Path,
) -> None:
    """With a reported maximum that 90 % of leaves no room for max_tokens, the retry size came
    out at zero or less and the overflow was raised without a retry; now the retry halves."""
    provider = scripted([_reply()] * 8 + [_window_model(1_000, True)] * 3)
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=memory_checkpointer(),
        context={"budget_tokens": 20_000},
        max_tokens=8192,
    ) as agent:
        for i in range(8):
            agent.send(f"part {i}: " + "y" * 600)
        assert agent.send("and now?").text.startswith("fine at")


def test_a_persistent_overflow_from_the_server_ends_and_the_next_send_works(
    tmp_path: Path,
) -> None:
    """The real client against the fake server: an overflow that the retry does not clear is
    a ContextOverflowError (no loop); the next send goes out smaller and is answered, and the
    tool_use/tool_result pairs of every request body are whole."""
    from liteagent.providers._anthropic import AnthropicProvider

    cp = memory_checkpointer()
    with FakeMessagesServer() as server, server.client() as client:
        server.add(
            *(
                message([tool_use(f"toolu_{i}", "emit", {"seed": i, "size": 9_000})])
                for i in range(5)
            )
        )
        server.add(context_overflow(tokens=60_000, maximum=30_000), context_overflow())
        server.add(message([text("after")]))
        with create_lite_agent(
            model=AnthropicProvider(client, ()),
            model_name="m",
            workdir=tmp_path,
            tools=[emit],
            checkpointer=cp,
            context={"archive_threshold_bytes": 10**9, "native_edits": False},
        ) as agent:
            with pytest.raises(ContextOverflowError):
                agent.send("go")
            assert "after" == agent.send("small").text
        bodies = [r.body for r in server.requests if r.body is not None]
    for body in bodies:
        msgs = body["messages"]
        for k, m in enumerate(msgs):
            uses = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
            if uses:
                answers = [
                    b["tool_use_id"] for b in msgs[k + 1]["content"] if b["type"] == "tool_result"
                ]
                assert uses == answers
    sizes = [len(json.dumps(b["messages"])) for b in bodies]
    assert sizes[-1] < sizes[-3]
    assert verify_replay(list(cp.read(agent.session_id))).ok


def test_a_summary_of_megabytes_is_cut_once(tmp_path: Path) -> None:
    """Summarizing megabytes of tool output in a small summarizer window re-measured and copied
    the rest of the output for every chunk (quadratic: a manual compaction of a few hundred
    megabytes took minutes); the output is now cut in one pass, and every character reaches
    the summarizer."""
    seen: list[str] = []
    cp = memory_checkpointer()

    class Recorder(Summarizer):
        def complete(self, request: ModelRequest, *, cancel: CancelToken | None = None) -> Any:
            seen.append(request.messages[0].content[0].text)  # type: ignore[union-attr]
            return super().complete(request, cancel=cancel)

    calls = AssistantMessage(
        content=tuple(
            ToolUseBlock(f"toolu_{i}", "emit", {"seed": i, "size": 3_000_000}) for i in range(4)
        ),
        stop_reason="tool_use",
    )
    compactor = _summarizing(Recorder(), summarizer_window_tokens=4_000, max_summary_tokens=200)
    with create_lite_agent(
        model=scripted([calls, _reply(), _reply()]),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        compactor=compactor,
        max_tokens=256,
    ) as agent:
        agent.send("work")
        agent.send("more")
        started = time.process_time()
        assert agent.compact().changed
        spent = time.process_time() - started
        bodies = [
            e.body.block.content
            for e in cp.read(agent.session_id)
            if isinstance(e.body, ToolResult) and isinstance(e.body.block.content, str)
        ]
    pattern = re.compile(r"<conversation>\n(.*)\n</conversation>", re.S)
    whole = "".join(pattern.search(s).group(1) for s in seen)  # type: ignore[union-attr]
    whole = whole.replace("(continued) ", "")
    assert 4 == len(bodies)
    for body in bodies:
        for at in (0, len(body) // 3, len(body) - 5_000):
            assert body[at : at + 5_000] in whole
    assert spent < 6, spent  # about 1 s; re-measuring the rest at each chunk: about 12 s


def test_a_compaction_whose_first_prompt_is_over_the_budget_is_refused(tmp_path: Path) -> None:
    """A summary within what the summarizer may write but over a tiny budget rode in the
    first prompt of every later view, which is never cut: every send after the compaction
    failed with ContextBudgetError. Now compact() raises ContextBudgetError and records
    nothing, and the session goes on."""

    class Wordy(Summarizer):
        def complete(self, request: ModelRequest, *, cancel: CancelToken | None = None) -> Any:
            self.calls += 1
            return ModelResponse(message=_reply("w" * 9_000))  # 3,000 tokens: under 2 x 4,096

    cp = memory_checkpointer()
    with create_lite_agent(
        model=scripted([_reply()] * 20),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        compactor=_summarizing(Wordy()),
        context={"budget_tokens": 3_000},
        max_tokens=256,
    ) as agent:
        for i in range(6):
            agent.send(f"step {i}: " + "z" * 3_000)
        before = list(cp.read(agent.session_id))
        with pytest.raises(ContextBudgetError):
            agent.compact()
        assert before == list(cp.read(agent.session_id))
        assert "ok" == agent.send("go on").text
        events = list(cp.read(agent.session_id))
    assert verify_replay(events).ok


@pytest.mark.parametrize("numbers", [False, True])
def test_reactive_compaction_remembers_a_window_smaller_than_the_conversation(
    tmp_path: Path, numbers: bool
) -> None:
    """``reactive_compaction()`` without the engine halved each overflowing request once, from
    the whole conversation again at every call: once the conversation was past twice the
    model's window every send failed. Now later requests are trimmed to the size the overflow
    led to before the call, and every request the model answered holds whole pairs."""
    provider = scripted([_window_model(2_500, numbers)] * 200)
    outcomes = []
    with create_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=memory_checkpointer(),
        use=[reactive_compaction()],
    ) as agent:
        for i in range(24):
            try:
                agent.send(f"part {i}: " + "y" * 1_200)
                outcomes.append("ok")
            except ContextOverflowError:
                outcomes.append("overflow")
    assert ["ok"] * 24 == outcomes
    for i, r in enumerate(provider.requests):
        assert [] == request_problems(i, r)


def _without(kind: type, ms: Any) -> Any:
    """``ms`` without their blocks of type ``kind`` (a message left empty says "x")."""
    return tuple(
        Message(m.role, tuple(b for b in m.content if type(b) is not kind) or (TextBlock("x"),))
        for m in ms
    )


class _Broken(Compactor):
    """A compactor that fails, or returns what no request may carry."""

    def __init__(self, how: str) -> None:
        self.how = how

    def maybe_compact(
        self, messages: Any, usage: Any = None, instructions: Any = None, cancel: Any = None
    ) -> Any:
        shaped = {
            "drop_results": lambda ms: _without(ToolResultBlock, ms),
            "drop_calls": lambda ms: _without(ToolUseBlock, ms),
            "reversed": lambda ms: tuple(reversed(ms)),
            "twice": lambda ms: (*ms, *ms),
            "empty_messages": lambda ms: tuple(Message(m.role, ()) for m in ms),
            "no_messages": lambda ms: (),
            "int_text": lambda ms: (*ms[:-1], Message("user", (TextBlock(5),))),  # type: ignore[arg-type]
            "system_role": lambda ms: (*ms[:-1], Message("system", ms[-1].content)),  # type: ignore[arg-type]
            "messages_none": lambda ms: None,
        }
        if self.how == "raise":
            raise ValueError("the compactor is broken")
        if self.how == "none":
            return None
        if self.how == "pass_named_5":
            report = PassReport(name=5, changed=True, tokens_before=2, tokens_after=1)  # type: ignore[arg-type]
            return CompactResult(
                messages=tuple(messages),
                changed=False,
                tokens_before=2,
                tokens_after=2,
                passes=(report,),
            )
        return CompactResult(
            messages=shaped[self.how](messages), changed=True, tokens_before=2, tokens_after=1
        )


@pytest.mark.parametrize(
    "how",
    [
        "raise",
        "none",
        "drop_results",
        "drop_calls",
        "reversed",
        "twice",
        "empty_messages",
        # ill-typed results (a text block holding an int, a role "system", messages=None, a
        # pass named 5) let msgspec's ValidationError or a TypeError escape; no message at
        # all was recorded, so the next request carried the new prompt alone
        "no_messages",
        "int_text",
        "system_role",
        "messages_none",
        "pass_named_5",
    ],
)
def test_a_broken_compactor_fails_cleanly_and_records_nothing(tmp_path: Path, how: str) -> None:
    """A compactor that raised a foreign exception or returned no CompactResult made compact()
    raise ValueError or AttributeError; one that returned messages breaking tool_use/
    tool_result pairs (or empty messages, or a call id twice) was recorded, and every later
    request carried them (a real provider refuses such requests: the session was dead). Now
    compact() raises CompactionFailedError, nothing is recorded, the session goes on."""
    from liteagent.actors._compactor import CompactionFailedError

    two_calls = AssistantMessage(
        content=(
            ToolUseBlock("a1", "emit", {"seed": 1, "size": 300}),
            ToolUseBlock("a2", "emit", {"seed": 2, "size": 300}),
        ),
        stop_reason="tool_use",
    )
    provider = scripted([two_calls, _reply(), _reply(), _reply("after")])
    cp = memory_checkpointer()
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        compactor=_Broken(how),
    ) as agent:
        agent.send("go")
        agent.send("more")
        before = list(cp.read(agent.session_id))
        with pytest.raises(CompactionFailedError):
            agent.compact()
        assert before == list(cp.read(agent.session_id))
        assert "after" == agent.send("go on").text
    for i, r in enumerate(provider.requests):
        assert [] == request_problems(i, r)


def test_hundreds_of_turns_in_a_tiny_budget(tmp_path: Path) -> None:
    """Two hundred turns, some with many tool calls and thinking, in a budget of a few
    prompts, with a model whose window is smaller still: a send may fail (its own turn did not
    fit), but a short prompt after it always goes through; every request keeps its pairs, the
    log only grows, and replay verifies."""
    rng = random.Random(7)
    model = Model(rng, window=1_200, numbers=False, max_size=3_000)
    cp = memory_checkpointer()
    provider = scripted([model] * 100_000)
    failed = 0
    with create_lite_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        context={"budget_tokens": 2_000, "archive_threshold_bytes": 512, "preview_chars": 40},
        max_tokens=256,
        max_turns=4,
    ) as agent:
        before: list[Any] = []
        for i in range(200):
            model.steps, model.max_steps = 0, rng.choice([0, 0, 1, 2])
            try:
                agent.send(f"turn {i} " + "w" * rng.randrange(1, 600))
            except LiteAgentError:
                failed += 1
                model.quiet = True
                try:
                    agent.send("short")
                finally:
                    model.quiet = False
            if i % 20 == 19:
                now = list(cp.read(agent.session_id))
                assert before == now[: len(before)]
                before = now
    assert failed < 200
    for i, r in enumerate(provider.requests):
        assert [] == request_problems(i, r)
    report = verify_replay(before)
    assert report.ok, report.mismatches[:3]
    assert 200 <= len(report.checks)


def test_an_overflow_whose_smaller_request_differs_only_in_its_edits_is_retried(
    tmp_path: Path,
) -> None:
    """With native context edits, the request projected within a smaller budget after an
    overflow can hold the same messages with a ``clear_tool_uses`` edit added. That retry was
    skipped (only the messages were compared) and the overflow raised: one failed send per
    overflow on the Anthropic provider, whose edits are on by default. The model here has a
    window of 12,000 estimated tokens, and the edit (applied by the server) clears three
    quarters of a request."""
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> AssistantMessage:
        seen.append(request)
        est = estimate_tokens(request.messages)
        if request.context_edits:
            est //= 4
        if est > 12_000:
            raise ContextOverflowError("prompt is too long", tokens=est, maximum=12_000)
        last = request.messages[-1]
        calls = sum(1 for m in request.messages[-8:] if m.role == "assistant")
        if any(type(b) is TextBlock for b in last.content) or calls < 3:
            n = len(seen)
            return AssistantMessage(
                content=(ToolUseBlock(f"toolu_{n}", "emit", {"seed": n, "size": 2_400}),),
                stop_reason="tool_use",
            )
        return _reply(f"fine at {est}")

    cp = memory_checkpointer()
    with create_lite_agent(
        model=scripted([model] * 200, capabilities={CLEAR_TOOL_USES}),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        context={"budget_tokens": 200_000},
        max_tokens=256,
    ) as agent:
        for i in range(8):
            assert agent.send(f"call {i}").text.startswith("fine at")
        events = list(cp.read(agent.session_id))
    retried = [
        (before, after)
        for before, after in itertools.pairwise(seen)
        if not before.context_edits and after.context_edits
    ]
    assert retried
    assert all(before.messages == after.messages for before, after in retried)
    assert verify_replay(events).ok


def test_one_bogus_overflow_does_not_shrink_the_session_for_good(tmp_path: Path) -> None:
    """A provider reports once, wrongly, a request of 5,000,000 tokens over a 200,000 window.
    The retry is projected within no less than a quarter of the request (it was scaled to
    2 % of it: nothing fitted, and the send failed; with more history, the session then sent
    3 messages of it), and after 20 answers within
    that ceiling the requests are projected within the whole budget again (they never were
    again, in a new process neither)."""
    sizes: list[int] = []
    glitch = [True]

    def model(request: ModelRequest) -> AssistantMessage:
        est = estimate_tokens(request.messages)
        if len(request.messages) > 60 and glitch[0]:
            glitch[0] = False
            raise ContextOverflowError("prompt is too long", tokens=5_000_000, maximum=200_000)
        sizes.append(est)
        return _reply(f"fine at {est}")

    with create_lite_agent(
        model=scripted([model] * 90),
        model_name="m",
        workdir=tmp_path,
        tools=[],
        checkpointer=memory_checkpointer(),
        context={"budget_tokens": 200_000},
        max_tokens=256,
    ) as agent:
        for i in range(80):
            agent.send(f"part {i}: " + "y" * 400)
    before = sizes[29]  # a healthy request, before the glitch
    glitched = next(i for i, s in enumerate(sizes) if i > 0 and s < sizes[i - 1])
    assert sizes[glitched] >= sizes[glitched - 1] // 8  # (the budget counts more than these)
    assert sizes[-1] > sizes[glitched] * 2
    assert sizes[-1] > before
