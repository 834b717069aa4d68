"""Running one shell command in its own process group, with a timeout, cancellation and a cap
on the output kept.

``run_command`` starts ``/bin/bash -c <command>`` in ``cwd`` with ``start_new_session=True``
(so the shell and everything it starts share a new process group), stdin from ``/dev/null``,
and stdout and stderr on one pipe (interleaved as the processes write them). It reads the pipe
and checks, every :data:`POLL_SECONDS`, whether the shell has exited, the timeout has passed or
the cancel token was cancelled. On timeout or cancellation it stops the whole group: SIGTERM,
then SIGKILL after :data:`TERM_GRACE_SECONDS` for whatever is still running. When the shell
exits by itself, processes it left running in its group (``sleep 100 &``) are stopped the same
way — a foreground command does not leave work behind (background work is what
``run_in_background`` is for). A process that leaves the group (``setsid``) escapes this; the
pipe is then read for at most :data:`DRAIN_SECONDS` more.

Process liveness ignores zombies (read from ``/proc`` where it exists): an orphan that died but
that PID 1 has not reaped yet counts as gone.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from liteagent.eventlog import CancelToken

__all__ = ["CommandResult", "OutputBuffer", "run_command"]

POLL_SECONDS = 0.05
TERM_GRACE_SECONDS = 0.5
DRAIN_SECONDS = 0.5
KILL_WAIT_SECONDS = 2.0
_READ_CHUNK = 65536
_READS_PER_POLL = 16


@dataclass(frozen=True)
class CommandResult:
    """How a command ended: its output (capped), its exit status and why it stopped.

    ``returncode`` is the shell's status (negative: killed by that signal; ``None`` if it could
    not be collected). ``timed_out`` and ``cancelled`` say the group was stopped for that reason.
    """

    output: str
    returncode: int | None
    timed_out: bool = False
    cancelled: bool = False
    omitted_bytes: int = 0


class OutputBuffer:
    """Keeps the first and last ``limit // 2`` characters of a byte stream (UTF-8, undecodable
    bytes replaced) and counts what it drops in between."""

    def __init__(self, limit: int) -> None:
        self._half = max(limit // 2, 1)
        # A character is at most 4 bytes: keeping 4x the characters in bytes is always enough.
        self._head = bytearray()
        self._tail = bytearray()
        self._max_bytes = 4 * self._half
        self.total_bytes = 0

    def add(self, data: bytes) -> None:
        """Append ``data`` to the stream."""
        self.total_bytes += len(data)
        room = self._max_bytes - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self._max_bytes:
                del self._tail[: len(self._tail) - self._max_bytes]

    def text(self) -> tuple[str, int]:
        """The kept text, with a marker where the middle was dropped, and the number of bytes
        dropped (0 when everything fit)."""
        if self.total_bytes == len(self._head) + len(self._tail):
            decoded = bytes(self._head + self._tail).decode("utf-8", errors="replace")
            if len(decoded) <= 2 * self._half:
                return decoded, 0
            head, tail = decoded[: self._half], decoded[-self._half :]
        else:
            head = bytes(self._head).decode("utf-8", errors="replace")[: self._half]
            tail = bytes(self._tail).decode("utf-8", errors="replace")[-self._half :]
        kept = len(head.encode("utf-8")) + len(tail.encode("utf-8"))
        omitted = max(self.total_bytes - kept, 1)
        marker = f"\n[... {omitted} bytes of output omitted ...]\n"
        return head + marker + tail, omitted


def run_command(
    command: str,
    cwd: Path,
    *,
    timeout: float | None,
    cancel: CancelToken,
    output_limit: int,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``command`` with ``/bin/bash -c`` in ``cwd`` until it exits, ``timeout`` seconds pass
    (``None``: no timeout) or ``cancel`` is cancelled; see the module docstring. ``env`` is the
    shell's whole environment (``None``: the host's; the ``bash`` tool always passes one). Raises
    ``OSError`` when the shell cannot be started (e.g. ``cwd`` does not exist)."""
    buffer = OutputBuffer(output_limit)
    if cancel.wait(0):  # cancelled before it started: do not start it
        return CommandResult(output="", returncode=None, cancelled=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    proc = subprocess.Popen(  # noqa: S603 -- running the model's shell command is this tool's job
        ["/bin/bash", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    timed_out = cancelled = False
    assert proc.stdout is not None
    with proc, selectors.DefaultSelector() as selector:
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
        open_pipe = True
        try:
            while proc.poll() is None:
                if open_pipe:
                    open_pipe = _read_ready(selector, fd, buffer, POLL_SECONDS)
                else:
                    time.sleep(POLL_SECONDS)
                if cancel.cancelled:
                    cancelled = True
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    timed_out = True
                    break
        finally:
            # Stop the group whatever happened: on timeout, cancellation, an exception while
            # reading, or leftovers of a shell that exited by itself.
            _stop_group(proc)
        drain_until = time.monotonic() + DRAIN_SECONDS
        while open_pipe and time.monotonic() < drain_until:
            open_pipe = _read_ready(selector, fd, buffer, POLL_SECONDS)
    output, omitted = buffer.text()
    return CommandResult(
        output=output,
        returncode=proc.returncode,
        timed_out=timed_out,
        cancelled=cancelled,
        omitted_bytes=omitted,
    )


def _read_ready(
    selector: selectors.BaseSelector, fd: int, buffer: OutputBuffer, wait: float
) -> bool:
    """Read what the pipe has within ``wait`` seconds; return whether it is still open."""
    if not selector.select(wait):
        return True
    for _ in range(_READS_PER_POLL):  # bounded, so a flood of output cannot starve the checks
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        if not data:
            selector.unregister(fd)
            return False
        buffer.add(data)
    return True


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop every live process of ``proc``'s group (SIGTERM, then SIGKILL after the grace) and
    reap ``proc``. Returns at once when the shell has exited and left nothing running."""
    pgid = proc.pid
    if proc.poll() is not None and not _group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    grace_until = time.monotonic() + TERM_GRACE_SECONDS
    while time.monotonic() < grace_until:
        if proc.poll() is not None and not _group_alive(pgid):
            return
        time.sleep(0.01)
    _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_WAIT_SECONDS)
    # SIGKILL is delivered asynchronously: wait (bounded) until the group is really gone.
    kill_until = time.monotonic() + KILL_WAIT_SECONDS
    while _group_alive(pgid) and time.monotonic() < kill_until:
        time.sleep(0.01)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether a process (not a zombie) of group ``pgid`` is still running."""
    proc_root = Path("/proc")
    if not (proc_root / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # the process ended while we looked
        # "<pid> (<comm>) <state> <ppid> <pgrp> ..."; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False
