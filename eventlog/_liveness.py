"""Whether the holder of a lease row still lives: its pid on this host, this boot and this pid
namespace (the SQLite and PostgreSQL leases take over a lease whose process here is gone)."""

from __future__ import annotations

import os
import socket

__all__ = ["MAX_PID", "holder_gone", "started_self"]

#: The largest process id (a ``pid_t``); a record naming another names no process.
MAX_PID = 2**31 - 1


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace").strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), ``"dead"`` for a
    zombie, None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields and fields[0] in (b"Z", b"X"):
        return "dead"
    return fields[19].decode() if len(fields) > 19 else None


def _machine() -> str:
    """This boot of this machine and this pid namespace: where pids of a lease row mean the
    same processes as ours."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{boot}|{ns}"


_self: dict[int, str] = {}


def started_self() -> str:
    """``<machine>|<start time>`` of this process (computed once per pid: a fork changes it)."""
    pid = os.getpid()
    value = _self.get(pid)
    if value is None:
        value = _self[pid] = f"{_machine()}|{_process_start(pid) or ''}"
    return value


def holder_gone(pid: object, host: object, started: object) -> bool:
    """Whether the holder ran here and its process no longer exists."""
    if type(pid) is not int or type(started) is not str or host != socket.gethostname():
        return False
    machine, _, start = started.rpartition("|")
    if machine != _machine() or machine == "|":
        return False  # another machine, another boot or another pid namespace
    if not 0 < pid <= MAX_PID:
        return True  # a damaged record: no process has that id
    if pid == os.getpid():
        return start != (_process_start(pid) or "")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # it exists (e.g. EPERM)
    now = _process_start(pid)
    return now == "dead" or (bool(start) and now is not None and now != start)
