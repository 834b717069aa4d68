"""A full disk under the SQLite backend is StorageIOError with errno ENOSPC (28), like the file
backend's, and nothing acknowledged is lost.

Two ways to fill the disk: a real 256 KiB tmpfs mounted for the test (needs root and mount
rights; skipped otherwise), and an apsw VFS shim on the real file system whose writes fail with
SQLite's "disk full" while the test says so (runs everywhere).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from liteagent.eventlog import Checkpointer, StorageIOError, sqlite_checkpointer
from liteagent.eventlog.conformance import prompts, texts


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted on a fresh folder (unmounted afterwards)."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    point = tmp_path / "full"
    point.mkdir()
    if os.geteuid() != 0 or mount is None or umount is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace')}")
    try:
        yield point
    finally:
        subprocess.run([umount, str(point)], check=True)


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
