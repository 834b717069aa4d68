"""Shared helpers for the benchmarks: realistic event generation, interleaved timing, reporting.

Every benchmark measures its own baseline in the same run and reports a ratio, because these
machines are shared and noisy (absolute figures move by up to ~1.5x between runs). Candidate and
baseline rounds are interleaved (and their order alternates per round), so a slow spell hits both.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import itertools
import math
import os
import platform
import pstats
import random
import resource
import statistics
import string
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from msgspec import UNSET

from liteagent.eventlog._eventcodec import encode_body
from liteagent.eventlog.types import (
    AssistantMessage,
    ContextStatus,
    Event,
    FileSnapshot,
    ModelRequestRecord,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserPrompt,
)

__all__ = [
    "EventFactory",
    "Measurement",
    "add_common_args",
    "append_workloads",
    "describe_workloads",
    "dir_size",
    "environment",
    "fmt_rate",
    "fmt_ratio",
    "interleave",
    "paired_ratio",
    "peak_rss_mib",
    "print_header",
    "profile_top",
    "report_append_case",
    "small_events",
    "timed_loop",
]

SEED = 20240611
MODEL = "claude-opus-4-6"
_VOCAB = (
    "the a to of and in is it that for on with as this be are not file test function return value "
    "error line path module import class def self none true false list dict config session event "
    "append read write seq head commit apply fold state message tool result output input request "
    "response model token cache usage context block text assistant user build run check pass fail "
    "diff patch branch repo python pytest ruff mypy src tests docs"
)
_WORDS = tuple(_VOCAB.split())
_CODE_LINES = (
    "def {w}_{w2}(self, {w3}: int) -> str:",
    "    return self._{w}[{w2}]",
    "    if {w} is None:",
    '        raise ValueError(f"{w} {w2}: {{{w3}!r}}")',
    "import {w}.{w2}",
    "from .{w} import {w2}, {w3}",
    "class {W}{W2}:",
    "    {w}_{w2} = {n}",
    "# {w} {w2} {w3}",
    "{w}/{w2}/{w3}.py:{n}: {W} {w2} {w3}",
    "FAILED tests/test_{w}.py::test_{w2} - AssertionError: {n} != {n2}",
    "-rw-r--r-- 1 user user {n} Nov 29 21:43 {w}_{w2}.py",
)
_TOOLS = ("Bash", "Read", "Edit", "Grep", "Write", "Glob")


def _corpus(rng: random.Random, size: int) -> str:
    """About ``size`` characters of code-like and prose-like lines."""
    lines: list[str] = []
    total = 0
    while total < size:
        if rng.random() < 0.6:
            w, w2, w3 = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS)
            line = rng.choice(_CODE_LINES).format(
                w=w,
                w2=w2,
                w3=w3,
                W=w.capitalize(),
                W2=w2.capitalize(),
                n=rng.randrange(10_000),
                n2=rng.randrange(10_000),
            )
        else:
            line = " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(4, 18))).capitalize()
            line += "."
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


class EventFactory:
    """Realistic liteagent events from a fixed seed: agent turns of model requests, assistant
    messages with text and tool_use blocks, file snapshots and tool results whose outputs range
    from a few hundred bytes to tens of KB (log-normal sizes, median ~2 KB, capped at 48 KB)."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self._text = _corpus(self.rng, 1 << 20)
        self._pending: list[Event] = []

    def text(self, n: int) -> str:
        start = self.rng.randrange(len(self._text) - n) if n < len(self._text) else 0
        return self._text[start : start + n]

    def _id(self) -> str:
        return "toolu_" + "".join(self.rng.choices(string.ascii_letters + string.digits, k=24))

    def _hex(self) -> str:
        return "%064x" % self.rng.getrandbits(256)  # noqa: UP031 -- fixed-width hex digest

    def _path(self) -> str:
        r = self.rng
        return f"/home/user/project/src/{r.choice(_WORDS)}/{r.choice(_WORDS)}_{r.choice(_WORDS)}.py"

    def _output_size(self) -> int:
        return max(150, min(48_000, int(self.rng.lognormvariate(math.log(2000), 1.3))))

    def _tool_input(self, tool: str) -> dict[str, object]:
        r = self.rng
        if tool == "Bash":
            return {
                "command": self.text(r.randrange(20, 160)).replace("\n", " "),
                "description": self.text(r.randrange(10, 60)).replace("\n", " "),
            }
        if tool == "Read":
            return {"file_path": self._path(), "offset": r.randrange(1, 500), "limit": 200}
        if tool == "Edit":
            return {
                "file_path": self._path(),
                "old_string": self.text(r.randrange(20, 600)),
                "new_string": self.text(r.randrange(20, 800)),
                "replace_all": False,
            }
        if tool == "Write":
            return {"file_path": self._path(), "content": self.text(r.randrange(200, 6000))}
        if tool == "Grep":
            return {
                "pattern": r.choice(_WORDS) + ".*" + r.choice(_WORDS),
                "path": "src",
                "output_mode": "content",
                "-n": True,
            }
        return {"pattern": f"**/*{r.choice(_WORDS)}*.py"}

    def _usage(self) -> Usage:
        r = self.rng
        return Usage(
            input_tokens=r.randrange(1, 50),
            output_tokens=r.randrange(20, 2000),
            cache_creation_input_tokens=r.randrange(0, 5000),
            cache_read_input_tokens=r.randrange(1000, 150_000),
        )

    def _turn(self) -> list[Event]:
        r = self.rng
        out: list[Event] = [
            UserPrompt(
                content=(TextBlock(self.text(r.randrange(20, 1500))),),
                origin="user" if r.random() < 0.9 else "reminder",
            )
        ]
        for step in range(r.randrange(1, 9)):
            out.append(
                ModelRequestRecord(
                    view_hash=self._hex(), token_estimate=r.randrange(2000, 150_000), model=MODEL
                )
            )
            if step % 4 == 3:
                out.append(
                    ContextStatus(level="ok", tokens=r.randrange(10_000, 150_000), budget=200_000)
                )
            calls = [(self._id(), r.choice(_TOOLS)) for _ in range(r.choice((1, 1, 1, 2, 3)))]
            blocks = (
                TextBlock(self.text(r.randrange(30, 800))),
                *(ToolUseBlock(id=i, name=t, input=self._tool_input(t)) for i, t in calls),
            )
            out.append(
                AssistantMessage(
                    content=blocks, usage=self._usage(), stop_reason="tool_use", model=MODEL
                )
            )
            for call_id, tool in calls:
                if tool in ("Edit", "Write"):
                    out.append(
                        FileSnapshot(
                            path=self._path(),
                            tool_call_id=call_id,
                            pre_image="sha256:" + self._hex(),
                            pre_hash=self._hex(),
                            post_hash=self._hex(),
                        )
                    )
                output = self.text(self._output_size())
                out.append(
                    ToolResult(
                        block=ToolResultBlock(
                            call_id, output, True if r.random() < 0.05 else UNSET
                        ),
                        tool_name=tool,
                    )
                )
        out.append(
            ModelRequestRecord(
                view_hash=self._hex(), token_estimate=r.randrange(2000, 150_000), model=MODEL
            )
        )
        out.append(
            AssistantMessage(
                content=(TextBlock(self.text(r.randrange(50, 1500))),),
                usage=self._usage(),
                stop_reason="end_turn",
                model=MODEL,
            )
        )
        return out

    def events(self, n: int) -> list[Event]:
        """The next ``n`` events of the generated conversation (turns continue across calls)."""
        while len(self._pending) < n:
            self._pending.extend(self._turn())
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def batches(self, total: int, size: int) -> Iterator[list[Event]]:
        """``total`` events in batches of ``size``."""
        done = 0
        while done < total:
            k = min(size, total - done)
            yield self.events(k)
            done += k


def small_events(target: int = 300) -> list[Event]:
    """Three ~``target``-byte events (encoded): an assistant tool call, its result, a prompt."""
    rng = random.Random(SEED + 1)
    corpus = _corpus(rng, 20_000)

    def tune(make: Callable[[str], Event]) -> Event:
        n = target
        for _ in range(20):
            ev = make(corpus[1000 : 1000 + n])
            size = len(encode_body(ev)[1])
            if abs(size - target) <= 2:
                return ev
            n = max(1, n + target - size)
        return ev

    return [
        tune(
            lambda t: AssistantMessage(
                content=(
                    TextBlock(t),
                    ToolUseBlock(
                        id="toolu_01AbCdEfGhIjKlMnOpQrStUv",
                        name="Bash",
                        input={"command": "pytest -q tests/test_eventlog.py"},
                    ),
                ),
                usage=Usage(input_tokens=3, output_tokens=120, cache_read_input_tokens=41_000),
                stop_reason="tool_use",
                model=MODEL,
            )
        ),
        tune(
            lambda t: ToolResult(
                block=ToolResultBlock("toolu_01AbCdEfGhIjKlMnOpQrStUv", t), tool_name="Bash"
            )
        ),
        tune(lambda t: UserPrompt(content=(TextBlock(t),))),
    ]


@dataclass
class Measurement:
    """Per-round durations of one measured loop doing ``ops`` operations per round."""

    name: str
    ops: int
    times: list[float] = field(default_factory=list)

    def rates(self) -> list[float]:
        return [self.ops / t for t in self.times]

    @property
    def best_rate(self) -> float:
        return max(self.rates())

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates())

    @property
    def best_time(self) -> float:
        return min(self.times)

    @property
    def median_time(self) -> float:
        return statistics.median(self.times)


def paired_ratio(cand: Measurement, base: Measurement) -> float:
    """Median over rounds of (candidate rate / baseline rate) of the same round."""
    return statistics.median(b / c for c, b in zip(cand.times, base.times, strict=True))


def interleave(
    loops: dict[str, Callable[[], float]], ops: int, rounds: int
) -> dict[str, Measurement]:
    """Run each loop ``rounds`` times, interleaved; each loop returns its own elapsed seconds.

    The order rotates every round so that no loop always runs first (or right after another).
    """
    names = list(loops)
    out = {n: Measurement(n, ops) for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].times.append(loops[name]())
    return out


def timed_loop(
    fn: Callable[[Any], object], items: Sequence[Any], calls: int
) -> Callable[[], float]:
    """A loop calling ``fn`` on ``calls`` items (cycling through them); returns elapsed seconds."""

    def run() -> float:
        it = itertools.islice(itertools.cycle(items), calls)
        t = time.perf_counter()
        for item in it:
            fn(item)
        return time.perf_counter() - t

    return run


def append_workloads() -> dict[str, list[list[Event]]]:
    """The batches of the append benchmarks: 1 x ~300 B, 100 x ~300 B, 100 x mixed events."""
    small = small_events()
    factory = EventFactory()
    return {
        "1 x 300 B": [[e] for e in small],
        "100 x 300 B": [(small * 34)[:100]],
        "100 x mixed": [factory.events(100) for _ in range(20)],
    }


def describe_workloads(workloads: dict[str, list[list[Event]]]) -> str:
    parts = []
    for label, batches in workloads.items():
        sizes = [len(encode_body(e)[1]) for b in batches for e in b]
        parts.append(
            f"{label}: {len(batches)} distinct batches, {min(sizes)}-{max(sizes)} bytes, "
            f"mean {sum(sizes) / len(sizes):.0f} bytes/event"
        )
    return "events (msgpack body sizes): " + "; ".join(parts)


def report_append_case(
    title: str,
    res: dict[str, Measurement],
    n_events: int,
    target: float | None,
    baseline: str,
) -> tuple[float, float]:
    """Print one append case; return the liteagent/``baseline`` ratios (best/best, paired)."""
    print(f"\n-- {title}")
    for m in res.values():
        print(
            f"   {m.name:15s} best {fmt_rate(m.best_rate):>7s} calls/s "
            f"({fmt_rate(m.best_rate * n_events):>7s} events/s, {1e6 / m.best_rate:8.1f} "
            f"us/call); median {fmt_rate(m.median_rate):>7s} calls/s"
        )
    lt, base = res["liteagent"], res[baseline]
    ratio_best = lt.best_rate / base.best_rate
    ratio_med = paired_ratio(lt, base)
    verdict = f"{ratio_best:.2f}x (no target)" if target is None else fmt_ratio(ratio_best, target)
    print(
        f"   ratio liteagent/{baseline}: best/best {verdict}; "
        f"median of per-round ratios {ratio_med:.2f}x"
    )
    return ratio_best, ratio_med


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_ratio(ratio: float, target: float, *, higher_is_better: bool = True) -> str:
    met = ratio >= target if higher_is_better else ratio <= target
    op = ">=" if higher_is_better else "<="
    verdict = "MET" if met else "MISSED"
    return f"{ratio:.2f}x (target {op} {target}x: {verdict})"


def environment() -> str:
    def ver(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "?"

    return (
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} | nproc {os.cpu_count()} | "
        f"Python {platform.python_version()} | apsw {ver('apsw')} | msgspec {ver('msgspec')} | "
        f"xxhash {ver('xxhash')} | {platform.platform()}"
    )


def library_fingerprint() -> str:
    """Which library code was measured: a hash of the eventlog sources and their newest mtime
    (the library changes under the benchmarks while it is being developed)."""
    import liteagent.eventlog as pkg  # noqa: PLC0415 -- only for its location

    folder = os.path.dirname(os.path.abspath(pkg.__file__ or ""))
    digest = hashlib.sha256()
    newest = 0.0
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
            newest = max(newest, os.stat(path).st_mtime)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(newest))
    return f"eventlog sources sha256 {digest.hexdigest()[:12]} (newest file modified {when})"


def print_header(title: str, args: argparse.Namespace) -> None:
    print(f"== {title}{' (quick)' if args.quick else ''}")
    print(environment())
    print(library_fingerprint())
    print(f"command: {sys.executable} {' '.join(sys.argv)}")
    print(
        f"rounds: {args.rounds} (twice that for fsync cases; interleaved; best and median reported)"
    )


def add_common_args(p: argparse.ArgumentParser, rounds: int = 5) -> None:
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--rounds", type=int, default=None, help=f"rounds per loop (default {rounds})")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile the liteagent loops with cProfile and print the top entries",
    )
    p.add_argument("--dir", default=None, help="where to put the databases (default: a temp dir)")
    p.set_defaults(default_rounds=rounds)


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, in MiB.

    On Linux this is ``VmHWM`` of ``/proc/self/status``: ``getrusage``'s ``ru_maxrss`` carries the
    parent's peak across fork + exec, so a child started by a big parent would report the
    parent's figure. Elsewhere, ``resource.getrusage`` (``ru_maxrss``, KiB on Linux).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dir_size(*paths: str) -> int:
    """Total size in bytes of the given files (missing ones count 0)."""
    total = 0
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(p).st_size
    return total


def profile_top(fn: Callable[[], object], limit: int = 18) -> str:
    """Profile ``fn``: the top cProfile entries by own time, with their share, then (when
    pyinstrument is installed) a sampled call tree, which distorts small calls less."""
    text = _cprofile_top(fn, limit)
    try:
        import pyinstrument  # noqa: PLC0415 -- optional: pip install pyinstrument
    except ImportError:
        return text + "\n    (pip install pyinstrument for a sampled call tree)"
    profiler = pyinstrument.Profiler(interval=0.0002)
    profiler.start()
    fn()
    profiler.stop()
    tree = profiler.output_text(unicode=False, color=False, show_all=False)
    return (
        text
        + "\n    pyinstrument (sampled):\n"
        + "\n".join("    " + line for line in tree.splitlines() if line.strip())
    )


def _cprofile_top(fn: Callable[[], object], limit: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    lines = [
        f"    total {total:.3f} s under cProfile (profiling inflates Python-level calls)",
        "    own%   cum%   calls  function",
    ]
    for (file, line, func), (_cc, nc, tt, ct, _callers) in rows[:limit]:
        where = f"{os.path.basename(file)}:{line}" if line else file
        lines.append(
            f"    {100 * tt / total:5.1f}  {100 * ct / total:5.1f}  {nc:6d}  {func} ({where})"
        )
    return "\n".join(lines)
