"""A full disk under the SQLite backend is StorageIOError with errno ENOSPC (28), like the file
backend's, and nothing acknowledged is lost.

Two ways to fill the disk: a real 256 KiB tmpfs mounted for the test (needs root and mount
rights; skipped otherwise), and an apsw VFS shim on the real file system whose writes fail with
SQLite's "disk full" while the test says so (runs everywhere).
"""

from __future__ import annotations

import errno
import functools
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from _tmpfs import small_tmpfs as mounted
from structlog.testing import capture_logs

from liteagent.eventlog import Checkpointer, collect_garbage, sqlite_checkpointer
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.conformance._lease_processes import run_holder_killed
from liteagent.eventlog.errors import SessionLeasedError, StorageIOError


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted on a fresh folder (unmounted afterwards)."""
    with mounted(tmp_path / "full", 256) as point:
        yield point


def _fill(cp: Checkpointer, acknowledged: list[int]) -> None:
    """Append 2 KB prompts until an append raises; note each acknowledged one."""
    for i in range(10_000):
        cp.append("s", prompts(f"{i:04d}" + "x" * 2000))
        acknowledged.append(i)


def test_real_full_disk_is_enospc_and_keeps_acknowledged_events(small_tmpfs: Path) -> None:
    """Appending until a real tmpfs is full ends with StorageIOError(ENOSPC); every append
    acknowledged before is read back, and so is a blob put before."""
    acknowledged: list[int] = []
    with sqlite_checkpointer(small_tmpfs / "log.db") as cp:
        ref = cp.blobs.put(b"kept blob")
        with pytest.raises(StorageIOError) as info:
            _fill(cp, acknowledged)
        assert errno.ENOSPC == info.value.errno
        assert acknowledged == [int(t[:4]) for t in texts(cp.read("s"))]
        assert len(acknowledged) == cp.head("s")
        assert b"kept blob" == cp.blobs.get(ref)


class _FullDisk(apsw.VFS):
    """A VFS over the default one whose file writes fail with SQLITE_FULL while ``full``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.full = False
        super().__init__(name, "")

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:  # noqa: N802 -- apsw's name
        return _FullFile(self, name, flags)


class _FullFile(apsw.VFSFile):
    def __init__(
        self, vfs: _FullDisk, name: str | apsw.URIFilename | None, flags: list[int]
    ) -> None:
        self._vfs = vfs
        super().__init__("", name, flags)  # type: ignore[arg-type]

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802 -- apsw's name
        if self._vfs.full:
            raise apsw.FullError("disk full (injected by the test's VFS)")
        super().xWrite(data, offset)


@pytest.fixture
def full_disk_vfs() -> Iterator[_FullDisk]:
    vfs = _FullDisk("liteagent-test-full")
    try:
        yield vfs
    finally:
        vfs.unregister()


def test_sqlite_full_error_is_enospc(tmp_path: Path, full_disk_vfs: _FullDisk) -> None:
    """SQLite's "database or disk is full" is StorageIOError with errno 28 (it was 5); the
    failed append leaves nothing, and appends work again once there is room."""
    uri = f"file:{tmp_path / 'log.db'}?vfs={full_disk_vfs.name}"
    with sqlite_checkpointer(uri) as cp:
        cp.append("s", prompts("before"))
        full_disk_vfs.full = True
        with pytest.raises(StorageIOError) as info:
            cp.append("s", prompts("while full"))
        full_disk_vfs.full = False
        assert errno.ENOSPC == info.value.errno
        assert ["before"] == texts(cp.read("s"))
        assert 2 == cp.append("s", prompts("after"), expected_head=1)


def test_a_lease_released_on_a_full_disk_can_be_taken_again(
    tmp_path: Path, full_disk_vfs: _FullDisk
) -> None:
    """A release that cannot be written (the disk is full) leaves the row naming this process,
    whose pid is alive: the same checkpointer may take the lease again at once (it was an agent
    that could not continue after a full disk until the lease expired), and its renewer frees
    the row once there is room, so another checkpointer (another process) can take it. (``cp``
    is opened first: the process's one writer for the file is then the shim's.)"""
    uri = f"file:{tmp_path / 'log.db'}?vfs={full_disk_vfs.name}"
    with sqlite_checkpointer(uri) as cp, sqlite_checkpointer(tmp_path / "log.db") as other:
        lease = cp.acquire_lease("s", ttl=0.6)
        full_disk_vfs.full = True
        lease.release()  # logged, not raised
        full_disk_vfs.full = False
        assert other.lease_holder("s") is not None  # the row still names cp's lease
        assert cp.lease_holder("s") is None  # cp released it: nobody holds it for cp
        again = cp.acquire_lease("s", ttl=0.6)
        assert again.info.token > lease.info.token
        assert again.info.owner == other.lease_holder("s").owner  # type: ignore[union-attr]
        again.release()
        assert other.lease_holder("s") is None

        lease = cp.acquire_lease("s", ttl=0.6)
        full_disk_vfs.full = True
        lease.release()
        full_disk_vfs.full = False
        deadline = time.monotonic() + 10  # the renewer frees it (every ttl/3): well before
        while other.lease_holder("s") is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        with other.acquire_lease("s", ttl=30.0):
            pass


def test_a_lease_left_behind_is_freed_at_close(tmp_path: Path, full_disk_vfs: _FullDisk) -> None:
    """Closing the checkpointer tries once more to free a lease whose release failed."""
    uri = f"file:{tmp_path / 'log.db'}?vfs={full_disk_vfs.name}"
    cp = sqlite_checkpointer(uri)  # first: the process's writer for the file is the shim's
    with sqlite_checkpointer(tmp_path / "log.db") as other:
        with cp:
            lease = cp.acquire_lease("s", ttl=3600.0)
            full_disk_vfs.full = True
            lease.release()
            full_disk_vfs.full = False
            assert other.lease_holder("s") is not None
        assert other.lease_holder("s") is None


def test_someone_elses_live_lease_is_still_refused(
    tmp_path: Path, full_disk_vfs: _FullDisk
) -> None:
    """Only this checkpointer's own unreleased lease is taken over: another checkpointer's
    live lease on the session is still refused, before and after a failed release."""
    uri = f"file:{tmp_path / 'log.db'}?vfs={full_disk_vfs.name}"
    with sqlite_checkpointer(uri) as cp, sqlite_checkpointer(tmp_path / "log.db") as other:
        lease = cp.acquire_lease("s", ttl=3600.0)
        full_disk_vfs.full = True
        lease.release()
        full_disk_vfs.full = False
        with pytest.raises(SessionLeasedError):
            other.acquire_lease("s")  # the row is cp's until its renewer frees it
        with cp.acquire_lease("t", ttl=3600.0):
            with pytest.raises(SessionLeasedError):
                other.acquire_lease("t")
            mine = other.acquire_lease("u", ttl=3600.0)
            with pytest.raises(SessionLeasedError):
                cp.acquire_lease("u")
            mine.release()


def test_opening_a_store_on_a_full_disk_names_it(small_tmpfs: Path) -> None:
    """Creating a store where there is no room left raises StorageIOError(ENOSPC) naming the
    file and that it was being opened."""
    (small_tmpfs / "filler").write_bytes(bytes(250 * 1024))
    with pytest.raises(StorageIOError) as info:
        sqlite_checkpointer(small_tmpfs / "log.db")
    assert errno.ENOSPC == info.value.errno
    assert f"cannot open the SQLite store {str(small_tmpfs / 'log.db')!r}" in str(info.value)


@pytest.mark.processes
def test_a_lease_record_that_cannot_be_removed_is_logged_and_kept(
    tmp_path: Path, full_disk_vfs: _FullDisk
) -> None:
    """Removing the lease record a killed holder left (of a session never written) on a full
    disk: the failure is a StorageIOError that the removal logs instead of raising (as a delete
    and a garbage collection call it), and the record stays until a collection with room
    removes it."""
    db = tmp_path / "log.db"
    killed = run_holder_killed(functools.partial(sqlite_checkpointer, str(db)), "orphan")
    with sqlite_checkpointer(f"file:{db}?vfs={full_disk_vfs.name}") as cp:
        assert ["orphan"] == cp._lease_records()
        full_disk_vfs.full = True
        with pytest.raises(StorageIOError) as info:
            cp._drop_lease("orphan")
        assert errno.ENOSPC == info.value.errno
        with capture_logs() as logs:
            cp._drop_lease_quietly("orphan")
        full_disk_vfs.full = False
        assert ["eventlog.lease_record_kept"] == [e["event"] for e in logs]
        assert ["orphan"] == cp._lease_records()
        assert 1 == collect_garbage(cp, grace=0).leases_dropped
        assert [] == cp._lease_records()
        with cp.acquire_lease("orphan") as lease:
            assert killed.token < lease.token
