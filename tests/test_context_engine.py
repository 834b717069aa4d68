"""The ContextEngine's projection: levels, budgets, protection, purity and incrementality, on
generated conversations and on every recorded trajectory."""

from __future__ import annotations

from pathlib import Path

import pytest
from _engine_support import (
    events_for,
    externalized,
    last_turn,
    load_messages,
    log_of,
    stored,
    view_problems,
)

from liteagent.context import (
    ContextBudgetError,
    ContextEngine,
    ContextOptions,
    estimate_tokens,
    project_context,
    verify_replay,
)
from liteagent.context._turns import is_prompt
from liteagent.context._viewhash import combine_view_hash
from liteagent.eventlog import StoredEvent, conversation, fold
from liteagent.eventlog._fold import apply_all
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import (
    ContextSettings,
    ContextStatus,
    Event,
    Message,
    ModelRequestRecord,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

BUDGETS = (4_000, 8_000, 32_000, 100_000)
"""Budgets for the recorded trajectories: the smallest refuses some requests of most files."""


def settings(budget: int, **kw: int) -> ContextSettings:
    return ContextOptions(budget_tokens=budget, **kw).settings(max_tokens=8192)  # type: ignore[arg-type]


def call(i: int, path: str = "a.py", tool: str = "read_file") -> Message:
    return Message(
        "assistant", (TextBlock(f"step {i}"), ToolUseBlock(f"t{i}", tool, {"path": path}))
    )


def result(i: int, body: str) -> Message:
    return Message("user", (ToolResultBlock(f"t{i}", body),))


def task(
    steps: int, size: int = 4000, prompt: str = "fix the bug", first: int = 0
) -> list[Message]:
    """One prompt, ``steps`` reads of different files, a final reply."""
    msgs = [Message("user", (TextBlock(prompt),))]
    for i in range(first, first + steps):
        msgs += [call(i, f"f{i}.py"), result(i, f"{i % 10}" * size)]
    return [*msgs, Message("assistant", (TextBlock("done"),))]


# -- levels --------------------------------------------------------------------------------------


def test_within_budget_the_view_is_the_conversation() -> None:
    """Nothing archived and within budget: level none, the folded conversation as it is."""
    msgs = task(3)
    state = fold(log_of(msgs))
    view = project_context(state, settings(100_000))
    assert ("none", tuple(conversation(state))) == (view.level, view.messages)
    assert view.tokens_before == view.tokens_after == estimate_tokens(msgs)


def test_archived_results_are_always_shown_as_references() -> None:
    """A result over the threshold shows its reference and preview even within budget."""
    msgs = task(2, size=20_000)
    view = project_context(fold(log_of(msgs)), settings(1_000_000))
    assert "externalize" == view.level
    assert list(view.messages) == externalized(msgs)
    assert view.tokens_after < view.tokens_before


def test_normalize_clears_old_results_and_keeps_the_recent_ones() -> None:
    """Over budget, old results become placeholders; the newest keep_recent stay."""
    msgs = task(10, size=3000)
    budget = estimate_tokens(msgs) - 1000
    view = project_context(fold(log_of(msgs)), settings(budget, keep_recent_results=3))
    bodies = [b.content for m in view.messages for b in m.content if type(b) is ToolResultBlock]
    assert "normalize" == view.level
    assert all(str(b).startswith("[liteagent:cleared ") for b in bodies[:7])
    assert [f"{i}" * 3000 for i in (7, 8, 9)] == bodies[7:]


def test_normalize_leaves_out_superseded_reads() -> None:
    """A read of a file written later is left out, even among the recent results."""
    msgs = [
        Message("user", (TextBlock("go"),)),
        call(0, "a.py"),
        result(0, "old a" * 500),
        call(1, "a.py", "write_file"),
        result(1, "ok"),
        call(2, "b.py"),
        result(2, "b" * 3000),
        Message("assistant", (TextBlock("done"),)),
    ]
    view = project_context(
        fold(log_of(msgs)), settings(estimate_tokens(msgs) - 100, keep_recent_results=10)
    )
    body = view.messages[2].content[0]
    assert isinstance(body, ToolResultBlock)
    assert str(body.content).startswith("[liteagent:superseded t0: a.py")


def test_select_keeps_the_newest_turns_that_fit() -> None:
    """Far over budget: the first prompt, a marker, and the newest whole steps."""
    msgs = task(200, size=3000)
    view = project_context(fold(log_of(msgs)), settings(8_000))
    assert "select" == view.level
    assert view.tokens_after <= 8_000
    assert [] == view_problems(view, msgs, last_turn(msgs))
    assert "earlier messages are left out" in view.messages[0].content[1].text  # type: ignore[union-attr]


def test_select_keeps_the_latest_prompt() -> None:
    """A later user prompt older than the kept turns is kept, after the first one."""
    msgs = [*task(100), *task(100, prompt="now add tests", first=100)]
    view = project_context(fold(log_of(msgs)), settings(4_000))
    assert "select" == view.level
    first = view.messages[0]
    assert ["fix the bug", "now add tests"] == [
        b.text for b in first.content if type(b) is TextBlock and not b.text.startswith("[")
    ]


def test_a_budget_below_the_protected_parts_raises() -> None:
    """When the first prompt and the current turn alone exceed the budget: ContextBudgetError,
    with the numbers."""
    msgs = [Message("user", (TextBlock("x" * 30_000),)), call(0), result(0, "y")]
    with pytest.raises(ContextBudgetError) as info:
        project_context(fold(log_of(msgs)), settings(1_000))
    assert info.value.budget == 1_000
    assert info.value.tokens > 1_000


def test_options_validate() -> None:
    """Bad options are refused by name; a dict of fields works; unknown fields are refused."""
    with pytest.raises(InvalidArgumentError, match="budget_tokens"):
        ContextOptions(budget_tokens=0)
    with pytest.raises(InvalidArgumentError, match="planner_timeout_s"):
        ContextOptions(planner_timeout_s=-1)
    with pytest.raises(InvalidArgumentError, match="unknown context option"):
        ContextOptions.of({"budget": 5})
    assert 5 == ContextOptions.of({"budget_tokens": 5}).budget_tokens
    assert 200_000 - 8192 == ContextOptions().budget_for(8192)


# -- purity and incrementality -------------------------------------------------------------------


def replay_incrementally(msgs: list[Message], s: ContextSettings, every: int = 1) -> int:
    """Append the messages one by one; after each, the incremental engine's view equals a
    fresh projection's (or both raise). Returns how many views were compared."""
    engine = ContextEngine(s)
    events = []
    compared = 0
    for n, m in enumerate(msgs):
        events += stored(events_for(m), len(events) + 1)
        if n % every and n != len(msgs) - 1:
            continue
        state = fold(events)
        try:
            fresh: object = project_context(state, s)
        except ContextBudgetError as e:
            fresh = (e.tokens, e.budget)
        try:
            incremental: object = engine.project(state)
        except ContextBudgetError as e:
            incremental = (e.tokens, e.budget)
        assert fresh == incremental
        compared += 1
    return compared


def test_the_incremental_engine_equals_a_fresh_projection() -> None:
    """Step by step through a long task with reads, rewrites and large results."""
    msgs = [Message("user", (TextBlock("go"),))]
    for i in range(60):
        msgs += [
            call(i, f"f{i % 7}.py", "write_file" if i % 5 == 4 else "read_file"),
            result(i, f"{i}" * (20_000 if i % 11 == 0 else 1500)),
        ]
    for budget in (6_000, 20_000, 1_000_000):
        assert replay_incrementally(msgs, settings(budget, keep_recent_results=3)) > 0


NOTE_SLACK = 64
"""Tokens a refused view may still have needed beside its protected messages (the select
level's left-out note)."""


def protected_tokens(folded: list[Message]) -> int:
    """The estimate of what a view must keep verbatim: the messages through the first prompt,
    the latest prompt, and the most recent turn with its large results shown as references."""
    prompts = [i for i, m in enumerate(folded) if is_prompt(m)]
    tail = last_turn(folded)
    lead = folded[: prompts[0] + 1] if prompts else []
    start = len(folded) - len(tail)
    latest = [folded[prompts[-1]]] if prompts and len(lead) <= prompts[-1] < start else []
    return estimate_tokens([*lead, *latest, *externalized(tail)])


def refusal_problems(error: ContextBudgetError, budget: int, folded: list[Message]) -> list[str]:
    """What is wrong with refusing ``folded`` at ``budget``: a refusal must say its protected
    part is over this budget, and that part must really not fit."""
    problems = []
    if not error.budget == budget < error.tokens:
        problems.append(f"refused with tokens {error.tokens}, budget {error.budget}")
    if (need := protected_tokens(folded)) + NOTE_SLACK <= budget:
        problems.append(f"refused though the protected messages need only {need} tokens")
    return problems


@pytest.mark.realdata
@pytest.mark.parametrize("budget", BUDGETS)
def test_every_trajectory_within_budget_or_refused(
    budget: int, trajectory_files: list[Path]
) -> None:
    """Every recorded trajectory, projected at the end: within budget, pairs whole, the first
    prompt and the latest turn (externalized) verbatim — or a ContextBudgetError only when the
    messages the view must keep do not fit."""
    problems: dict[str, list[str]] = {}
    for path in trajectory_files:
        msgs = load_messages(path)
        state = fold(log_of(msgs))
        folded = conversation(state)
        try:
            view = project_context(state, settings(budget))
        except ContextBudgetError as e:
            found = refusal_problems(e, budget, folded)
        else:
            found = view_problems(view, folded, externalized(last_turn(folded)))
        if found:
            problems[path.name] = found
    assert {} == problems


def replay_as_a_session(
    msgs: list[Message], s: ContextSettings
) -> tuple[list[StoredEvent], list[str], int]:
    """Replay ``msgs`` the way a session runs them: before each assistant message, project the
    view with one live engine, check it (or the refusal), and record it (context status and
    request record, as the session appends them) with the message. Returns the log, the
    problems found, and how many requests were refused with ContextBudgetError."""
    engine = ContextEngine(s)
    digest = "ab" * 32  # the request without its messages: the same for every request here
    events: list[StoredEvent] = []
    state = fold([])
    problems: list[str] = []
    refused = 0
    for m in msgs:
        new: list[Event] = []
        if m.role == "assistant":
            folded = conversation(state)
            try:
                view = engine.project(state)
            except ContextBudgetError as e:
                refused += 1
                problems += refusal_problems(e, s.budget_tokens, folded)
            else:
                problems += view_problems(view, folded, externalized(last_turn(folded)))
                new += [
                    ContextStatus(
                        level=view.level,
                        tokens=view.tokens_before,
                        budget=view.budget,
                        tokens_after=view.tokens_after,
                        actions=view.actions,
                        settings=s,
                    ),
                    ModelRequestRecord(
                        view_hash=combine_view_hash(digest, view.digest),
                        token_estimate=view.tokens_after,
                        request_digest=digest,
                    ),
                ]
        batch = stored([*new, *events_for(m)], len(events) + 1)
        events += batch
        state = apply_all(state, batch)
    return events, problems, refused


@pytest.mark.realdata
@pytest.mark.parametrize("budget", BUDGETS)
def test_every_trajectory_replayed_through_the_engine(
    budget: int, trajectory_files: list[Path]
) -> None:
    """Every recorded trajectory, replayed request by request through one live engine: each
    view within budget, pairs whole, the first prompt and the latest turn (externalized)
    verbatim, or a ContextBudgetError only when the messages it must keep do not fit; every
    request not refused is recorded, and verify_replay recomputes each one from the log."""
    problems: dict[str, list[str]] = {}
    unverified: dict[str, list[int]] = {}
    unchecked: dict[str, tuple[int, int]] = {}
    for path in trajectory_files:
        msgs = load_messages(path)
        events, found, refused = replay_as_a_session(msgs, settings(budget))
        if found:
            problems[path.name] = sorted(set(found))
        report = verify_replay(events)
        if not report.ok:
            unverified[path.name] = [c.seq for c in report.mismatches]
        asked = sum(1 for m in msgs if m.role == "assistant") - refused
        if len(report.checks) != asked:
            unchecked[path.name] = (len(report.checks), asked)
    assert ({}, {}, {}) == (problems, unverified, unchecked)


@pytest.mark.realdata
def test_the_incremental_engine_equals_a_fresh_projection_on_trajectories(
    trajectory_files: list[Path],
) -> None:
    """On every trajectory, every tenth step, at 32k tokens."""
    for path in trajectory_files:
        replay_incrementally(load_messages(path), settings(32_000), every=10)
