"""Shared by the context tests: a strategy for valid conversations, the compaction subjects under
test, and checkers for the invariants of ``liteagent.context._contract``.

Each checker returns a list of problems (empty when the invariant holds), so a test reads
``assert [] == check(...)`` and a failure names what broke.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from liteagent.context import (
    SPILL_PREFIX,
    CompactResult,
    default_compactor,
    estimate_tokens,
    memory_spill_store,
    micro_pass,
    snip_pass,
    split_turns,
    token_budget_compactor,
    tool_result_budget_pass,
)
from liteagent.context._turns import is_prompt
from liteagent.eventlog.types import (
    Block,
    Message,
    RawBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

REMOVAL_PREFIX = "[liteagent: "
CLEARED_PREFIX = "[liteagent:cleared "

# ---------------------------------------------------------------------------------------------
# Hand-built conversations

Body = str | tuple[Block, ...]


def user(*texts: str) -> Message:
    return Message(role="user", content=tuple(TextBlock(text=t) for t in texts))


def assistant(text: str, *calls: str) -> Message:
    uses = tuple(ToolUseBlock(id=c, name="bash", input={"command": c}) for c in calls)
    return Message(role="assistant", content=(TextBlock(text=text), *uses))


def results(*bodies: tuple[str, Body]) -> Message:
    return Message(
        role="user", content=tuple(ToolResultBlock(tool_use_id=i, content=c) for i, c in bodies)
    )


def turn(name: str, **bodies: Body) -> list[Message]:
    """A prompt, one assistant message calling a tool per body, the results, a final reply."""
    if not bodies:
        return [user(f"prompt {name}"), assistant(f"reply {name}")]
    return [
        user(f"prompt {name}"),
        assistant(f"working on {name}", *bodies),
        results(*bodies.items()),
        assistant(f"done {name}"),
    ]


# ---------------------------------------------------------------------------------------------
# Generated conversations

_ALPHABET = st.characters(codec="utf-8", categories=("L", "N", "P", "Zs"))
_SHORT = st.text(_ALPHABET, max_size=20)
_LARGE = st.builds(
    lambda unit, n: unit * n, st.text(_ALPHABET, min_size=1, max_size=5), st.integers(100, 2500)
)


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 6, max_steps: int = 3) -> list[Message]:
    """A valid conversation: starts with a user prompt, roles alternate, each assistant
    ``tool_use`` is answered by a ``tool_result`` in the next user message (results in any order,
    then maybe a text block); every turn but the last ends with an assistant text; the last turn
    may end with a user message (pending) or with unanswered tool calls. Texts are unique (a
    counter prefix) and some tool results are large, tuples of blocks, images or absent."""
    counter = itertools.count()

    def text() -> str:
        return f"t{next(counter)} {draw(_SHORT)}"

    def body() -> str | tuple[Block, ...] | msgspec.UnsetType:
        kind = draw(st.sampled_from(["small", "large", "large", "blocks", "image", "unset"]))
        if kind == "small":
            return draw(_SHORT)
        if kind == "large":
            return f"r{next(counter)} " + draw(_LARGE)
        if kind == "blocks":
            n = draw(st.integers(1, 3))
            return tuple(
                TextBlock(text=text() + draw(st.sampled_from(["", "x" * 3000]))) for _ in range(n)
            )
        if kind == "image":
            data = "QUJD" * draw(st.integers(1, 800))
            image = RawBlock(
                data={
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": data},
                }
            )
            return (TextBlock(text=text()), image)
        return UNSET

    messages: list[Message] = []
    turns = draw(st.integers(1, max_turns))
    for t in range(turns):
        last = t == turns - 1
        prompt: list[Block] = [TextBlock(text=text())]
        if draw(st.booleans()):
            prompt.append(TextBlock(text=text()))
        messages.append(Message(role="user", content=tuple(prompt)))
        steps = draw(st.integers(0, max_steps))
        for s in range(steps):
            ids = [f"toolu_{next(counter)}" for _ in range(draw(st.integers(1, 3)))]
            blocks: list[Block] = []
            if draw(st.booleans()):
                blocks.append(ThinkingBlock(thinking=text(), signature="sig"))
            if draw(st.booleans()):
                blocks.append(TextBlock(text=text()))
            blocks += [ToolUseBlock(id=i, name="bash", input={"command": text()}) for i in ids]
            messages.append(Message(role="assistant", content=tuple(blocks)))
            if last and s == steps - 1 and draw(st.booleans()):
                return messages  # the final calls stay unanswered
            results: list[Block] = [
                ToolResultBlock(
                    tool_use_id=i,
                    content=body(),
                    is_error=draw(st.sampled_from([UNSET, False, True])),
                )
                for i in draw(st.permutations(ids))
            ]
            if draw(st.booleans()):
                results.append(TextBlock(text=text()))
            messages.append(Message(role="user", content=tuple(results)))
        if not last or draw(st.booleans()):
            messages.append(Message(role="assistant", content=(TextBlock(text=text()),)))
    return messages


# ---------------------------------------------------------------------------------------------
# Subjects: every pass and compactor, as a fresh-object factory and a uniform runner

Run = Callable[[Sequence[Message]], tuple[list[Message], Any]]


def _pass(make: Callable[[], Any]) -> Run:
    def run(messages: Sequence[Message]) -> tuple[list[Message], Any]:
        out, detail = make()(messages)
        return out, detail

    return run


def _compactor(make: Callable[[], Any]) -> Run:
    def run(messages: Sequence[Message]) -> tuple[list[Message], Any]:
        result = make().maybe_compact(messages)
        return list(result.messages), result

    return run


def pass_subjects(budget_bytes: int, snip_tokens: int) -> dict[str, Run]:
    """Every pass, with settings that make it act on conversations of the given scale."""
    return {
        "budget": _pass(lambda: tool_result_budget_pass(budget_bytes, memory_spill_store())),
        "snip": _pass(snip_pass),
        "snip-1-1": _pass(lambda: snip_pass(keep_head_turns=1, keep_tail_turns=1)),
        "snip-tokens": _pass(lambda: snip_pass(keep_tail_turns=1, max_tokens=snip_tokens)),
        "micro": _pass(lambda: micro_pass(keep_recent=1)),
        "micro-0": _pass(lambda: micro_pass(keep_recent=0)),
        "micro-tokens": _pass(lambda: micro_pass(keep_recent=0, max_tokens=snip_tokens)),
    }


def compactor_subjects(budget_bytes: int, max_tokens: int) -> dict[str, Run]:
    """Every compactor, with settings that make it act on conversations of the given scale."""
    return {
        "default": _compactor(
            lambda: default_compactor(budget_bytes=budget_bytes, max_tokens=max_tokens)
        ),
        "default-untriggered": _compactor(
            lambda: default_compactor(budget_bytes=budget_bytes, max_tokens=None)
        ),
        "token-budget": _compactor(lambda: token_budget_compactor(max_tokens)),
        "token-budget-tiny": _compactor(lambda: token_budget_compactor(1)),
    }


TRIMS_FIRST_TURN = {"token-budget", "token-budget-tiny"}
"""Subjects that keep the first user prompt but may drop the rest of its turn."""


# ---------------------------------------------------------------------------------------------
# Invariant checkers


def _is_marker_text(block: Block) -> bool:
    return type(block) is TextBlock and block.text.startswith(REMOVAL_PREFIX)


def _strip_markers(message: Message) -> Message:
    return msgspec.structs.replace(
        message, content=tuple(b for b in message.content if not _is_marker_text(b))
    )


def _rewritten_from(new: Message, old: Message) -> bool:
    """``new`` is ``old`` with removal markers added and tool-result bodies compacted."""
    new = _strip_markers(new)
    if (new.role, new.extra, len(new.content)) != (old.role, old.extra, len(old.content)):
        return False
    for a, b in zip(new.content, old.content, strict=True):
        if a == b:
            continue
        if not (type(a) is ToolResultBlock and type(b) is ToolResultBlock):
            return False
        if (a.tool_use_id, a.is_error, a.extra) != (b.tool_use_id, b.is_error, b.extra):
            return False
        if not (
            isinstance(a.content, str) and a.content.startswith((SPILL_PREFIX, CLEARED_PREFIX))
        ):
            return False
    return True


def align(before: Sequence[Message], after: Sequence[Message]) -> tuple[list[int], int, list[str]]:
    """Match each message of ``after`` to a message of ``before`` in order (verbatim or
    rewritten by a pass). Returns the matched indices of ``before``, the number of stand-alone
    marker messages, and the problems found."""
    matched: list[int] = []
    markers = 0
    problems: list[str] = []
    k = 0
    for n, m in enumerate(after):
        if m.content and all(_is_marker_text(b) for b in m.content):
            markers += 1
            continue
        while k < len(before) and not (m == before[k] or _rewritten_from(m, before[k])):
            k += 1
        if k == len(before):
            problems.append(f"output message {n} matches no input message after the previous one")
            return matched, markers, problems
        matched.append(k)
        k += 1
    return matched, markers, problems


def check_kept_in_order(before: Sequence[Message], after: Sequence[Message]) -> list[str]:
    """Every output message is an input message (verbatim or pass-rewritten) in the same order,
    and there is one removal marker exactly when messages were removed."""
    matched, _, problems = align(before, after)
    if problems:
        return problems
    marker_texts = sum(_is_marker_text(b) for m in after for b in m.content)
    removed = len(before) - len(matched)
    if (removed > 0) != (marker_texts == 1) or marker_texts > 1:
        problems.append(f"{removed} messages removed but {marker_texts} removal markers")
    return problems


def check_whole_turns(
    before: Sequence[Message], after: Sequence[Message], *, may_trim_first_turn: bool = False
) -> list[str]:
    """The output is the input with whole turns removed (or, when allowed, everything of the
    first prompt's turn after the prompt), kept messages verbatim or pass-rewritten, plus markers.

    Searches every such reading of the output (turns kept or dropped, in order), so repeated
    messages (an agent's identical format-error feedback) cannot mislead it."""
    starts = [0]
    for turn in split_turns(before):
        starts.append(starts[-1] + len(turn))
    first = next((i for i, m in enumerate(before) if is_prompt(m)), None)

    def same(k: int, lo: int, hi: int) -> bool:
        return k + hi - lo <= len(after) and all(
            after[k + n] == before[i] or _rewritten_from(after[k + n], before[i])
            for n, i in enumerate(range(lo, hi))
        )

    @functools.cache
    def fits(t: int, k: int) -> bool:
        while k < len(after) and all(_is_marker_text(b) for b in after[k].content):
            k += 1
        if t == len(starts) - 1:
            return k == len(after)
        lo, hi = starts[t], starts[t + 1]
        if same(k, lo, hi) and fits(t + 1, k + hi - lo):
            return True
        if (
            may_trim_first_turn
            and first is not None
            and lo <= first < hi
            and same(k, lo, first + 1)
            and fits(t + 1, k + first + 1 - lo)
        ):
            return True
        return fits(t + 1, k)

    return [] if fits(0, 0) else ["the output is not the input less whole turns"]


def check_pairs(before: Sequence[Message], after: Sequence[Message]) -> list[str]:
    """Every tool_use id has exactly one result in the next message and vice versa (the final
    message may keep calls that were unanswered in the input too)."""
    problems = []
    for i, m in enumerate(after):
        uses = sorted(b.id for b in m.content if type(b) is ToolUseBlock)
        if m.role == "assistant" and i + 1 < len(after):
            answers = sorted(
                b.tool_use_id for b in after[i + 1].content if type(b) is ToolResultBlock
            )
            if uses != answers:
                problems.append(f"message {i} calls {uses}, message {i + 1} answers {answers}")
        results = [b for b in m.content if type(b) is ToolResultBlock]
        if results and (i == 0 or after[i - 1].role != "assistant"):
            problems.append(f"message {i} has tool results with no assistant message before it")
    final = after[-1] if after else None
    same_end = bool(before) and final == before[-1]
    if (
        final is not None
        and final.role == "assistant"
        and not same_end
        and any(type(b) is ToolUseBlock for b in final.content)
    ):
        problems.append("the final message has unanswered calls the input did not have")
    return problems


def check_protected(before: Sequence[Message], after: Sequence[Message]) -> list[str]:
    """The first user prompt and the most recent turn are kept verbatim, and a conversation that
    started with its first user prompt still does."""
    problems = []
    if not before:
        return [] if not after else ["output from an empty conversation"]
    last = split_turns(before)[-1]
    if list(after[-len(last) :]) != last:
        problems.append("the most recent turn is not the verbatim tail of the output")
    first = next((m for m in before if is_prompt(m)), None)
    if first is not None and first not in after:
        problems.append("the first user prompt is not in the output verbatim")
    if is_prompt(before[0]) and (not after or after[0] != before[0]):
        problems.append("the output no longer starts with the first user prompt")
    return problems


def check_alternation(after: Sequence[Message]) -> list[str]:
    """The output starts with a user message and roles alternate."""
    problems = []
    if after and after[0].role != "user":
        problems.append("the output starts with an assistant message")
    problems += [
        f"messages {i - 1} and {i} are both {after[i].role}"
        for i in range(1, len(after))
        if after[i].role == after[i - 1].role
    ]
    return problems


def check_tokens(before: Sequence[Message], after: Sequence[Message]) -> list[str]:
    """The estimated tokens do not increase."""
    b, a = estimate_tokens(before), estimate_tokens(after)
    return [] if a <= b else [f"estimate rose from {b} to {a}"]


def check_deterministic(run: Run, messages: Sequence[Message]) -> list[str]:
    """Two fresh runs give byte-identical output (messages and report/detail)."""
    first = msgspec.msgpack.encode(run(messages))
    second = msgspec.msgpack.encode(run(messages))
    return [] if first == second else ["two fresh runs differ"]


def invariant_problems(name: str, run: Run, before: Sequence[Message]) -> dict[str, list[str]]:
    """Every invariant for subject ``name`` on ``before``, as ``{invariant: problems}`` holding
    only the broken ones (determinism included: it runs the subject twice more)."""
    after, report = run(before)
    found = {
        "kept in order": check_kept_in_order(before, after),
        "whole turns": check_whole_turns(
            before, after, may_trim_first_turn=name in TRIMS_FIRST_TURN
        ),
        "tool pairs": check_pairs(before, after),
        "first prompt and last turn verbatim": check_protected(before, after),
        "alternation": check_alternation(after),
        "estimate non-increasing": check_tokens(before, after),
        "deterministic": check_deterministic(run, before),
    }
    if isinstance(report, CompactResult) and report.changed != (after != list(before)):
        found["changed flag"] = [f"changed={report.changed} but the messages say otherwise"]
    return {k: v for k, v in found.items() if v}


def count_changed(runs: dict[str, Run], examples: int = 100) -> dict[str, int]:
    """How many of ``examples`` generated conversations each subject changes, to show the
    properties are not vacuous. Generation only (no shrinking, no example database), and
    derandomized, so the counts are the same on every run."""
    changed = dict.fromkeys(runs, 0)

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(conversations())
    def probe(conv: list[Message]) -> None:
        for name, run in runs.items():
            changed[name] += run(conv)[0] != conv

    probe()
    return changed
