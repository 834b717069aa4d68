"""A randomized adversarial mix for context management inside real agents.

Seeded random conversations drive ``create_lite_agent`` (scripted model, small
``ContextOptions`` budgets, memory/file/sqlite checkpointers) through many turns, huge tool
results, many parallel tool calls, odd JSON tool inputs, thinking blocks, reads of archived and
spilled results through the ``context`` tool, manual ``compact(...)``, reactive recovery after a
provider ``ContextOverflowError``, restores and forks, and passivation (a tiny
``idle_timeout_s``, so sessions are folded again from their log). After every operation:

- the send returned, or raised a ``LiteAgentError``; after a ``ContextBudgetError`` (or any
  other error) a short prompt still works: nothing wedged;
- every request the model received fits the configured budget (``estimate_tokens`` of the
  messages plus the system prompt and tools);
- ``verify_replay`` recomputes every recorded request of every session (forks included);
- what the model read back through the ``context`` tool is the original content;
- context management only appends to the log (restores are the only truncations).

The default variant runs a few seeds per backend; ``-m soak`` runs many more, bigger ones.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from liteagent.context import (
    Compactor,
    CompactResult,
    ContextBudgetError,
    ContextOptions,
    estimate_tokens,
    token_budget_compactor,
    verify_replay,
)
from liteagent.context._archive import archive_ref, refs_in
from liteagent.context._tokens import request_overhead_tokens
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    StoredEvent,
    file_checkpointer,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog.errors import LiteAgentError, OperationCancelledError
from liteagent.eventlog.types import (
    AssistantMessage,
    Compact,
    CompactionBlock,
    ContextStatus,
    Message,
    ModelRequestRecord,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolUseBlock,
)
from liteagent.providers import ContextOverflowError, scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import create_async_lite_agent, create_lite_agent
from liteagent.tools import tool

# -- deterministic content --------------------------------------------------------------------

_ALPHABET = (
    "abcdefghij KLMNOP 0123456789 .,;:-_/\\\"'{}[]()<>\t"
    "é ü ß 東京 日本語 👩‍💻 🇫🇷 e\u0301 a\u0308\u0323 \u200d \u200c \r\n ✓ \x00 \x7f \U0001d518"
)


def content(seed: int, size: int) -> str:
    """A deterministic text of about ``size`` characters (lines with a counter, so it does not
    compress to nothing, and unicode that slices must not split)."""
    rng = random.Random(seed)
    unit = "".join(rng.choice(_ALPHABET) for _ in range(min(size, 997) or 1))
    if size <= len(unit) + 16:
        return unit[:size]
    lines = []
    total = 0
    i = 0
    while total < size:
        line = f"{seed}:{i}:{unit}\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)


@tool(read_only=True)
def emit(seed: int, size: int) -> str:
    """Print a deterministic text of about ``size`` characters."""
    return content(seed, size)


@tool(read_only=True)
def echo(payload: Any = None) -> str:
    """Return a short description of the payload."""
    return f"got {len(json.dumps(payload, ensure_ascii=False))} chars of JSON"


def odd_json(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value: deep nesting, unicode keys, huge integers, odd strings."""
    roll = rng.random()
    if depth > 40 or roll < 0.3:
        return rng.choice(
            [
                0,
                -1,
                2**63 - 1,
                -(2**63),
                2**64 + rng.randrange(1000),  # beyond 64 bits: kept as JSON text
                -(2**70),
                1.5e300,
                -0.0,
                True,
                None,
                "",
                "\x00\x01\x1f",
                "👩‍💻🇫🇷e\u0301",
                "\u2028\u2029",
                "\ufeff BOM",
                '"quoted" \\ back',
                "x" * rng.randrange(1, 300),
                "東京" * rng.randrange(1, 50),
            ]
        )
    if roll < 0.65 or depth > 25:
        return [odd_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    keys = ["", "a", "ключ", "🔑", "\x00k", "$ref", "type", "x" * 40]
    return {rng.choice(keys) + str(i): odd_json(rng, depth + 1) for i in range(rng.randrange(0, 4))}


def deep(n: int) -> Any:
    value: Any = "bottom"
    for i in range(n):
        value = [value] if i % 2 else {"d": value}
    return value


# -- the model --------------------------------------------------------------------------------


@dataclass
class Brain:
    """A scripted model's decisions: random tool calls (many at once, odd inputs, thinking),
    reads of the references it is shown, overflows, and a reply to end the turn."""

    rng: random.Random
    max_size: int
    overflow_rate: float = 0.08
    calls: int = 0
    steps: int = 0
    max_steps: int = 4
    quiet: bool = False  # answer with text only (the check that nothing wedged)
    overflows: int = 0

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.calls += 1
        rng = self.rng
        if any(type(e) is Compact for e in request.context_edits):  # the native planner
            summary = rng.choice(["native summary ✓", "", None])
            if summary is None:
                return AssistantMessage(content=(TextBlock("no"),), stop_reason="end_turn")
            return AssistantMessage(
                content=(CompactionBlock(content=summary),), stop_reason="compaction"
            )
        self.steps += 1
        if not self.quiet and rng.random() < self.overflow_rate:
            est = estimate_tokens(request.messages)
            self.overflows += 1
            if rng.random() < 0.3:
                raise ContextOverflowError("prompt is too long")
            raise ContextOverflowError(
                "prompt is too long",
                tokens=est + rng.randrange(1, 5000),
                maximum=max(1, est - rng.randrange(0, est // 2 + 1) + 64),
            )
        thinking: list[Any] = []
        if rng.random() < 0.3:
            size = rng.choice([300, 300, 5_000, 60_000])
            thinking.append(ThinkingBlock(thinking=content(self.calls, size), signature="sig"))
        if self.quiet or self.steps > self.max_steps or rng.random() < 0.2:
            return AssistantMessage(
                content=(*thinking, TextBlock(f"done {self.calls} ✓")), stop_reason="end_turn"
            )
        uses: list[ToolUseBlock] = []
        for k in range(rng.choice([1, 1, 2, 3, 5, 8, 16])):
            uid = f"toolu_{self.calls}_{k}"
            roll = rng.random()
            refs = self._refs(request)
            if roll < 0.3 and refs:
                ref = rng.choice(refs)
                inputs: dict[str, Any] = {"ref": ref}
                if rng.random() < 0.7:
                    inputs["offset"] = rng.choice([0, 0, 1, 7, 399, 20_000, 10**6])
                if rng.random() < 0.5:
                    inputs["limit"] = rng.choice([1, 2, 3, 100, 5000, 20_000, 100_000])
                uses.append(ToolUseBlock(uid, "context", inputs))
            elif roll < 0.5:
                payload = rng.choice(
                    [deep(rng.randrange(50, 200)), content(k, rng.randrange(1, self.max_size))]
                    if rng.random() < 0.2
                    else [odd_json(rng)]
                )
                uses.append(ToolUseBlock(uid, "echo", {"payload": payload}))
            else:
                size = rng.choice([10, 500, 3000, 20_000, 60_000, rng.randrange(1, self.max_size)])
                uses.append(ToolUseBlock(uid, "emit", {"seed": rng.randrange(10**6), "size": size}))
        return AssistantMessage(
            content=(*thinking, TextBlock(f"step {self.calls}"), *uses), stop_reason="tool_use"
        )

    @staticmethod
    def _refs(request: ModelRequest) -> list[str]:
        out: list[str] = []
        for m in request.messages:
            for b in m.content:
                body = getattr(b, "content", None)
                if isinstance(body, str):
                    out += refs_in(body)
        return sorted(set(out))


# -- the checks -------------------------------------------------------------------------------

_SLICE = re.compile(
    r"\A\[liteagent:context ref=(sha256:[0-9a-f]{64}) chars (\d+)-(\d+) of (\d+); "
    r"next_offset=[^\]]*\][^\n]*\n<<<DATA ([0-9a-f]{16})\n"
)


def readback_problems(events: list[StoredEvent]) -> list[str]:
    """What the model read through the context tool that is not the original content."""
    originals: dict[str, str] = {}
    problems: list[str] = []
    for e in events:
        body = e.body
        if isinstance(body, ToolResult) and isinstance(body.block.content, str):
            text = body.block.content
            originals[archive_ref(text)] = text  # a read's answer can be spilled and read too
            if body.tool_name not in ("context", "read_spilled") or body.block.is_error:
                continue
            m = _SLICE.match(text)
            if m is None:
                problems.append(f"seq {e.seq}: unparsable context answer {text[:120]!r}")
                continue
            ref, a, b, n, fence = m.group(1), *map(int, m.group(2, 3, 4)), m.group(5)
            data = text[m.end() :]
            closing = f"\nDATA {fence}>>>"
            if not data.endswith(closing):
                problems.append(f"seq {e.seq}: no closing fence")
                continue
            data = data[: -len(closing)]
            original = originals.get(ref)
            if original is None:
                problems.append(f"seq {e.seq}: read {ref}, which no tool result of the log holds")
            elif (n, data) != (len(original), original[a:b]):
                problems.append(f"seq {e.seq}: slice {a}-{b} of {ref} differs from the original")
    return problems


def budget_problems(requests: list[ModelRequest], budget: int) -> list[str]:
    """The requests over ``budget`` (those the provider is asked to clear or compact itself
    aside: their recorded estimate is checked by :func:`replay_problems`)."""
    out = []
    for i, r in enumerate(requests):
        if r.context_edits:
            continue
        est = estimate_tokens(r.messages) + request_overhead_tokens(r.system, r.tools)
        if est > budget:
            out.append(f"request {i}: {est} tokens over the budget {budget}")
    return out


def replay_problems(cp: Checkpointer, sid: str) -> list[str]:
    """The recorded requests of ``sid`` that replay does not recompute, and those whose
    recomputed estimate is not the recorded one or is over the recorded budget."""
    events = list(cp.read(sid))
    report = verify_replay(events)
    out = [f"{sid} seq {c.seq}: {c.problem or 'hash differs'}" for c in report.mismatches]
    by_seq = {e.seq: e.body for e in events}
    for c in report.checks:
        record, status = by_seq[c.seq], by_seq.get(c.seq - 1)
        assert isinstance(record, ModelRequestRecord)
        if isinstance(status, ContextStatus):
            if c.tokens != record.token_estimate or c.tokens != status.tokens_after:
                out.append(
                    f"{sid} seq {c.seq}: recomputed {c.tokens} tokens, recorded "
                    f"{record.token_estimate} / {status.tokens_after}"
                )
            if c.tokens is None or c.tokens > status.budget:
                out.append(f"{sid} seq {c.seq}: {c.tokens} tokens over {status.budget}")
    return out


# -- the driver -------------------------------------------------------------------------------


@dataclass
class Mix:
    seed: int
    backend: str
    tmp: Path
    ops: int
    max_size: int
    log: list[str] = field(default_factory=list)
    stats: dict[str, str] = field(default_factory=dict)
    read_errors: list[str] = field(default_factory=list)

    def checkpointer(self) -> Checkpointer:
        if self.backend == "memory":
            return memory_checkpointer()
        if self.backend == "file":
            return file_checkpointer(self.tmp / "home")
        return sqlite_checkpointer(self.tmp / "log.db")

    def run(self) -> None:  # noqa: PLR0915 -- one driver loop, read top to bottom
        rng = random.Random(self.seed)
        budget = rng.choice([3_500, 8_000, 16_000, 32_000])
        options = ContextOptions(
            budget_tokens=budget,
            archive_threshold_bytes=rng.choice([512, 2048, 16_384]),
            keep_recent_results=rng.choice([0, 1, 4]),
            preview_chars=rng.choice([0, 40, 400]),
            planner=self._planner(rng),
            planner_timeout_s=5,
            idle_compact_after=rng.choice([None, None, 0.01, 0.1]),
        )
        brain = Brain(random.Random(rng.randrange(2**32)), self.max_size)
        capabilities = rng.choice([(), (), ("clear_tool_uses",), ("compact", "clear_thinking")])
        provider = scripted(
            [brain] * 100_000,
            capabilities=capabilities,
            stream_chunk=rng.choice([None, 1000]),
        )
        compactor = token_budget_compactor(budget // 3) if rng.random() < 0.3 else None
        self.log.append(
            f"budget={budget} options={options} compactor={compactor} capabilities={capabilities}"
        )
        (self.tmp / "work").mkdir(exist_ok=True)
        with (
            self.checkpointer() as cp,
            create_lite_agent(
                model=provider,
                model_name="m",
                workdir=self.tmp / "work",
                tools=[emit, echo],
                checkpointer=cp,
                context=options,
                max_tokens=256,
                max_turns=12,
                compactor=compactor,
                idle_timeout_s=rng.choice([None, 0.01, 0.2]),
            ) as agent,
        ):
            sessions = [agent.session_id]
            before = {s: list(cp.read(s)) for s in sessions}
            for op in range(self.ops):
                sid = rng.choice(sessions)
                kind = rng.choices(
                    ["send", "huge", "compact", "restore", "fork", "idle"],
                    [10, 1, 2, 1, 1, 1],
                )[0]
                self.log.append(f"op {op}: {kind} on {sid}")
                seen = len(provider.requests)
                truncated = False
                if kind in ("send", "huge"):
                    text = (
                        content(op, budget * 4)
                        if kind == "huge"
                        else f"prompt {op}: " + content(op, rng.randrange(1, budget // 2))
                    )
                    brain.steps, brain.max_steps = 0, rng.choice([1, 2, 3, 5, 20])
                    self._send(agent, sid, text, brain)
                elif kind == "compact":
                    instructions = rng.choice([None, "keep decisions", "東京 👩‍💻"])
                    try:
                        agent.compact(instructions, session_id=sid)
                    except LiteAgentError as e:
                        self.log.append(f"  compact raised {type(e).__name__}: {e}")
                elif kind in ("restore", "fork"):
                    points = agent.list_checkpoints(sid)
                    try:
                        if points and kind == "restore":
                            agent.restore(sid, rng.choice(points).seq)
                            truncated = True
                        elif points:
                            new = agent.fork(sid, rng.choice(points).seq)
                            sessions.append(new)
                            before[new] = []
                    except LiteAgentError as e:  # busy with an idle compaction
                        self.log.append(f"  {kind} raised {type(e).__name__}: {e}")
                else:
                    time.sleep(rng.choice([0.02, 0.1]))
                self.check(budget_problems(provider.requests[seen:], budget))
                now = list(cp.read(sid))
                if not truncated:
                    old = before.get(sid, [])
                    assert now[: len(old)] == old, ("the log was rewritten", self.log)
                before[sid] = now
                self.check(replay_problems(cp, sid))
                self.check(readback_problems(now))
            for s in sessions:
                events = list(cp.read(s))
                self.check(replay_problems(cp, s))
                self.check(readback_problems(events))
                kinds = [e.kind for e in events]
                reads = [
                    e.body.block
                    for e in events
                    if isinstance(e.body, ToolResult)
                    and e.body.tool_name in ("context", "read_spilled")
                ]
                self.read_errors += [str(b.content) for b in reads if b.is_error]
                failed = sum(b.is_error is True for b in reads)
                self.stats[s] = (
                    f"{len(events)} events, {kinds.count('model_request')} requests, "
                    f"{kinds.count('content_archived')} archived, {kinds.count('compaction')} "
                    f"compactions, {len(reads) - failed}/{len(reads)} reads ok, "
                    f"{kinds.count('turn_aborted')} aborted"
                )

    def check(self, problems: list[str]) -> None:
        assert not problems, (problems, self.log[-6:])

    def _planner(self, rng: random.Random) -> Any:
        if rng.random() < 0.6:
            return None
        answers = ["summary ✓", "", "東京 " * 50]

        def planner(messages: Any, *, cancel: Any) -> str:
            return answers[len(messages) % len(answers)]

        return planner

    def _send(self, agent: Any, sid: str, text: str, brain: Brain) -> None:
        try:
            agent.send(text, session_id=sid)
        except LiteAgentError as e:
            self.log.append(f"  send raised {type(e).__name__}: {str(e)[:200]}")
            if not isinstance(e, ContextBudgetError | ContextOverflowError):
                raise
        else:
            return
        # nothing wedged: a short prompt answered with words goes through
        brain.quiet = True
        try:
            agent.send("short and sweet", session_id=sid)
        finally:
            brain.quiet = False


def mix(tmp: Path, seed: int, backend: str, ops: int, max_size: int) -> Mix:
    m = Mix(seed, backend, tmp, ops, max_size)
    m.run()
    return m


@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
@pytest.mark.parametrize("seed", range(4))
def test_context_mix(tmp_path: Path, seed: int, backend: str) -> None:
    """Four seeded mixes of 24 operations per backend keep the invariants in the module
    docstring."""
    mix(tmp_path, seed * 7919 + len(backend), backend, ops=24, max_size=1_200_000)


@pytest.mark.soak
@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
@pytest.mark.parametrize("seed", range(40))
def test_context_mix_soak(tmp_path: Path, seed: int, backend: str) -> None:
    """The soak run: forty seeded mixes of 40 operations per backend keep the same invariants."""
    mix(tmp_path, 10_000 + seed * 7919 + len(backend), backend, ops=40, max_size=3_000_000)


# -- regressions found by the mix -------------------------------------------------------------


class _SlowCompactor(Compactor):
    """A compactor that runs until it is cancelled (an idle compaction caught in progress)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Any = None,
        instructions: str | None = None,
        cancel: CancelToken | None = None,
    ) -> CompactResult:
        self.started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if cancel is not None and cancel.cancelled:
                self.cancelled.set()
                raise OperationCancelledError(cancel.reason or "cancelled")
            time.sleep(0.01)
        return CompactResult(
            messages=tuple(messages), changed=False, tokens_before=1, tokens_after=1
        )


def _long_turn() -> tuple[list[AssistantMessage], AssistantMessage]:
    """Six ``emit`` calls of 8,000 tokens each (past the 6,000-token budget), and a reply."""
    long = [
        AssistantMessage(
            content=(ToolUseBlock(f"toolu_{i}", "emit", {"seed": i, "size": 8_000}),),
            stop_reason="tool_use",
        )
        for i in range(6)
    ]
    return long, AssistantMessage(content=(TextBlock("done"),), stop_reason="end_turn")


def test_a_send_during_an_idle_compaction_cancels_it_instead_of_failing(tmp_path: Path) -> None:
    """A send that arrives while the idle compaction (maintenance the agent started by itself)
    holds the session used to fail with AgentBusyError ("held for maintenance"): now the send
    cancels the idle compaction, waits for it to stop, and runs; the log keeps every event."""
    slow = _SlowCompactor()
    long, done = _long_turn()
    cp = memory_checkpointer()
    with create_lite_agent(
        model=scripted([*long, done, done]),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=cp,
        compactor=slow,
        context={"budget_tokens": 6_000, "idle_compact_after": 0.05},
    ) as agent:
        agent.send("work")
        before = list(cp.read(agent.session_id))
        assert slow.started.wait(10)
        assert "done" == agent.send("go on").text
        assert slow.cancelled.is_set()
        after = list(cp.read(agent.session_id))
    assert before == after[: len(before)]
    assert verify_replay(after).ok


def test_an_async_send_during_an_idle_compaction_cancels_it_off_the_loop(tmp_path: Path) -> None:
    """The asyncio send does the same, waiting for the cancelled idle compaction on the agent's
    pool, not on the event loop."""
    slow = _SlowCompactor()
    long, done = _long_turn()

    async def run() -> str:
        async with create_async_lite_agent(
            model=scripted([*long, done, done]),
            model_name="m",
            workdir=tmp_path,
            tools=[emit],
            checkpointer=memory_checkpointer(),
            compactor=slow,
            context={"budget_tokens": 6_000, "idle_compact_after": 0.05},
        ) as agent:
            await agent.send("work")
            assert await asyncio.to_thread(slow.started.wait, 10)
            return (await agent.send("go on")).text

    assert "done" == asyncio.run(run())
    assert slow.cancelled.is_set()


def test_a_compact_during_an_idle_compaction_cancels_it_instead_of_failing(
    tmp_path: Path,
) -> None:
    """The sibling of the send: ``agent.compact()`` asked for while the idle compaction runs
    cancels it and runs, instead of raising AgentBusyError."""
    slow = _SlowCompactor()
    long, done = _long_turn()
    with create_lite_agent(
        model=scripted([*long, done]),
        model_name="m",
        workdir=tmp_path,
        tools=[emit],
        checkpointer=memory_checkpointer(),
        compactor=slow,
        context={"budget_tokens": 6_000, "idle_compact_after": 0.05},
    ) as agent:
        agent.send("work")
        assert slow.started.wait(10)
        slow.started.clear()
        with pytest.raises(OperationCancelledError):  # the slow compactor runs until cancelled
            agent.compact(cancel=_cancel_later(slow))
        assert slow.cancelled.is_set()


def _cancel_later(slow: _SlowCompactor) -> CancelToken:
    token = CancelToken()

    def run() -> None:
        if slow.started.wait(10):
            token.cancel("enough")

    threading.Thread(target=run, daemon=True).start()
    return token
