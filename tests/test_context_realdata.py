"""The passes and compactors on recorded trajectories: the small set shipped in
``tests/data/trajectories``, or the folder ``$LITEAGENT_TRAJECTORIES`` names.

Every pass and compactor keeps the contract's invariants on every file, at fixed settings and at
settings scaled to each file (a quarter of its size), and the scaled ones change every file with
enough turns. Most trajectories are one long task (one prompt, then many tool calls); a turn is
one agent step (:mod:`liteagent.context._turns`), so those are many turns and can be shortened.
Some files end with an unanswered ``tool_use``; it is in the most recent turn and stays. The
tests assert what holds for any set of trajectories, never counts of one set.

The token estimate (3 bytes per token plus per-block and per-message overheads), measured on a
set of 25 trajectories (the estimate test prints the table; run with ``-s``): content bytes /
estimate was 2.86 to 3.00 per file, 2.96 overall; JSONL file bytes /
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
from liteagent.eventlog import messages_from_dicts
from liteagent.eventlog.types import Message, ToolResultBlock

pytestmark = pytest.mark.realdata

SUBJECTS = {
    **pass_subjects(budget_bytes=50_000, snip_tokens=50_000),
    **compactor_subjects(budget_bytes=50_000, max_tokens=20_000),
}
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
    problems = {
        path.name: found
        for path in trajectory_files
        if (found := invariant_problems(name, SUBJECTS[name], list(load(path))))
    }
    assert {} == problems


def _result_bytes(messages: list[Message]) -> int:
    """UTF-8 bytes of the string tool-result bodies in ``messages``."""
    return sum(
        len(b.content.encode("utf-8", "surrogatepass"))
        for m in messages
        for b in m.content
        if type(b) is ToolResultBlock and isinstance(b.content, str)
    )


MOVABLE_BYTES_NEEDED = 1_000
"""Tool-result bytes before the most recent turn below which a subject may rightly change
nothing: a removal or spill marker costs a few hundred bytes itself (a chat without tool
results, or with a few short ones, is left as it is)."""


def _actionable(messages: tuple[Message, ...], turns: int) -> bool:
    """Whether a file gives every subject something to act on: ``turns`` turns, and tool
    results before the most recent one worth more than a marker."""
    split = split_turns(list(messages))
    movable = _result_bytes([m for t in split[:-1] for m in t])
    return len(split) >= turns and movable >= MOVABLE_BYTES_NEEDED


def scaled_subjects(messages: list[Message]) -> dict[str, Run]:
    """Every subject with settings at a quarter of ``messages``' own size: the tool-result budget
    at a quarter of the bytes of the results it may move (those before the most recent turn),
    token limits at a quarter of the estimate."""
    movable = _result_bytes([m for t in split_turns(messages)[:-1] for m in t])
    tokens = estimate_tokens(messages)
    return {
        **pass_subjects(budget_bytes=max(movable // 4, 1), snip_tokens=tokens // 4),
        **compactor_subjects(budget_bytes=max(movable // 4, 1), max_tokens=tokens // 4),
    }


@pytest.mark.parametrize("name", NAMES)
def test_realdata_settings_at_a_quarter_of_a_file_change_it(
    name: str, trajectory_files: list[Path]
) -> None:
    """Each subject, with settings at a quarter of a file's own size, changes every file with
    enough turns and tool results for it to act on, and keeps the contract's invariants while
    doing so."""
    needed = TURNS_NEEDED.get(name, 2)
    eligible = [p for p in trajectory_files if _actionable(load(p), needed)]
    if not eligible:
        pytest.skip(
            f"no trajectory has the {needed} turns and the tool results {name!r} needs to act on"
        )
    unchanged, problems = [], {}
    for path in eligible:
        messages = list(load(path))
        run = scaled_subjects(messages)[name]
        if run(messages)[0] == messages:
            unchanged.append(path.name)
        if found := invariant_problems(name, run, messages):
            problems[path.name] = found
    assert ([], {}) == (unchanged, problems)


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _json_bytes(value: Any) -> int:
    return _utf8(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _block_bytes(block: dict[str, Any]) -> int:
    """UTF-8 bytes of what one API block carries, measured on its JSON: a text, thinking, a tool
    name and its input (compact JSON), a tool result's body, redacted thinking's data, and any
    other block (an image, a type liteagent keeps as it came) as its compact JSON."""
    kind = block.get("type")
    if kind == "text":
        return _utf8(block["text"])
    if kind == "thinking":
        return _utf8(block["thinking"])
    if kind == "redacted_thinking":
        return _utf8(block["data"])
    if kind == "tool_use":
        return _utf8(block["name"]) + _json_bytes(block["input"])
    if kind == "tool_result":
        body = block.get("content")
        if body is None:
            return 0
        return _utf8(body) if isinstance(body, str) else sum(_block_bytes(b) for b in body)
    return _json_bytes(block)


def _content_bytes(dicts: list[dict[str, Any]]) -> int:
    """UTF-8 bytes of what the messages of a trajectory carry (a string content is one text)."""
    return sum(
        _utf8(m["content"])
        if isinstance(m["content"], str)
        else sum(_block_bytes(b) for b in m["content"])
        for m in dicts
    )


def test_the_estimate_is_the_content_at_3_bytes_per_token_plus_fixed_overheads(
    trajectory_files: list[Path],
) -> None:
    """On every file, the estimate counts each content byte (measured on the JSON) at 3 bytes per
    token and adds only fixed overheads: content / 3 <= estimate <= content / 3 + 5 per block (4,
    and 1 of rounding) + 4 per message. ``-s`` prints the bytes per estimated token."""
    rows = []
    totals = [0, 0, 0]
    outside = []
    for path in trajectory_files:
        dicts = [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        messages = load(path)
        content = _content_bytes(dicts)
        size = path.stat().st_size
        tokens = estimate_tokens(messages)
        overheads = 5 * sum(len(m.content) for m in messages) + 4 * len(messages)
        if not content / 3 <= tokens <= content / 3 + overheads:
            outside.append((path.name, content, tokens, overheads))
        rows.append((path.name, size / tokens, content / tokens))
        totals = [totals[0] + size, totals[1] + content, totals[2] + tokens]
    print("\nfile bytes/estimate, content bytes/estimate")
    for name, by_file, by_content in rows:
        print(f"  {name:55} {by_file:5.2f} {by_content:5.2f}")
    print(f"  {'all':55} {totals[0] / totals[2]:5.2f} {totals[1] / totals[2]:5.2f}")
    assert [] == outside
