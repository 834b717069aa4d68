"""Running a ``grep`` search in a child process that can be stopped at any moment.

Why a process: Python's ``re`` holds the GIL while it matches, and a regex such as ``(a+)+$``
on a 41-byte line backtracks for longer than the universe has existed. In-process, that freezes
every thread of the host: other sessions, the asyncio loop, cancellation. The alternatives were
measured on this project's machines and rejected: the ``regex`` package releases the GIL and
takes a per-call ``timeout``, but compiling ``a{4294967294}`` allocates gigabytes and compiling
a 20,000-character literal takes minutes, neither bounded by the timeout; RE2 (``google-re2``)
matches in linear time but has no per-call bound (a 100,000-character pattern on a 10 MiB line
took 42 s), refuses backreferences and lookaround, and changes the syntax. A child process
running the standard ``re`` keeps grep's semantics exactly (Python syntax, backreferences,
lookaround) and is bounded by construction: it is killed (SIGKILL) when the call's time limit
passes or its cancel token fires (polled every :data:`POLL_SECONDS`), and its address space is
capped at :data:`WORKER_MEMORY_BYTES`. The price is starting an interpreter per call (about
20 ms: ``python -I -S`` with the standard library only) and needing ``sys.executable``.

This process walks the workspace (the walk's symlink rules stay here) and feeds the child the
files to search through a pipe, while it reads the child's matches; see ``_grep_worker`` for the
protocol. Both pipes are non-blocking, so neither side can wait on the other for ever.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from liteagent.eventlog import CancelToken

from ._errors import os_error_message
from ._paths import printed_name
from ._walk import Entry

__all__ = ["POLL_SECONDS", "WORKER_MEMORY_BYTES", "SearchLimits", "SearchResult", "run_search"]

POLL_SECONDS = 0.05
WORKER_MEMORY_BYTES = 1024 * 1024 * 1024
_WORKER_TAG = "liteagent-grep"
_REFILL_BYTES = 64 * 1024
_READ_CHUNK = 64 * 1024
_REAP_SECONDS = 5.0
_UNREADABLE_KEPT = 10


@dataclass(frozen=True)
class SearchLimits:
    """The caps of one search: file size, binary sniff, line length, matches and characters."""

    max_file_bytes: int
    sniff_bytes: int
    line_chars: int
    max_matches: int
    max_chars: int


@dataclass
class SearchResult:
    """What the search found and how it ended.

    ``stopped`` is ``None`` when every file was searched (or the caps were reached: ``full``),
    else ``"cancelled"``, ``"timed out"`` or ``"failed"`` (then ``failure`` says why);
    ``bad_pattern`` is the compiler's message for a regex that does not compile.
    """

    lines: list[str] = field(default_factory=list)
    full: bool = False
    skipped_large: int = 0
    unreadable: list[str] = field(default_factory=list)
    bad_pattern: str | None = None
    stopped: str | None = None
    failure: str = ""


def run_search(
    pattern: str,
    *,
    ignore_case: bool,
    files: Iterator[Entry],
    limits: SearchLimits,
    time_limit: float,
    cancel: CancelToken,
) -> SearchResult:
    """Search ``files`` for ``pattern`` in a child process, for at most ``time_limit`` seconds
    and until ``cancel`` fires (module docstring). Never raises for the child's sake: a child
    that cannot start or dies is a ``"failed"`` result."""
    result = SearchResult()
    if cancel.cancelled:
        result.stopped = "cancelled"
        return result
    executable = sys.executable
    if not executable:
        result.stopped, result.failure = "failed", "no Python interpreter (sys.executable)"
        return result
    header = {
        "pattern": pattern,
        "ignore_case": ignore_case,
        "memory_bytes": WORKER_MEMORY_BYTES,
        "max_file_bytes": limits.max_file_bytes,
        "sniff_bytes": limits.sniff_bytes,
        "line_chars": limits.line_chars,
        "max_matches": limits.max_matches,
        "max_chars": limits.max_chars,
    }
    try:
        proc = subprocess.Popen(  # noqa: S603 -- our own worker, run by our own interpreter
            [executable, "-I", "-S", "-W", "ignore", "-c", _worker_source(), _WORKER_TAG],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError as e:
        result.stopped = "failed"
        result.failure = f"cannot start the search process: {e.strerror or e}"
        return result
    with proc:
        try:
            _Pump(proc, result, files, time.monotonic() + time_limit, cancel).run(_line(header))
        finally:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_REAP_SECONDS)
    return result


class _Pump:
    """Feeds the child the files and reads its messages until it ends, the deadline passes or
    the cancel token fires."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        result: SearchResult,
        files: Iterator[Entry],
        deadline: float,
        cancel: CancelToken,
    ) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self.proc = proc
        self.stdin = proc.stdin
        self.result = result
        self.files = files
        self.deadline = deadline
        self.cancel = cancel
        self.in_fd = proc.stdin.fileno()
        self.out_fd = proc.stdout.fileno()
        self.feeding = True
        self.writing = True
        self.ended = False
        self.received = bytearray()
        self.selector: selectors.BaseSelector

    def run(self, header: bytes) -> None:
        os.set_blocking(self.in_fd, False)
        os.set_blocking(self.out_fd, False)
        pending = bytearray(header)
        with selectors.DefaultSelector() as selector:
            self.selector = selector
            selector.register(self.out_fd, selectors.EVENT_READ)
            selector.register(self.in_fd, selectors.EVENT_WRITE)
            while True:
                if self.cancel.cancelled:
                    self.result.stopped = "cancelled"
                    return
                if time.monotonic() >= self.deadline:
                    self.result.stopped = "timed out"
                    return
                self._refill(pending)
                if self.writing and not pending and not self.feeding:
                    self._close_stdin()
                # stdin stays registered only while it is open, and then ``pending`` is not
                # empty (the refill stops short only for a cancel or the deadline, handled
                # above), so this waits for the child instead of spinning.
                for key, _ in selector.select(POLL_SECONDS):
                    if key.fd == self.out_fd:
                        if not self._read():
                            self._finish()
                            return
                    elif self.writing:
                        self._write(pending)

    def _refill(self, pending: bytearray) -> None:
        while self.feeding and len(pending) < _REFILL_BYTES:
            entry = next(self.files, None)
            if entry is None:
                self.feeding = False
                return
            pending += _line([printed_name(entry.rel), os.fsencode(entry.path).hex()])
            if self.cancel.cancelled or time.monotonic() >= self.deadline:
                return

    def _write(self, pending: bytearray) -> None:
        try:
            written = os.write(self.in_fd, pending[:_READ_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # the child is gone or stopped reading (it said why, or it died)
            pending.clear()
            self.feeding = False
            self._close_stdin()
            return
        del pending[:written]

    def _close_stdin(self) -> None:
        if not self.writing:
            return
        self.writing = False
        self.selector.unregister(self.in_fd)
        with contextlib.suppress(OSError):
            self.stdin.close()

    def _read(self) -> bool:
        """Read what the child wrote; return False at end of file."""
        try:
            data = os.read(self.out_fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        if not data:
            return False
        self.received += data
        *complete, rest = self.received.split(b"\n")
        self.received = bytearray(rest)
        for raw in complete:
            try:
                message = json.loads(raw)
            except ValueError:
                self.result.stopped = "failed"
                self.result.failure = "the search process wrote something unreadable"
                return False
            self._message(message)
        return True

    def _message(self, message: list[Any]) -> None:
        kind = message[0]
        result = self.result
        if kind == "m":
            result.lines.append(message[1])
        elif kind == "large":
            result.skipped_large += 1
        elif kind == "unreadable":
            if len(result.unreadable) < _UNREADABLE_KEPT:
                error = OSError(message[2], message[3])
                result.unreadable.append(os_error_message(error, message[1]))
        elif kind in ("done", "full", "bad", "fail"):
            self.ended = True
            self.feeding = False
            result.full = kind == "full"
            if kind == "bad":
                result.bad_pattern = message[1]
            elif kind == "fail":
                result.stopped, result.failure = "failed", message[1]

    def _finish(self) -> None:
        """The child closed its output: check that it ended by the protocol."""
        if self.ended or self.result.stopped is not None:
            return
        self.result.stopped = "failed"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=_REAP_SECONDS)
        code = self.proc.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        self.result.failure = f"the search process ended unexpectedly ({how})"


def _line(value: object) -> bytes:
    return json.dumps(value).encode("ascii") + b"\n"


@cache
def _worker_source() -> str:
    return resources.files(__package__).joinpath("_grep_worker.py").read_text(encoding="utf-8")
