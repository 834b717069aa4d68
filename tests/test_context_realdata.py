"""The passes and compactors on recorded trajectories: the small set shipped in
``tests/data/trajectories``, or the folder ``$LITEAGENT_TRAJECTORIES`` names.

Every pass and compactor keeps the contract's invariants on every file, at fixed settings and at
settings scaled to each file (a quarter of its size), and the scaled ones change every file with
enough turns. Most trajectories are one long task (one prompt, then many tool calls); a turn is
one agent step (:mod:`liteagent.context._turns`), so those are many turns and can be shortened.
Some files end with an unanswered ``tool_use``; it is in the most recent turn and stays. The
tests assert what holds for any set of trajectories, never counts of one set.

The token estimate (3 bytes per token plus per-block and per-message overheads), measured on a
set of 25 trajectories (``test_estimate_ratio_on_the_trajectories`` prints the table; run with
``-s``): content bytes / estimate was 2.86 to 3.00 per file, 2.96 overall; JSONL file bytes /
estimate 3.07 to 3.52, 3.23 overall. Claude's tokenizer averages about 3.5 to 4.5 bytes per
token on English and code, so the estimate is probably high by about 20 to 50 percent. No
tokenizer is available offline, so that last figure is not measured here.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from _context_checks import Run, compactor_subjects, invariant_problems, pass_subjects

from liteagent.context import estimate_tokens, split_turns
from liteagent.eventlog import Message, ToolResultBlock, messages_from_dicts

pytestmark = pytest.mark.realdata

SUBJECTS = {**pass_subjects(budget_bytes=50_000, snip_tokens=50_000),
            **compactor_subjects(budget_bytes=50_000, max_tokens=20_000)}
NAMES = sorted(SUBJECTS)
TURNS_NEEDED = {"snip": 6, "snip-1-1": 3, "snip-tokens": 3}
"""The fewest turns a file needs for the subject to have something to cut (head + tail + 1);
the others need two: one turn besides the most recent to act on."""


@functools.cache
def load(path: Path) -> tuple[Message, ...]:
    """The messages of one trajectory (cached: the files do not change during a run)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(messages_from_dicts([json.loads(line) for line in lines if line.strip()]))


@pytest.mark.parametrize("name", NAMES)
def test_realdata_keeps_the_contract_invariants(name: str, trajectory_files: list[Path]) -> None:
    """Each invariant holds on every trajectory (the failure names file and invariant)."""
    problems = {path.name: found for path in trajectory_files
                if (found := invariant_problems(name, SUBJECTS[name], list(load(path))))}
    assert {} == problems


def _result_bytes(messages: list[Message]) -> int:
    """UTF-8 bytes of the string tool-result bodies in ``messages``."""
    return sum(len(b.content.encode("utf-8", "surrogatepass")) for m in messages
               for b in m.content if type(b) is ToolResultBlock and isinstance(b.content, str))


def scaled_subjects(messages: list[Message]) -> dict[str, Run]:
    """Every subject with settings at a quarter of ``messages``' own size: the tool-result budget
    at a quarter of the bytes of the results it may move (those before the most recent turn),
    token limits at a quarter of the estimate."""
    movable = _result_bytes([m for t in split_turns(messages)[:-1] for m in t])
    tokens = estimate_tokens(messages)
    return {**pass_subjects(budget_bytes=max(movable // 4, 1), snip_tokens=tokens // 4),
            **compactor_subjects(budget_bytes=max(movable // 4, 1), max_tokens=tokens // 4)}


@pytest.mark.parametrize("name", NAMES)
def test_realdata_settings_at_a_quarter_of_a_file_change_it(
    name: str, trajectory_files: list[Path]
) -> None:
    """Each subject, with settings at a quarter of a file's own size, changes every file with
    enough turns for it to act on, and keeps the contract's invariants while doing so."""
    needed = TURNS_NEEDED.get(name, 2)
    eligible = [p for p in trajectory_files if len(split_turns(load(p))) >= needed]
    if not eligible:
        pytest.skip(f"no trajectory has the {needed} turns {name!r} needs to act")
    unchanged, problems = [], {}
    for path in eligible:
        messages = list(load(path))
        run = scaled_subjects(messages)[name]
        if run(messages)[0] == messages:
            unchanged.append(path.name)
        if found := invariant_problems(name, run, messages):
            problems[path.name] = found
    assert ([], {}) == (unchanged, problems)


def _content_bytes(value: Any, key: str = "") -> int:
    """UTF-8 bytes of what a message carries: texts, thinking, tool results, tool inputs."""
    if key == "input":
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if isinstance(value, str):
        return len(value.encode("utf-8")) if key in ("text", "thinking", "content", "name") else 0
    if isinstance(value, dict):
        return sum(_content_bytes(v, k) for k, v in value.items())
    if isinstance(value, list):
        return sum(_content_bytes(v, key) for v in value)
    return 0


def test_estimate_ratio_on_the_trajectories(trajectory_files: list[Path]) -> None:
    """The estimate counts every content byte at 3 bytes per token or fewer, and its overheads
    stay small: content bytes / estimate lies between 2.5 and 3 on every file."""
    rows = []
    totals = [0, 0, 0]
    for path in trajectory_files:
        dicts = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        content = _content_bytes(dicts)
        size = path.stat().st_size
        tokens = estimate_tokens(load(path))
        rows.append((path.name, size / tokens, content / tokens))
        totals = [totals[0] + size, totals[1] + content, totals[2] + tokens]
    print("\nfile bytes/estimate, content bytes/estimate")
    for name, by_file, by_content in rows:
        print(f"  {name:55} {by_file:5.2f} {by_content:5.2f}")
    print(f"  {'all':55} {totals[0] / totals[2]:5.2f} {totals[1] / totals[2]:5.2f}")
    assert [] == [name for name, _, ratio in rows if not 2.5 <= ratio <= 3.0]
