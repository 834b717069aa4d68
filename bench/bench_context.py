"""Per-request ContextEngine projection cost as a session grows: 100, 1,000 and 10,000 events.

A live session keeps one :class:`~liteagent.context.ContextEngine` and its folded state; before
each model request it applies what was appended since the previous request
(``apply_all(state, new_stored_events)``) and projects once (``engine.project(state)``). This
script times that projection on the same session at three ages.

**Workload.** One generated session (fixed seed), modelled on ``_common.EventFactory`` (its text
corpus and output-size law) but with liteagent's own tool names and inputs (``read_file``,
``edit_file``, ``write_file`` on a pool of 40 paths, so later reads and edits supersede earlier
reads; ``bash``, ``grep``, ``glob``). It is a list of *requests*: the events a live session
appends between two projections, in the order ``actors/_turn.py`` appends them:

- a tool step: ``ContextStatus``, ``ModelRequestRecord``, the ``AssistantMessage`` (text and
  1-3 ``tool_use`` blocks), then ``FileSnapshot`` (edit/write), the ``ToolResult`` of every call
  (log-normal output sizes, median ~2 KB, capped at 48 KB) and a ``ContentArchived`` record
  (``ref = archive_ref(text)``) for every result over 16 KiB;
- the end of a turn: ``ContextStatus``, ``ModelRequestRecord``, the final ``AssistantMessage``
  and the next ``UserPrompt``. A prompt is followed by 1-12 tool steps.

Every tool_use is answered before the next assistant message. The session at size N is the
prefix of the 10,000-event session that ends at the first request boundary at or past N events.

**Engines.** For each budget (default 32,000 and 100,000 tokens, and 12,000 as a control where
the select level acts at every size; ``ContextOptions(budget_tokens=B).settings(max_tokens=
8192)``, no fixed part, no native edits), one engine per size grows with the session through
every request (projecting once per request, as a live session does). Each timed round starts
from a copy of that engine (``copy.deepcopy``) and of the state, untimed, then runs the same K
*continuation* requests (generated separately, identical for every size): ``apply_all`` of the
request's events (timed apart) and ``engine.project(state)`` (the per-request cost). The
session grows by ~5 events per request during a round.

**Loops, interleaved** (one round each, the order rotating every round; ``gc.collect()`` before
each timed block, the collector stays on):

- ``inc B 100`` / ``inc B 1k`` / ``inc B 10k``: the per-request projection (the candidate);
- ``raw``: the baseline, a raw per-request operation: ``msgspec.msgpack`` encode and decode of
  the same K requests' events (one reused ``Encoder`` and ``Decoder(list[Event])``), 25 passes
  per round;
- ``refold B 10k``: what a projection without incrementality costs per request at 10,000
  events: ``project_context(fold(stored_events), settings)``, a fresh fold and a fresh engine
  for each request (3 requests per round: it is slow);
- ``fresh B 10k``: ``project_context(state, settings)`` alone (a fresh engine on the folded
  state: the rebuild without the fold).

Target: per-request projection at 10,000 events <= 1.3 x that at 100 events. Ratios are
best/best, with the median of per-round ratios beside them. The engine's levels are printed
(after the growth, and for every timed request), and every incremental view is checked equal to
``project_context`` on the same state (correctness, untimed) after the growth and after its
first round.

    /tmp/venv/bin/python bench/bench_context.py [--quick] [--rounds N] [--requests K]
        [--budgets 32000,100000,12000] [--profile]

``--profile`` (after the timed rounds) runs cProfile over 10 copies x K requests (apply_all +
project) at each size and budget (3 runs per size in rotation, keeping the least-loaded), and
prints the top own time per request at 10,000 events,
the functions whose own time per request grows from 100 (and from 1,000) to 10,000 events with
their calls per request and own time per call, and the cumulative time of the engine's steps;
for the first budget also :func:`profile_top` (a pyinstrument tree) at 10,000 events.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import hashlib
import os
import pstats
import statistics
import string
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from _common import (
    SEED,
    EventFactory,
    Measurement,
    environment,
    fmt_ratio,
    interleave,
    paired_ratio,
    profile_top,
)
from msgspec import UNSET

from liteagent.context import ContextEngine, ContextOptions, ContextView, project_context
from liteagent.context._archive import archive_ref
from liteagent.eventlog import SessionState, StoredEvent, fold
from liteagent.eventlog._eventcodec import kind_of
from liteagent.eventlog._fold import apply_all
from liteagent.eventlog._pvec import PVec
from liteagent.eventlog.types import (
    AssistantMessage,
    ContentArchived,
    ContextSettings,
    ContextStatus,
    Event,
    FileSnapshot,
    ModelRequestRecord,
    SessionStarted,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserPrompt,
)

TARGET = 1.3  # per-request projection at 10,000 events <= 1.3 x at 100 events
SIZES = (100, 1_000, 10_000)
TAGS = {100: "100", 1_000: "1k", 10_000: "10k"}
RAW_REPS = 25  # passes of the raw baseline over the K requests per round
PROFILE_REPEATS = 3  # --profile: runs per size (in rotation); the one with least own time is kept
BUDGETS = (32_000, 100_000, 12_000)  # the last: a control where select acts at every size
MAX_TOKENS = 8192
ARCHIVE_THRESHOLD = 16_384  # ContextOptions' default archive_threshold_bytes
MODEL = "claude-opus-4-6"
_TOOLS = (
    "read_file",
    "read_file",
    "read_file",
    "bash",
    "bash",
    "grep",
    "edit_file",
    "edit_file",
    "write_file",
    "glob",
)
_PACKAGES = ("context", "eventlog")


# -- the session -----------------------------------------------------------------------------------


class Steps:
    """A generated live session as a stream of requests (see the module docstring)."""

    def __init__(self, seed: int, settings: ContextSettings) -> None:
        self.f = EventFactory(seed)
        self.rng = self.f.rng
        words = ("api", "core", "util", "cli", "store", "model", "io", "test")
        self.paths = [
            f"src/{self.rng.choice(words)}/{self.rng.choice(words)}_{i}.py" for i in range(40)
        ]
        self.settings = settings

    def _id(self) -> str:
        return "toolu_" + "".join(self.rng.choices(string.ascii_letters + string.digits, k=24))

    def _hex(self) -> str:
        return "%064x" % self.rng.getrandbits(256)  # noqa: UP031 -- fixed-width hex digest

    def _input(self, tool: str) -> dict[str, object]:
        r, text = self.rng, self.f.text
        path = r.choice(self.paths)
        if tool == "read_file":
            return (
                {"path": path}
                if r.random() < 0.6
                else {"path": path, "offset": r.randrange(1, 500), "limit": 200}
            )
        if tool == "edit_file":
            return {
                "path": path,
                "old_string": text(r.randrange(20, 600)),
                "new_string": text(r.randrange(20, 800)),
            }
        if tool == "write_file":
            return {"path": path, "content": text(r.randrange(200, 6000))}
        if tool == "bash":
            return {"command": text(r.randrange(20, 160)).replace("\n", " ")}
        if tool == "grep":
            return {"pattern": text(12).replace("\n", " "), "path": "src"}
        return {"pattern": f"src/**/*{r.choice(('api', 'core', 'test'))}*.py"}

    def _usage(self) -> Usage:
        r = self.rng
        return Usage(
            input_tokens=r.randrange(1, 50),
            output_tokens=r.randrange(20, 2000),
            cache_read_input_tokens=r.randrange(1000, 150_000),
        )

    def _before_reply(self) -> list[Event]:
        r = self.rng
        tokens = r.randrange(10_000, 150_000)
        return [
            ContextStatus(
                level="select",
                tokens=tokens,
                budget=self.settings.budget_tokens,
                tokens_after=min(tokens, self.settings.budget_tokens),
                actions=(
                    "normalize: 12 old tool result(s) cleared, 1 superseded read(s) left out",
                    "select: 840 earlier message(s) left out",
                ),
                settings=self.settings,
            ),
            ModelRequestRecord(
                view_hash=self._hex(),
                token_estimate=tokens,
                model=MODEL,
                request_digest=self._hex(),
            ),
        ]

    def _tool_step(self) -> list[Event]:
        r = self.rng
        calls = [(self._id(), r.choice(_TOOLS)) for _ in range(r.choice((1, 1, 1, 2, 3)))]
        blocks = (
            TextBlock(self.f.text(r.randrange(30, 800))),
            *(ToolUseBlock(id=i, name=t, input=self._input(t)) for i, t in calls),
        )
        out = [
            *self._before_reply(),
            AssistantMessage(
                content=blocks, usage=self._usage(), stop_reason="tool_use", model=MODEL
            ),
        ]
        results: list[Event] = []
        archived: list[Event] = []
        for call_id, tool in calls:
            if tool in ("edit_file", "write_file"):
                out.append(
                    FileSnapshot(
                        path=r.choice(self.paths),
                        tool_call_id=call_id,
                        pre_image="sha256:" + self._hex(),
                        pre_hash=self._hex(),
                        post_hash=self._hex(),
                    )
                )
            text = self.f.text(self.f._output_size())
            results.append(
                ToolResult(
                    block=ToolResultBlock(call_id, text, True if r.random() < 0.05 else UNSET),
                    tool_name=tool,
                )
            )
            size = len(text.encode("utf-8"))
            if size > ARCHIVE_THRESHOLD:
                archived.append(
                    ContentArchived(
                        tool_use_id=call_id, ref=archive_ref(text), chars=len(text), size=size
                    )
                )
        return out + results + archived

    def _prompt(self) -> UserPrompt:
        return UserPrompt(content=(TextBlock(self.f.text(self.rng.randrange(20, 1500))),))

    def requests(self) -> Iterator[list[Event]]:
        """The session's requests, without end: each is what is appended before a projection."""
        yield [
            SessionStarted(
                workdir="/home/user/project", model=MODEL, system_prompt="You are a coding agent."
            ),
            self._prompt(),
        ]
        while True:
            for _ in range(self.rng.randrange(1, 13)):
                yield self._tool_step()
            end = AssistantMessage(
                content=(TextBlock(self.f.text(self.rng.randrange(50, 1500))),),
                usage=self._usage(),
                stop_reason="end_turn",
                model=MODEL,
            )
            yield [*self._before_reply(), end, self._prompt()]


def stored(requests: Sequence[list[Event]], head: int) -> list[list[StoredEvent]]:
    """``requests`` as stored events, numbered after ``head``."""
    out: list[list[StoredEvent]] = []
    ts = 1_764_000_000.0
    for events in requests:
        batch = []
        for e in events:
            head += 1
            batch.append(StoredEvent(head, ts + head, kind_of(e), e))
        out.append(batch)
    return out


def unshared(state: SessionState) -> SessionState:
    """``state`` with private copies of its persistent vectors: appending to it extends them in
    place, as in a live session, instead of copying the prefix of a branched version."""
    return msgspec.structs.replace(
        state,
        **{
            name: PVec(list(value))
            for name in state.__struct_fields__
            if isinstance(value := getattr(state, name), PVec)
        },
    )


@dataclass
class Session:
    """The session at one size, for one budget: its state, the engine grown with it, the views."""

    size: int
    events: int
    requests: int
    state: SessionState
    engine: ContextEngine
    view: ContextView
    stored_events: list[StoredEvent]
    levels: dict[str, int] = field(default_factory=dict)


def grow(growth: list[list[StoredEvent]], size: int, settings: ContextSettings) -> Session:
    """Apply requests until the log holds at least ``size`` events, projecting once per request
    with one engine (a live session's engine); check the view against a fresh projection."""
    engine = ContextEngine(settings)
    state = SessionState()
    flat: list[StoredEvent] = []
    levels: dict[str, int] = {}
    view: ContextView | None = None
    n = 0
    for batch in growth:
        state = apply_all(state, batch)
        flat.extend(batch)
        view = engine.project(state)
        levels[view.level] = levels.get(view.level, 0) + 1
        n += 1
        if state.head >= size:
            break
    assert view is not None
    if state.head < size:
        raise SystemExit(f"the growth stream is too short for {size} events")
    check_view(view, state, settings, f"after growing to {state.head} events")
    return Session(size, state.head, n, state, engine, view, flat, levels)


def check_view(
    view: ContextView, state: SessionState, settings: ContextSettings, what: str
) -> None:
    fresh = project_context(state, settings)
    if view != fresh:
        raise AssertionError(
            f"{what}: the incremental view differs from project_context "
            f"(levels {view.level} / {fresh.level})"
        )


# -- the timed loops -------------------------------------------------------------------------------


class Clock:
    """Time spent in the garbage collector while active (any thread)."""

    def __init__(self) -> None:
        self.gc_seconds = 0.0
        self._start = 0.0

    def _callback(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._start

    def __enter__(self) -> Clock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


@dataclass
class Side:
    """What a loop measures besides its main figure, one entry per round (seconds/request)."""

    apply: list[float] = field(default_factory=list)
    gc: list[float] = field(default_factory=list)
    levels: dict[str, int] = field(default_factory=dict)
    last: ContextView | None = None


def prepared(session: Session) -> tuple[ContextEngine, SessionState]:
    """A copy of the session's engine and state, as they were after the growth."""
    return copy.deepcopy(session.engine), unshared(session.state)


def incremental_loop(
    session: Session,
    cont: list[list[Event]],
    side: Side,
    check: Callable[[ContextView, SessionState], None],
) -> Callable[[], float]:
    """One round: K requests on a copy of the grown session; returns seconds per projection."""
    batches = stored(cont, session.events)
    first = [True]

    def run() -> float:
        engine, state = prepared(session)
        projected = applied = 0.0
        view: ContextView | None = None
        gc.collect()
        with Clock() as clock:
            for batch in batches:
                t0 = time.perf_counter()
                state = apply_all(state, batch)
                t1 = time.perf_counter()
                view = engine.project(state)
                t2 = time.perf_counter()
                applied += t1 - t0
                projected += t2 - t1
                side.levels[view.level] = side.levels.get(view.level, 0) + 1
        assert view is not None
        side.apply.append(applied / len(batches))
        side.gc.append(clock.gc_seconds / len(batches))
        side.last = view
        if first[0]:
            first[0] = False
            check(view, state)
        return projected / len(batches)

    return run


def raw_loop(cont: list[list[Event]], reps: int) -> Callable[[], float]:
    """The baseline: msgpack encode + decode of each request's events (``reps`` passes over the
    K requests, so that a round lasts long enough to time); seconds per request."""
    enc = msgspec.msgpack.Encoder()
    dec = msgspec.msgpack.Decoder(list[Event])  # type: ignore[valid-type]

    def run() -> float:
        gc.collect()
        t = time.perf_counter()
        for _ in range(reps):
            for events in cont:
                dec.decode(enc.encode(events))
        return (time.perf_counter() - t) / (reps * len(cont))

    return run


def refold_loop(
    session: Session, cont: list[list[Event]], settings: ContextSettings, *, with_fold: bool
) -> Callable[[], float]:
    """Per request, a projection without incrementality: a fresh engine on the state (and, with
    ``with_fold``, a fresh fold of every stored event first); seconds per request."""
    batches = stored(cont, session.events)

    def run() -> float:
        events = list(session.stored_events)
        state = unshared(session.state)
        total = 0.0
        gc.collect()
        for batch in batches:
            events.extend(batch)
            if with_fold:
                t = time.perf_counter()
                project_context(fold(events), settings)
                total += time.perf_counter() - t
            else:
                state = apply_all(state, batch)
                t = time.perf_counter()
                project_context(state, settings)
                total += time.perf_counter() - t
        return total / len(batches)

    return run


# -- reporting -------------------------------------------------------------------------------------


def kernel_fingerprint() -> str:
    """A hash of the sources measured (context and eventlog) and the newest mtime among them."""
    import liteagent.context as pkg  # noqa: PLC0415 -- only for its location

    root = Path(os.path.abspath(pkg.__file__ or "")).parent.parent
    digest = hashlib.sha256()
    newest = 0.0
    for name in _PACKAGES:
        for path in sorted((root / name).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
            newest = max(newest, path.stat().st_mtime)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(newest))
    return (
        f"sources ({', '.join(_PACKAGES)}) sha256 {digest.hexdigest()[:12]} "
        f"(newest file modified {when})"
    )


def us(x: float) -> str:
    return f"{1e6 * x:,.1f}"


def levels_text(levels: dict[str, int]) -> str:
    return ", ".join(f"{k} {n:,}" for k, n in levels.items())


def describe(session: Session, budget: int) -> str:
    v = session.view
    return (
        f"   budget {budget:,}, N={session.size:,}: {session.events:,} events after "
        f"{session.requests:,} requests; view level {v.level!r}, {len(v.messages):,} "
        f"messages, {v.tokens_after:,} of {v.tokens_before:,} tokens"
        + (
            f", left out base messages {v.left_out[0]:,}-{v.left_out[1]:,}"
            if v.left_out != (0, 0)
            else ""
        )
        + f"; levels during the growth: {levels_text(session.levels)}"
    )


def ratio_text(a: Measurement, b: Measurement) -> tuple[float, float]:
    """(best/best, median of per-round ratios) of the times of ``a`` over ``b``."""
    return a.best_time / b.best_time, 1 / paired_ratio(a, b)


def report_budget(
    budget: int,
    res: dict[str, Measurement],
    sides: dict[str, Side],
    *,
    cont_events: int,
    k: int,
    k_refold: int,
    sessions: dict[int, Session],
) -> list[str]:
    raw = res["raw"]
    inc = {size: res[f"inc {budget} {TAGS[size]}"] for size in SIZES}
    print(f"\n-- budget {budget:,} tokens: us per request, best round / median round")
    print(
        "   loop               log during a round    project             apply_all       "
        "gc    project/raw best (median)  view at the end; levels of the timed requests"
    )
    for size in SIZES:
        m, s = inc[size], sessions[size]
        side = sides[m.name]
        best, med = ratio_text(m, raw)
        last = side.last
        assert last is not None
        print(
            f"   {m.name:17s} {s.events:>7,d} -> {s.events + cont_events:<7,d}  "
            f"{us(m.best_time):>8s} / {us(m.median_time):<8s}  "
            f"{us(min(side.apply)):>6s} / {us(statistics.median(side.apply)):<6s} "
            f"{us(statistics.median(side.gc)):>5s}  {best:7.2f}x ({med:6.2f}x)         "
            f"{len(last.messages):,} messages, {last.tokens_after:,} tokens; "
            f"{levels_text(side.levels)}"
        )
    big = sessions[SIZES[-1]]
    for name in (f"fresh {budget} 10k", f"refold {budget} 10k"):
        m = res[name]
        print(
            f"   {name:17s} {big.events:>7,d} -> {big.events + cont_events:<7,d}  "
            f"{us(m.best_time):>8s} / {us(m.median_time):<8s}  (the first {k_refold} of the "
            f"K={k} requests per round)"
        )
    small, mid, large = inc[SIZES[0]], inc[SIZES[1]], inc[SIZES[2]]
    ratio, med = ratio_text(large, small)
    norm = (large.best_time / raw.best_time) / (small.best_time / raw.best_time)
    print(
        f"   t(10k)/t(100): best/best {fmt_ratio(ratio, TARGET, higher_is_better=False)}; "
        f"median of per-round ratios {med:.2f}x (in units of the raw baseline: "
        f"{small.best_time / raw.best_time:.2f} -> {large.best_time / raw.best_time:.2f}, "
        f"{norm:.2f}x)"
    )
    r1, m1 = ratio_text(mid, small)
    r2, m2 = ratio_text(large, mid)
    print(
        f"   t(1k)/t(100) {r1:.2f}x (median {m1:.2f}x); t(10k)/t(1k) {r2:.2f}x (median {m2:.2f}x)"
    )
    fresh, refold = res[f"fresh {budget} 10k"], res[f"refold {budget} 10k"]
    rf, mf = ratio_text(refold, large)
    print(
        f"   refold/incremental at 10k: best/best {rf:,.0f}x (median {mf:,.0f}x); a fresh "
        f"engine without the fold: {fresh.best_time / large.best_time:,.0f}x"
    )
    return [
        f"budget {budget:>7,}: t(10k)/t(100) = {ratio:.2f}x [{med:.2f}x], t(10k)/t(1k) = "
        f"{r2:.2f}x [{m2:.2f}x]; {us(small.best_time)} / {us(mid.best_time)} / "
        f"{us(large.best_time)} us per request; project/raw {small.best_time / raw.best_time:.1f}"
        f" / {mid.best_time / raw.best_time:.1f} / {large.best_time / raw.best_time:.1f}; "
        f"refold {rf:,.0f}x incremental",
    ]


# -- profiling -------------------------------------------------------------------------------------


FuncStats = dict[tuple[str, int, str], tuple[float, float, int]]


def _requests_fn(
    session: Session, cont: list[list[Event]], copies: int, calls: int = 1
) -> tuple[Callable[[], None], int]:
    """A function running the K requests on ``copies`` fresh copies of ``session`` (copied
    before the call, enough for ``calls`` calls, and kept alive after it, so that neither the
    copy nor freeing it is profiled); and how many requests a call runs."""
    batches = stored(cont, session.events)
    prepared_copies = [prepared(session) for _ in range(copies * calls)]
    used = iter(prepared_copies)

    def run() -> None:
        for _ in range(copies):
            engine, state = next(used)
            for batch in batches:
                state = apply_all(state, batch)
                engine.project(state)

    return run, copies * len(batches)


def _stats(fn: Callable[[], None]) -> FuncStats:
    prof = cProfile.Profile()
    gc.collect()
    prof.enable()
    fn()
    prof.disable()
    st = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    return {key: (v[2], v[3], v[1]) for key, v in st.items()}


def _own_total(st: FuncStats) -> float:
    return sum(v[0] for v in st.values())


def _where(key: tuple[str, int, str]) -> str:
    file, line, func = key
    return f"{func} ({os.path.basename(file)}:{line})" if line else f"{func} {file}".strip()


def _growth_table(
    a: FuncStats, b: FuncStats, sizes: tuple[int, int], *, per: float, rows: int
) -> None:
    na, nb = sizes
    total = (sum(v[0] for v in b.values()) - sum(v[0] for v in a.values())) * per
    print(
        f"   own time per request that grows from N={na:,} to N={nb:,} (total {total:+.0f} "
        "us/request; share = of that growth):"
    )
    print(
        f"     N={na:<6,d} N={nb:<6,d}  growth  share  calls/req        own us/call      function"
    )
    zero = (0.0, 0.0, 0)
    growth = {key: b.get(key, zero)[0] - a.get(key, zero)[0] for key in set(a) | set(b)}
    for key, g in sorted(growth.items(), key=lambda kv: -kv[1])[:rows]:
        x, y = a.get(key, zero), b.get(key, zero)
        share = f"{100 * g * per / total:5.1f}%" if total > 0 else "    -"
        call_x = f"{1e6 * x[0] / x[2]:.2f}" if x[2] else "-"
        call_y = f"{1e6 * y[0] / y[2]:.2f}" if y[2] else "-"
        print(
            f"    {x[0] * per:8.1f} {y[0] * per:8.1f} {g * per:+8.1f} {share}  "
            f"{x[2] * per / 1e6:5.1f} -> {y[2] * per / 1e6:<5.1f}  {call_x:>6s} -> "
            f"{call_y:<6s}  {_where(key)}"
        )


_STEPS = (
    "project",
    "sync",
    "_add",
    "advance_old",
    "cleared_counts",
    "_select",
    "cost",
    "head",
    "norm_sum",
    "saving_before",
    "estimate_tokens",
    "_view",
    "messages_digest",
    "message_digest",
    "apply_all",
)


def profile(
    sessions: dict[int, Session], cont: list[list[Event]], budget: int, copies: int, *, tree: bool
) -> None:
    """cProfile of the K requests (apply_all + project) on ``copies`` copies of the session at
    each size: top own time per request at 10,000, where it grows, the steps' cumulative time;
    with ``tree``, also :func:`profile_top` (and its pyinstrument tree) at 10,000."""
    stats: dict[int, FuncStats] = {}
    n = 0
    for _ in range(PROFILE_REPEATS):  # sizes in rotation; keep each size's least-loaded run
        for size in SIZES:
            fn, n = _requests_fn(sessions[size], cont, copies)
            st = _stats(fn)
            if size not in stats or _own_total(st) < _own_total(stats[size]):
                stats[size] = st
    per = 1e6 / n
    totals = {size: sum(v[0] for v in st.values()) * per for size, st in stats.items()}
    big = stats[SIZES[-1]]
    print(
        f"\n-- profile (budget {budget:,}): cProfile of {n} requests (apply_all + project) "
        f"per size, the least-loaded of {PROFILE_REPEATS} runs; under the profiler "
        + " / ".join(f"{totals[size]:.0f}" for size in SIZES)
        + f" us per request at N={' / '.join(f'{size:,}' for size in SIZES)} "
        "(cProfile inflates Python calls several-fold; compare shares, not absolutes)"
    )
    print(f"   top own time at N={SIZES[-1]:,}:")
    print("      us/req  share   cum us/req  calls/req  own us/call  function")
    for key, (tt, ct, nc) in sorted(big.items(), key=lambda kv: -kv[1][0])[:18]:
        print(
            f"    {tt * per:8.1f} {100 * tt * per / totals[SIZES[-1]]:5.1f}%  {ct * per:10.1f} "
            f"{nc / n:10.1f}  {1e6 * tt / nc:10.2f}  {_where(key)}"
        )
    _growth_table(stats[SIZES[0]], big, (SIZES[0], SIZES[-1]), per=per, rows=16)
    _growth_table(stats[SIZES[1]], big, (SIZES[1], SIZES[-1]), per=per, rows=10)
    print(
        "   cumulative us per request (calls per request) at N="
        + " / ".join(f"{size:,}" for size in SIZES)
        + ":"
    )
    zero = (0.0, 0.0, 0)
    for name in _STEPS:
        for key in sorted(
            k
            for k in set().union(*stats.values())
            if k[2] == name and any(f"/{p}/" in k[0] for p in _PACKAGES)
        ):
            cells = "  ".join(
                f"{stats[size].get(key, zero)[1] * per:7.1f} "
                f"({stats[size].get(key, zero)[2] / n:4.1f})"
                for size in SIZES
            )
            print(f"    {name:16s} {cells}  {_where(key)}")
    if not tree:
        return
    again, _ = _requests_fn(sessions[SIZES[-1]], cont, copies, calls=2)
    print(
        f"   profile_top at N={SIZES[-1]:,} (cProfile, then a pyinstrument sampled tree, each "
        f"on {n} requests):"
    )
    print(profile_top(again, limit=12))


def workload(budget: int, k: int) -> tuple[list[list[StoredEvent]], list[list[Event]]]:
    """The growth requests (stored, up to 10,000 events) and the K continuation requests."""
    placeholder = ContextOptions(budget_tokens=budget).settings(max_tokens=MAX_TOKENS)
    gen = Steps(SEED, placeholder).requests()
    growth_events: list[list[Event]] = []
    total = 0
    while total < SIZES[-1]:
        growth_events.append(next(gen))
        total += len(growth_events[-1])
    cont_gen = Steps(SEED + 7, placeholder).requests()
    next(cont_gen)  # the continuation starts with a tool step, not a new session
    cont = [next(cont_gen) for _ in range(k)]
    cont_events = sum(len(r) for r in cont)
    growth = stored(growth_events, 0)
    kinds: dict[str, int] = {}
    for batch in growth:
        for e in batch:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
    body_bytes = sum(len(msgspec.msgpack.encode(e.body)) for b in growth for e in b)
    print(
        f"   session: {total:,} events in {len(growth):,} requests, "
        f"{body_bytes / 2**20:.1f} MiB of msgpack bodies; "
        + ", ".join(f"{kd} {n:,}" for kd, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    )
    cont_kinds: dict[str, int] = {}
    for r in cont:
        for e in r:
            cont_kinds[kind_of(e)] = cont_kinds.get(kind_of(e), 0) + 1
    print(
        f"   continuation: K={k} requests, {cont_events} events, "
        f"{sum(len(msgspec.msgpack.encode(e)) for r in cont for e in r) / 1024:.0f} KiB; "
        + ", ".join(f"{kd} {n}" for kd, n in sorted(cont_kinds.items(), key=lambda kv: -kv[1]))
    )
    return growth, cont


def budget_loops(
    settings: ContextSettings,
    sessions: dict[int, Session],
    cont: list[list[Event]],
    sides: dict[str, Side],
    k_refold: int,
) -> dict[str, Callable[[], float]]:
    """The incremental loops at every size and the fresh/refold loops at 10,000 for one budget."""
    budget = settings.budget_tokens
    loops: dict[str, Callable[[], float]] = {}
    for size in SIZES:
        name = f"inc {budget} {TAGS[size]}"
        sides[name] = Side()

        def check(view: ContextView, state: SessionState, name: str = name) -> None:
            check_view(view, state, settings, f"{name} after a round")

        loops[name] = incremental_loop(sessions[size], cont, sides[name], check)
    big = sessions[SIZES[-1]]
    loops[f"fresh {budget} 10k"] = refold_loop(big, cont[:k_refold], settings, with_fold=False)
    loops[f"refold {budget} 10k"] = refold_loop(big, cont[:k_refold], settings, with_fold=True)
    return loops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--rounds", type=int, default=None, help="rounds per loop (default 11)")
    p.add_argument(
        "--requests",
        type=int,
        default=None,
        help="timed requests per round (default 16; --quick 8)",
    )
    p.add_argument(
        "--budgets",
        default=",".join(str(b) for b in BUDGETS),
        help="comma-separated token budgets (default 32000,100000,12000)",
    )
    p.add_argument(
        "--profile", action="store_true", help="also profile the requests at every size and budget"
    )
    args = p.parse_args()
    rounds = args.rounds or (2 if args.quick else 11)
    k = args.requests or (8 if args.quick else 16)
    k_refold = max(1, min(k, 2 if args.quick else 3))
    budgets = [int(b) for b in args.budgets.split(",")]
    t0 = time.perf_counter()
    print(f"== ContextEngine projection cost per request{' (quick)' if args.quick else ''}")
    print(environment())
    print(kernel_fingerprint())
    print(f"command: {sys.executable} {' '.join(sys.argv)}")
    print(
        f"rounds: {rounds} (interleaved, order rotating); K={k} timed requests per round "
        f"(refold/fresh: the first {k_refold}; raw: {RAW_REPS} passes over the K); every "
        "round starts from a copy of the grown engine and state"
    )

    growth, cont = workload(budgets[0], k)
    cont_events = sum(len(r) for r in cont)
    loops: dict[str, Callable[[], float]] = {"raw": raw_loop(cont, RAW_REPS)}
    sides: dict[str, Side] = {}
    all_sessions: dict[int, dict[int, Session]] = {}
    for budget in budgets:
        settings = ContextOptions(budget_tokens=budget).settings(max_tokens=MAX_TOKENS)
        sessions = {size: grow(growth, size, settings) for size in SIZES}
        all_sessions[budget] = sessions
        for size in SIZES:
            print(describe(sessions[size], budget))
        loops.update(budget_loops(settings, sessions, cont, sides, k_refold))
    print(f"   sessions grown and checked in {time.perf_counter() - t0:.1f} s")
    res = interleave(loops, 1, rounds)
    raw = res["raw"]
    print(
        f"\n-- baseline raw (msgpack encode + decode of one request's events): "
        f"{us(raw.best_time)} / {us(raw.median_time)} us per request (best / median round)"
    )
    summary: list[str] = []
    for budget in budgets:
        summary += report_budget(
            budget,
            res,
            sides,
            cont_events=cont_events,
            k=k,
            k_refold=k_refold,
            sessions=all_sessions[budget],
        )
    print(
        "   (every incremental view was checked equal to project_context on the same state "
        "after the growth and after its first round)"
    )
    if args.profile:
        for i, budget in enumerate(budgets):
            profile(all_sessions[budget], cont, budget, 2 if args.quick else 10, tree=i == 0)
    print(
        f"\n== summary (target t(10k) <= {TARGET}x t(100); best/best, in brackets the median "
        "of per-round ratios)"
    )
    for line in summary:
        print("  ", line)
    print(f"   wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
