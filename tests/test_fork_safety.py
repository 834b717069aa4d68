"""A process forked while a file store is open (a daemon's ``multiprocessing`` worker, started
while turns run on other threads) holds copies of every open descriptor for as long as it
lives. Its copies must never keep a lock the parent gave up (the parent drops its flocks
explicitly: the conformance suite's ``DurableLeaseTests``), nor keep the lease of a parent
killed with SIGKILL (the child closes its copies when it starts), and the child's own use of
the store must not share the parent's locks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from liteagent.eventlog import file_checkpointer
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import SessionLeasedError

WAIT = 60.0  # a bound on waiting (never asserted as a timing)

_HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from liteagent.eventlog import file_checkpointer
    from liteagent.eventlog.conformance import prompts

    cp = file_checkpointer(sys.argv[1])
    cp.append("s", prompts("a"))
    lease = cp.acquire_lease("s", owner="killed")
    reading = cp.read("s")
    next(reading)  # a read in progress too
    child = os.fork()
    if child == 0:
        time.sleep(120)
        os._exit(0)
    print(child, flush=True)
    time.sleep(600)
    """
)


def test_a_holder_killed_while_its_forked_child_lives_frees_its_lease(tmp_path: Path) -> None:
    """A process holding a lease forks and is killed with SIGKILL: the child (still alive)
    closed its copies of the lease file when it started, so the kernel frees the lease and
    another process takes it and writes."""
    root = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(root)], stdout=subprocess.PIPE, text=True
    )
    grandchild = 0
    try:
        assert holder.stdout is not None
        grandchild = int(holder.stdout.readline())
        holder.send_signal(signal.SIGKILL)
        holder.wait(WAIT)
        cp = file_checkpointer(root)
        try:
            cp.acquire_lease("s", owner="next").release()
            writer = threading.Thread(target=cp.append, args=("s", prompts("b")))
            writer.start()
            writer.join(WAIT)
            assert not writer.is_alive(), "the write waited for the forked child"
            assert ["a", "b"] == texts(cp.read("s"))
        finally:
            cp.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(WAIT)
        if holder.stdout is not None:
            holder.stdout.close()
        if grandchild:
            os.kill(grandchild, signal.SIGKILL)


def test_a_forked_child_does_not_share_its_parents_locks(tmp_path: Path) -> None:
    """The child of a process holding a lease, using the same checkpointer object, is refused
    the lease (its copy of the lease file is gone, so it cannot take the parent's lock as its
    own) and sees the parent's lease as lost; the parent still holds it afterwards."""
    cp = file_checkpointer(tmp_path / "store")
    try:
        cp.append("s", prompts("a"))
        lease = cp.acquire_lease("s", owner="parent")
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover -- reported through the pipe
            code = 1
            try:
                try:
                    cp.acquire_lease("s", owner="child")
                except SessionLeasedError:
                    code = 0 if lease.lost else 2
            finally:
                os.write(write, bytes([code]))
                os._exit(0)
        os.close(write)
        try:
            answer = os.read(read, 1)
        finally:
            os.close(read)
            os.waitpid(child, 0)
        assert b"\x00" == answer
        assert not lease.lost
        assert lease.info == cp.lease_holder("s")
        lease.release()
    finally:
        cp.close()


_HALF_BUILT = textwrap.dedent(
    """
    import os, sys
    from liteagent.eventlog import file_checkpointer, sqlite_checkpointer
    from liteagent.eventlog.errors import InvalidArgumentError
    kept = []
    for make in (
        lambda: sqlite_checkpointer(sys.argv[1] + "/x.db", synchronous="bogus"),
        lambda: file_checkpointer(sys.argv[1] + "/f", durability="bogus"),
    ):
        try:
            make()
        except InvalidArgumentError as e:
            kept.append(e)  # its traceback keeps the half-built checkpointer alive
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    with sqlite_checkpointer(sys.argv[1] + "/ok.db") as cp:  # the process goes on as usual
        cp.append("s", [])
    print("done")
    """
)


def test_a_fork_beside_a_checkpointer_whose_construction_failed_is_quiet(tmp_path: Path) -> None:
    """A checkpointer whose construction failed halfway (kept alive by the traceback of its
    error) is registered for the fork hooks: a fork then raised in the hooks, before the fork
    in the parent and after it in the child ("Exception ignored in _before_fork"), which
    under warnings-as-errors failed every test that forked a process afterwards."""
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", _HALF_BUILT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (0, "done\n", "") == (out.returncode, out.stdout, out.stderr)
