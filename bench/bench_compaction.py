"""Compaction on the recorded trajectories: token reduction, time and MB/s per compactor, and
linearity (a doubled transcript should take at most 2.3x as long), against decoding the same
transcripts in the same process.

Inputs: every ``*.jsonl`` of the recorded-trajectories folder (``--trajectories``, else
``$LITEAGENT_TRAJECTORIES``). Each line is one message in Anthropic Messages shape.

- **Baseline ("decode").** The raw decode of the same transcript: its JSONL bytes, already in
  memory, split into lines, ``json.loads`` per line, then ``messages_from_dicts``. Each compactor's
  time is printed as a ratio to that decode (best/best, and in brackets the median of per-round
  ratios), and as MB/s of transcript (JSONL bytes, 1 MB = 10^6 bytes, / seconds).
- **Subjects.** The compactors and the single passes that :func:`make_compactors` builds, with
  settings chosen so that each acts on the large files. Every timed call gets a fresh compactor
  (or pass) built before the clock starts, so no state carries over between rounds or files.
- **The LLM compactor** runs with an in-process, deterministic summarizer (:class:`EchoSummarizer`:
  the first 400 characters of the rendered conversation, no model): it measures liteagent's own
  overhead (the base compactor, rendering, chunking, splicing), *not* model latency. "llm" gets a
  fresh compactor per call (no remembered summary); "llm warm" times the second call of the same
  compactor on the same input, which reuses the remembered summary and makes no model call;
  "llm spill-base" has only the budget spill as its base, so the summarizer gets every turn (on
  the long transcripts, several chunks of rolling summary).
- **Per file.** Every round runs each subject on every file (25 timed calls) and the decode of
  every file; the per-file times add up to the round's time. Tokens are
  :func:`~liteagent.context.estimate_tokens` before and after. ``--per-file`` prints a table per
  subject.
- **Linearity.** All trajectories concatenated into one conversation ("x1"), and x1 followed by a
  second copy of itself ("x2"). Concatenation works on the message dicts: every tool id gets a
  suffix naming its transcript's position (``_c<k>``), so ids stay unique across files and in the
  second copy; a transcript that ends with unanswered ``tool_use`` calls gets a user message of
  ``tool_result`` blocks answering them ("interrupted", ``is_error``), and when two user messages
  would meet, a one-line assistant text goes between them. The script checks that x1 and x2 (and
  every compactor output) start with a user message, alternate roles, and pair every ``tool_use``
  with a ``tool_result`` in the next message (only the last message may hold unanswered calls).
  Printed: t(x2) / t(x1) per subject, target <= 2.3x; decode's own ratio is the reference. In
  every round a subject runs on x1 and on x2 back to back (which one first alternates), and the
  verdict uses the median of these per-round ratios: best/best is printed too, but on a shared
  2-CPU machine the best x1 and best x2 rounds often come from different load conditions. The
  Python function calls of one run on x2 and on x1 (cProfile's count, untimed) are compared as
  well: that ratio does not depend on the load, and an O(n^2) Python loop shows up in it.
- **Sanity, not timing.** Each subject runs twice, fresh, on every file, on x1 and on x2: the
  outputs must be equal (determinism) and valid conversations, and every timed call must give
  the same message count and tokens as that check.

    /tmp/venv/bin/python bench/bench_compaction.py [--quick] [--rounds N] [--per-file] [--profile]
        [--trajectories DIR]

``--profile`` prints cProfile's top functions (and a pyinstrument tree, when installed) of each
subject on x2.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import hashlib
import inspect
import itertools
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    Measurement,
    environment,
    fmt_rate,
    fmt_ratio,
    interleave,
    library_fingerprint,
    paired_ratio,
    profile_top,
)

from liteagent.context import (
    Compactor,
    CompactResult,
    default_compactor,
    estimate_tokens,
    llm_compactor,
    memory_spill_store,
    micro_pass,
    run_pipeline,
    snip_pass,
    token_budget_compactor,
    tool_result_budget_pass,
)
from liteagent.eventlog import CancelToken, messages_from_dicts
from liteagent.eventlog._messages import message_text
from liteagent.eventlog.types import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

TARGET = 2.3  # t(x2) <= 2.3 x t(x1)
REPO = Path(__file__).resolve().parent.parent
SUMMARY_CHARS = 400
QUICK_MAX_BYTES = 150_000  # --quick uses only the files up to this size
Run = Callable[[Sequence[Message]], CompactResult]
Outcome = tuple[int, int, int]  # messages, tokens before, tokens after


# -- the subjects ----------------------------------------------------------------------------------


class EchoSummarizer:
    """A deterministic in-process summarizer: the first ``SUMMARY_CHARS`` characters of the
    rendered conversation in the request (no model, no I/O). Counts its calls and the characters
    it was sent."""

    def __init__(self) -> None:
        self.calls = 0
        self.chars = 0

    def complete(
        self,
        request: ModelRequest,
        *,
        cancel: CancelToken | None = None,  # noqa: ARG002 -- the SummarizerModel signature
    ) -> ModelResponse:
        text = "\n".join(message_text(m.content) for m in request.messages)
        self.calls += 1
        self.chars += len(text)
        body = text.split("<conversation>\n", 1)[-1]
        summary = "Summary (bench): " + body[:SUMMARY_CHARS]
        return ModelResponse(
            message=AssistantMessage(content=(TextBlock(summary),), stop_reason="end_turn")
        )


@dataclass
class Subject:
    """One thing to time: ``make()`` builds a fresh runner; ``warm`` primes it on the same input
    before the clock starts (so the timed call is its second one)."""

    name: str
    make: Callable[[], Run]
    settings: str
    warm: bool = False
    summarizers: list[EchoSummarizer] = field(default_factory=list)

    def prepare(self, messages: Sequence[Message]) -> Run:
        run = self.make()
        if self.warm:
            run(messages)
        return run


def _compactor(factory: Callable[[], Compactor]) -> Callable[[], Run]:
    return lambda: factory().maybe_compact


def _single_pass(factory: Callable[[], Any]) -> Callable[[], Run]:
    def make() -> Run:
        p = factory()
        return lambda messages: run_pipeline(messages, [p])

    return make


def _default_kwargs(max_tokens: int | None) -> tuple[dict[str, Any], str]:
    """``max_tokens`` for :func:`default_compactor` when this library version has that trigger
    (it came with the "a turn is one agent step" change); otherwise nothing."""
    if "max_tokens" not in inspect.signature(default_compactor).parameters:
        return {}, " (this version has no max_tokens)"
    shown = "None" if max_tokens is None else f"{max_tokens:_}"
    return {"max_tokens": max_tokens}, f", max_tokens={shown}"


def make_compactors() -> list[Subject]:
    """The compactors and passes measured, with their settings (the one place to adjust them).

    Settings are explicit, not library defaults, so the figures keep their meaning when a default
    changes; they are chosen to make each subject act on the large trajectories.
    """
    budget = 50_000  # bytes of tool-result bodies kept by the budget pass
    trigger = 50_000  # default_compactor's max_tokens: snip and micro act only above it
    llm_threshold = 20_000  # estimated tokens above which the LLM compactor summarizes
    kwargs, shown = _default_kwargs(trigger)

    def default() -> Compactor:
        return default_compactor(budget_bytes=budget, store=memory_spill_store(), **kwargs)

    subjects = [
        Subject(
            "default",
            _compactor(default),
            f"default_compactor(budget_bytes={budget:_}{shown}): budget spill, snip, micro",
        )
    ]
    if kwargs:
        always, shown_always = _default_kwargs(None)
        subjects.append(
            Subject(
                "default always",
                _compactor(
                    lambda: default_compactor(
                        budget_bytes=budget, store=memory_spill_store(), **always
                    )
                ),
                f"default_compactor(budget_bytes={budget:_}{shown_always}): snip and micro act on "
                "every call",
            )
        )
    subjects += [
        Subject(
            "token_budget 20k",
            _compactor(lambda: token_budget_compactor(20_000)),
            "token_budget_compactor(20_000)",
        ),
        Subject(
            "token_budget 50k",
            _compactor(lambda: token_budget_compactor(50_000)),
            "token_budget_compactor(50_000)",
        ),
    ]

    def spill_only() -> Compactor:
        return default_compactor([tool_result_budget_pass(budget, memory_spill_store())])

    for name, base, base_shown, warm in (
        ("llm", default, "'default' above", False),
        ("llm warm", default, "'default' above", True),
        (
            "llm spill-base",
            spill_only,
            f"default_compactor([tool_result_budget_pass({budget:_})])",
            False,
        ),
    ):
        summarizers: list[EchoSummarizer] = []

        def llm(
            summarizers: list[EchoSummarizer] = summarizers, base: Callable[[], Compactor] = base
        ) -> Compactor:
            model = EchoSummarizer()
            summarizers.append(model)
            return llm_compactor(
                model=model, model_name="bench-echo", token_threshold=llm_threshold, base=base()
            )

        subjects.append(
            Subject(
                name,
                _compactor(llm),
                f"llm_compactor(token_threshold={llm_threshold:_}, base={base_shown}; echo "
                f"summarizer, {SUMMARY_CHARS} chars)"
                + ("; the second call of a primed compactor (remembered summary)" if warm else ""),
                warm=warm,
                summarizers=summarizers,
            )
        )
    subjects += [
        Subject(
            "pass budget",
            _single_pass(lambda: tool_result_budget_pass(budget, memory_spill_store())),
            f"tool_result_budget_pass({budget:_}, memory_spill_store())",
        ),
        Subject("pass snip", _single_pass(snip_pass), "snip_pass() (head 1, tail 4 turns)"),
        Subject(
            "pass snip 50k",
            _single_pass(lambda: snip_pass(keep_tail_turns=1, max_tokens=50_000)),
            "snip_pass(keep_tail_turns=1, max_tokens=50_000)",
        ),
        Subject("pass micro", _single_pass(micro_pass), "micro_pass() (keep_recent=3)"),
    ]
    return subjects


# -- inputs ----------------------------------------------------------------------------------------


def find_trajectories(arg: str | None) -> Path:
    candidates = [arg] if arg else [os.environ.get("LITEAGENT_TRAJECTORIES")]
    for c in candidates:
        if c and Path(c).is_dir() and any(Path(c).glob("*.jsonl")):
            return Path(c)
    sys.exit(
        f"no trajectories found (tried {[c for c in candidates if c]}); "
        "pass --trajectories DIR or set LITEAGENT_TRAJECTORIES"
    )


def decode(data: bytes) -> list[Message]:
    """The baseline: JSONL bytes in memory -> json.loads per line -> messages_from_dicts."""
    return messages_from_dicts([json.loads(line) for line in data.splitlines() if line.strip()])


def _retag(block: dict[str, Any], suffix: str) -> dict[str, Any]:
    if block.get("type") == "tool_use":
        return {**block, "id": block["id"] + suffix}
    if block.get("type") == "tool_result":
        return {**block, "tool_use_id": block["tool_use_id"] + suffix}
    return block


def concatenate(
    transcripts: Sequence[list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], int, int]:
    """One conversation of ``transcripts`` in order (see the module docstring); also returns how
    many tool calls were answered "interrupted" and how many assistant joints were inserted."""
    out: list[dict[str, Any]] = []
    answered = joints = 0
    for k, dicts in enumerate(transcripts):
        suffix = f"_c{k}"
        msgs = [
            {**d, "content": [_retag(b, suffix) for b in d["content"]]}
            if isinstance(d.get("content"), list)
            else d
            for d in dicts
        ]
        if out:
            last = out[-1]
            if last["role"] == "assistant" and isinstance(last["content"], list):
                open_ids = [b["id"] for b in last["content"] if b.get("type") == "tool_use"]
                if open_ids:
                    out.append(
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "tool_result",
                                    "tool_use_id": i,
                                    "content": "interrupted",
                                    "is_error": True,
                                }
                                for i in open_ids
                            ],
                        }
                    )
                    answered += len(open_ids)
            if out[-1]["role"] == msgs[0]["role"] == "user":
                out.append(
                    {
                        "role": "assistant",
                        "content": [{"type": "text", "text": f"(transcript {k} follows)"}],
                    }
                )
                joints += 1
        out.extend(msgs)
    return out, answered, joints


def to_jsonl(dicts: Sequence[dict[str, Any]]) -> bytes:
    """The JSONL bytes (the trajectory files are exactly ``json.dumps(d, ensure_ascii=False)``
    per line)."""
    return "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in dicts).encode("utf-8")


def conversation_problems(messages: Sequence[Message]) -> list[str]:
    """Why ``messages`` is not a valid conversation: it must start with a user message, roles must
    alternate, tool_use ids must be unique, and every tool_use must be answered by exactly one
    tool_result in the next message (only the last message may hold unanswered calls)."""
    problems: list[str] = []
    if messages and messages[0].role != "user":
        problems.append("starts with an assistant message")
    seen: set[str] = set()
    for i, m in enumerate(messages):
        if i and messages[i - 1].role == m.role:
            problems.append(f"messages {i - 1} and {i} are both {m.role}")
        uses = [b.id for b in m.content if type(b) is ToolUseBlock]
        results = [b.tool_use_id for b in m.content if type(b) is ToolResultBlock]
        if len(results) != len(set(results)):
            problems.append(f"message {i} answers a tool_use twice")
        if results:
            before = messages[i - 1] if i else None
            asked = {b.id for b in before.content if type(b) is ToolUseBlock} if before else set()
            if set(results) != asked:
                problems.append(
                    f"message {i}: tool_results {sorted(set(results) ^ asked)[:3]} "
                    "do not match the calls of the message before"
                )
        if uses:
            if seen.intersection(uses) or len(uses) != len(set(uses)):
                problems.append(f"message {i} repeats a tool_use id")
            seen.update(uses)
            if i + 1 < len(messages):
                answered = {
                    b.tool_use_id for b in messages[i + 1].content if type(b) is ToolResultBlock
                }
                if answered != set(uses):
                    problems.append(f"message {i}: calls not answered in message {i + 1}")
    return problems


def require_valid(messages: Sequence[Message], what: str) -> None:
    problems = conversation_problems(messages)
    if problems:
        raise AssertionError(
            f"{what} is not a valid conversation: {problems[:5]}"
            + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        )


# -- sanity ----------------------------------------------------------------------------------------


def outcome(result: CompactResult) -> Outcome:
    """What a timed call must reproduce: (messages, tokens before, tokens after)."""
    return len(result.messages), result.tokens_before, result.tokens_after


def checked_run(subject: Subject, messages: tuple[Message, ...], what: str) -> CompactResult:
    """Run ``subject`` twice, fresh; fail unless both outputs are equal, valid and consistent."""
    first = subject.prepare(messages)(messages)
    second = subject.prepare(messages)(messages)
    if first.messages != second.messages or first.passes != second.passes:
        raise AssertionError(f"{subject.name} on {what}: two fresh runs gave different outputs")
    if first.tokens_before != estimate_tokens(messages) or (
        first.tokens_after != estimate_tokens(first.messages)
    ):
        raise AssertionError(f"{subject.name} on {what}: reported tokens differ from the estimate")
    require_valid(first.messages, f"the output of {subject.name} on {what}")
    return first


# -- the timed loops -------------------------------------------------------------------------------


def corpus_loop(run_one: Callable[[int], float], n: int) -> Callable[[], float]:
    """One round: ``run_one(i)`` for every file ``i``; the round's time is the sum."""

    def run() -> float:
        gc.collect()
        return sum(run_one(i) for i in range(n))

    return run


def subject_on(
    subject: Subject,
    inputs: Sequence[tuple[Message, ...]],
    expected: Sequence[Outcome],
    per_file: list[list[float]],
) -> Callable[[int], float]:
    """Time ``subject`` on ``inputs[i]`` (fresh, built and primed before the clock starts)."""

    def run_one(i: int) -> float:
        messages = inputs[i]
        compact = subject.prepare(messages)
        t = time.perf_counter()
        result = compact(messages)
        dt = time.perf_counter() - t
        if outcome(result) != expected[i]:
            raise AssertionError(f"{subject.name}: a timed run differs from the checked run")
        per_file[i].append(dt)
        return dt

    return run_one


def decode_on(blobs: Sequence[bytes], per_file: list[list[float]]) -> Callable[[int], float]:
    def run_one(i: int) -> float:
        t = time.perf_counter()
        decode(blobs[i])
        dt = time.perf_counter() - t
        per_file[i].append(dt)
        return dt

    return run_one


def timed_once(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        gc.collect()
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    return run


def timed_subject(
    subject: Subject, messages: tuple[Message, ...], expected: Outcome
) -> Callable[[], float]:
    def run() -> float:
        compact = subject.prepare(messages)
        gc.collect()
        t = time.perf_counter()
        result = compact(messages)
        dt = time.perf_counter() - t
        if outcome(result) != expected:
            raise AssertionError(f"{subject.name}: a timed run differs from the checked run")
        return dt

    return run


def python_calls(fn: Callable[[], object]) -> int:
    """How many Python-level function calls ``fn()`` makes (cProfile's count): a measure of
    work that does not depend on the machine's load."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    return int(pstats.Stats(prof).total_calls)  # type: ignore[attr-defined]


def profiled(subject: Subject, messages: tuple[Message, ...]) -> Callable[[], object]:
    """A call of ``subject`` for the profiler (which calls it twice): fresh each time, except a
    warm subject, primed once and then timed on its remembered summary."""
    if subject.warm:
        compact = subject.prepare(messages)
        return lambda: compact(messages)
    return lambda: subject.make()(messages)


# -- reporting -------------------------------------------------------------------------------------


COMPACTION_MODULES = tuple(
    f"context/_{m}.py"
    for m in (
        "bodies",
        "compactors",
        "contract",
        "llm",
        "passes",
        "pipeline",
        "render",
        "scope",
        "spill",
        "splice",
        "tokens",
        "turns",
    )
)
"""The modules the measured compactors run (besides eventlog's message types)."""


def _git(*args: str) -> str:
    return subprocess.run(  # noqa: S603 -- fixed git commands on our own repository
        ["git", "-C", str(REPO), *args],  # noqa: S607 -- git from PATH
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def context_fingerprint() -> str:
    """Which library was measured: the git HEAD, the last commit that changed the compaction
    modules, whether they have uncommitted changes, and a hash of their sources."""
    digest = hashlib.sha256()
    for name in COMPACTION_MODULES:
        digest.update(name.encode() + b"\0" + (REPO / name).read_bytes())
    try:
        head = _git("log", "-1", "--format=%h %s")
        last = _git("log", "-1", "--format=%h %s", "--", *COMPACTION_MODULES)
        dirty = _git("status", "--porcelain", "--", *COMPACTION_MODULES).splitlines()
    except (OSError, subprocess.CalledProcessError):
        head = last = "(git unavailable)"
        dirty = []
    state = (
        f"UNCOMMITTED changes in {', '.join(line[3:] for line in dirty)}"
        if dirty
        else "no uncommitted changes"
    )
    return (
        f"git HEAD {head[:90]}\ncompaction modules (context/_{{bodies,compactors,contract,"
        f"llm,passes,pipeline,render,scope,spill,splice,tokens,turns}}.py): sha256 "
        f"{digest.hexdigest()[:12]}, {state}; last changed in {last[:90]}"
    )


def ratio_to(cand: Measurement, base: Measurement) -> tuple[float, float]:
    """cand time / base time: best/best and the median of per-round ratios."""
    return cand.best_time / base.best_time, 1 / paired_ratio(cand, base)


def pct(before: int, after: int) -> float:
    return 100 * (1 - after / before) if before else 0.0


@dataclass
class Corpus:
    """The trajectories (names, JSONL bytes, messages), x1 and x2 (bytes and messages), and what
    each subject gave on them in the sanity check (the timed runs must reproduce it)."""

    names: list[str]
    blobs: list[bytes]
    inputs: list[tuple[Message, ...]]
    big: list[bytes]
    x: list[tuple[Message, ...]]
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)
    big_outcomes: dict[str, list[Outcome]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(map(len, self.blobs))


def load_corpus(folder: Path, quick: bool) -> Corpus:
    """Read and check the trajectories, and build and check x1 and x2."""
    paths = sorted(folder.glob("*.jsonl"))
    if quick:
        paths = [q for q in paths if q.stat().st_size <= QUICK_MAX_BYTES]
    names = [q.name for q in paths]
    blobs = [q.read_bytes() for q in paths]
    inputs = [tuple(decode(b)) for b in blobs]
    for name, messages in zip(names, inputs, strict=True):
        require_valid(messages, name)
    dicts = [[json.loads(line) for line in b.splitlines() if line.strip()] for b in blobs]
    x1_dicts, answered, joints = concatenate(dicts)
    x2_dicts, _, _ = concatenate(dicts + dicts)
    big = [to_jsonl(x1_dicts), to_jsonl(x2_dicts)]
    x1, x2 = (tuple(decode(b)) for b in big)
    if x2[: len(x1)] != x1:
        raise AssertionError("x2 does not start with x1")
    require_valid(x1, "x1")
    require_valid(x2, "x2")
    print(f"trajectories: {folder}: {len(paths)} files, {sum(map(len, blobs)) / 1e6:.2f} MB")
    print(
        f"x1: {len(x1)} messages, {estimate_tokens(x1):_} tokens, {len(big[0]) / 1e6:.2f} MB "
        f"({answered} open tool calls answered 'interrupted', {joints} assistant joints); "
        f"x2: {len(x2)} messages, {len(big[1]) / 1e6:.2f} MB; both checked: alternate, paired"
    )
    return Corpus(names, blobs, inputs, big, [x1, x2])


def check_subjects(subjects: Sequence[Subject], corpus: Corpus) -> None:
    """Determinism and validity of every subject on every file, x1 and x2 (fails loudly)."""
    for s in subjects:
        corpus.outcomes[s.name] = [
            outcome(checked_run(s, m, n)) for m, n in zip(corpus.inputs, corpus.names, strict=True)
        ]
        corpus.big_outcomes[s.name] = [
            outcome(checked_run(s, m, f"x{k}")) for k, m in enumerate(corpus.x, 1)
        ]


def measure_corpus(
    subjects: Sequence[Subject], corpus: Corpus, rounds: int
) -> tuple[dict[str, Measurement], dict[str, list[list[float]]]]:
    """Interleaved rounds over all files: decode and each subject; also per-file times."""
    n = len(corpus.inputs)
    per_file: dict[str, list[list[float]]] = {
        k: [[] for _ in range(n)] for k in ["decode", *(s.name for s in subjects)]
    }
    loops = {"decode": corpus_loop(decode_on(corpus.blobs, per_file["decode"]), n)}
    for s in subjects:
        loops[s.name] = corpus_loop(
            subject_on(s, corpus.inputs, corpus.outcomes[s.name], per_file[s.name]), n
        )
    for loop in loops.values():  # warm up
        loop()
    for times in per_file.values():
        for t in times:
            t.clear()
    return interleave(loops, n, rounds), per_file


def pair_loop(
    one: Callable[[], float], two: Callable[[], float], m1: Measurement, m2: Measurement
) -> Callable[[], float]:
    """One round of a subject on x1 and on x2, back to back (x1 first on even rounds, x2 first
    on odd ones), so that a round's ratio compares two runs close in time."""
    rounds = itertools.count()

    def run() -> float:
        if next(rounds) % 2 == 0:
            a = one()
            b = two()
        else:
            b = two()
            a = one()
        m1.times.append(a)
        m2.times.append(b)
        return a + b

    return run


def measure_linearity(
    subjects: Sequence[Subject], corpus: Corpus, rounds: int
) -> tuple[dict[str, Measurement], dict[str, tuple[int, int]]]:
    """Interleaved rounds of decode and each subject, each on x1 and x2 back to back; and the
    Python calls of one run on x1 and on x2 (untimed)."""
    res: dict[str, Measurement] = {}
    loops: dict[str, Callable[[], float]] = {}
    calls: dict[str, tuple[int, int]] = {}
    runs: dict[str, tuple[Callable[[], float], Callable[[], float]]] = {
        "decode": (
            timed_once(functools.partial(decode, corpus.big[0])),
            timed_once(functools.partial(decode, corpus.big[1])),
        )
    }
    for s in subjects:
        runs[s.name] = (
            timed_subject(s, corpus.x[0], corpus.big_outcomes[s.name][0]),
            timed_subject(s, corpus.x[1], corpus.big_outcomes[s.name][1]),
        )
    for name, (one, two) in runs.items():
        res[f"{name} x1"] = Measurement(f"{name} x1", 1)
        res[f"{name} x2"] = Measurement(f"{name} x2", 1)
        loops[name] = pair_loop(one, two, res[f"{name} x1"], res[f"{name} x2"])
        calls[name] = (python_calls(one), python_calls(two))
    interleave(loops, 1, rounds)
    return res, calls


def report_corpus(
    subjects: Sequence[Subject],
    corpus: Corpus,
    res: dict[str, Measurement],
    per_file: dict[str, list[list[float]]],
    *,
    show_files: bool,
) -> list[str]:
    base = res["decode"]
    mb = corpus.total / 1e6
    print(
        f"\n-- all {len(corpus.names)} trajectories, one call per file per round "
        f"({mb:.2f} MB of JSONL)"
    )
    print(
        f"   {'decode (baseline)':18s} best {1e3 * base.best_time:8.1f} ms, median "
        f"{1e3 * base.median_time:8.1f} ms, {mb / base.best_time:7.1f} MB/s"
    )
    print(
        f"   {'subject':18s} {'tokens before -> after':>24s} {'cut':>6s} {'changed':>8s} "
        f"{'per-file cut':>13s} {'best ms':>8s} {'med ms':>8s} {'MB/s':>7s} "
        f"{'/decode best (median)':>22s}"
    )
    lines = []
    for s in subjects:
        m = res[s.name]
        rows = corpus.outcomes[s.name]
        before = sum(r[1] for r in rows)
        after = sum(r[2] for r in rows)
        acted = [pct(r[1], r[2]) for r in rows if r[1] != r[2]]
        span = f"{min(acted):.0f}-{max(acted):.0f}%" if acted else "-"
        best, med = ratio_to(m, base)
        print(
            f"   {s.name:18s} {fmt_rate(before):>10s} -> {fmt_rate(after):>10s} "
            f"{pct(before, after):5.1f}% {len(acted):3d}/{len(rows):<4d} {span:>13s} "
            f"{1e3 * m.best_time:8.1f} {1e3 * m.median_time:8.1f} {mb / m.best_time:7.1f} "
            f"{best:9.2f}x ({med:.2f}x)"
        )
        lines.append(
            f"{s.name:18s} cut {pct(before, after):5.1f}%  {mb / m.best_time:7.1f} "
            f"MB/s  {best:.2f}x decode ({med:.2f}x)"
        )
    if show_files:
        dec = per_file["decode"]
        for s in subjects:
            print(f"\n   per file: {s.name}  [{s.settings}]")
            print(
                f"   {'file':52s} {'KB':>7s} {'tokens':>8s} {'after':>8s} {'cut':>6s} "
                f"{'best ms':>8s} {'MB/s':>7s} {'/decode':>8s}"
            )
            for i, name in enumerate(corpus.names):
                _, b, a = corpus.outcomes[s.name][i]
                t = min(per_file[s.name][i])
                kb = len(corpus.blobs[i]) / 1e3
                print(
                    f"   {name[:52]:52s} {kb:7.1f} {b:8d} {a:8d} {pct(b, a):5.1f}% "
                    f"{1e3 * t:8.2f} {kb / 1e3 / t:7.1f} {t / min(dec[i]):7.2f}x"
                )
    return lines


def report_linearity(
    subjects: Sequence[Subject],
    corpus: Corpus,
    res: dict[str, Measurement],
    calls: dict[str, tuple[int, int]],
) -> list[str]:
    sizes = [len(b) for b in corpus.big]
    print(
        f"\n-- linearity: one transcript x1 ({sizes[0] / 1e6:.2f} MB) and x2 = x1 twice "
        f"({sizes[1] / 1e6:.2f} MB); target t(x2)/t(x1) <= {TARGET}x, judged on the median "
        "of per-round ratios\n   (x1 and x2 run back to back in each round); 'calls' = "
        "Python function calls of one run on x2 / on x1 (load-independent)"
    )
    print(
        f"   {'subject':18s} {'x1 ms':>8s} {'x2 ms':>8s} {'x1 MB/s':>8s} {'best/best':>10s} "
        f"{'median of per-round ratios':>38s} {'calls':>6s} {'x1 /decode':>10s} "
        f"{'tokens after x1 / x2':>22s}"
    )
    lines = []
    for name in ["decode", *(s.name for s in subjects)]:
        one, two = res[f"{name} x1"], res[f"{name} x2"]
        best = two.best_time / one.best_time
        med = 1 / paired_ratio(two, one)
        verdict = fmt_ratio(med, TARGET, higher_is_better=False)
        call_ratio = calls[name][1] / calls[name][0]
        vs = (
            f"{one.best_time / res['decode x1'].best_time:9.2f}x"
            if name != "decode"
            else f"{'(baseline)':>10s}"
        )
        got = corpus.big_outcomes.get(name)
        toks = f"{fmt_rate(got[0][2]):>9s} / {fmt_rate(got[1][2]):<9s}" if got else ""
        print(
            f"   {name:18s} {1e3 * one.best_time:8.1f} {1e3 * two.best_time:8.1f} "
            f"{sizes[0] / 1e6 / one.best_time:8.1f} {best:9.2f}x {verdict:>38s} "
            f"{call_ratio:5.2f}x {vs} {toks}"
        )
        lines.append(
            f"{name:18s} t(x2)/t(x1) median {med:.2f}x (best/best {best:.2f}x); "
            f"Python calls {call_ratio:.2f}x"
        )
    return lines


def summarizer_load(subject: Subject, messages: tuple[Message, ...]) -> tuple[int, int]:
    """The summarizer calls and characters of one timed call of ``subject`` on ``messages``."""
    compact = subject.prepare(messages)
    model = subject.summarizers[-1]
    calls, chars = model.calls, model.chars
    compact(messages)
    return model.calls - calls, model.chars - chars


def report_llm(
    subjects: Sequence[Subject], inputs: Sequence[tuple[Message, ...]], *big: tuple[Message, ...]
) -> None:
    print("\n-- summarizer load of one timed call (echo summarizer: no model latency is measured)")
    for s in subjects:
        if s.summarizers:
            loads = [summarizer_load(s, m) for m in inputs]
            parts = [
                f"all files: {sum(c for c, _ in loads)} calls, "
                f"{sum(n for _, n in loads) / 1e6:.2f} M chars"
            ]
            for k, m in enumerate(big, 1):
                calls, chars = summarizer_load(s, m)
                parts.append(f"x{k}: {calls} calls, {chars / 1e6:.2f} M chars")
            print(f"   {s.name:18s} " + "; ".join(parts))


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"a short smoke run: 2 rounds, files up to {QUICK_MAX_BYTES:_} bytes",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds per loop (default 9 over the files, 15 for linearity)",
    )
    p.add_argument("--per-file", action="store_true", help="print a per-file table per subject")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile each subject on x2 with cProfile (and pyinstrument)",
    )
    p.add_argument("--trajectories", default=None, help="folder of *.jsonl trajectories")
    args = p.parse_args()
    rounds = args.rounds or (2 if args.quick else 9)
    lin_rounds = args.rounds or (3 if args.quick else 15)
    t0 = time.perf_counter()
    folder = find_trajectories(args.trajectories)

    print(f"== Compaction on the recorded trajectories{' (quick)' if args.quick else ''}")
    print(environment())
    print(library_fingerprint())
    print(context_fingerprint())
    print(f"command: {sys.executable} {' '.join(sys.argv)}")
    print(
        f"rounds: {rounds} over the files, {lin_rounds} for linearity (interleaved, order "
        "rotating; best and median reported)"
    )
    print("baseline 'decode': JSONL bytes in memory -> json.loads per line -> messages_from_dicts")
    print(
        f"the llm subjects use an in-process echo summarizer (first {SUMMARY_CHARS} characters "
        "of the rendered text): they measure liteagent's overhead, not model latency"
    )
    corpus = load_corpus(folder, args.quick)
    subjects = make_compactors()
    print("subjects:")
    for s in subjects:
        print(f"   {s.name:18s} {s.settings}")
    check_subjects(subjects, corpus)
    print(
        f"sanity: every subject gave equal outputs on two fresh runs of each file, x1 and x2, "
        f"and every output alternates and pairs ({time.perf_counter() - t0:.1f} s so far)"
    )

    res, per_file = measure_corpus(subjects, corpus, rounds)
    summary = report_corpus(subjects, corpus, res, per_file, show_files=args.per_file)
    lin, calls = measure_linearity(subjects, corpus, lin_rounds)
    lin_summary = report_linearity(subjects, corpus, lin, calls)
    report_llm(subjects, corpus.inputs, *corpus.x)
    if args.profile:
        for s in subjects:
            print(f"\n   profile of {s.name} on x2:")
            print(profile_top(profiled(s, corpus.x[1]), limit=14))

    print(
        f"\n== summary (best of rounds; ratio = subject time / decode time, in brackets the "
        f"median of per-round ratios; linearity target t(x2)/t(x1) <= {TARGET}x)"
    )
    for line in itertools.chain(summary, lin_summary):
        print("  ", line)
    print(f"   wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
