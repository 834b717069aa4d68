"""Putting files back when the disk fails part-way: every failure, in the write or in the
rollback, reaches the caller as a library error naming each file, and every file whose write did
not fail ends where the restore (or its rollback) meant it to be.

Real files in a temp workspace; failures are injected at ``put_file`` (looked up at call time),
chosen by a seeded random generator per case.
"""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from liteagent.actors import _restore_files
from liteagent.actors._restore_files import RestoreFailedError, apply_files, backup_files
from liteagent.actors._restore_plan import FilePlan
from liteagent.eventlog import BlobStore, memory_checkpointer
from liteagent.eventlog.errors import OperationCancelledError
from liteagent.eventlog.types import RestoreFile

_ERRORS = [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EIO, "Input/output error"),
    OSError(errno.EACCES, "Permission denied"),
    OSError(errno.EROFS, "Read-only file system"),
    OSError("a bare OSError"),
]


def _workspace(
    root: Path, rng: random.Random, n: int
) -> tuple[dict[str, bytes | None], list[RestoreFile], BlobStore]:
    """``n`` files, each now present or absent at random; return the current contents and the
    restore records to a random target for each (present with new bytes, or absent)."""
    blobs = memory_checkpointer().blobs
    now: dict[str, bytes | None] = {}
    plans = []
    for i in range(n):
        rel = f"d{i % 3}/f{i}.txt"
        if rng.random() < 0.7:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            data = f"now {i} {rng.random()}".encode()
            (root / rel).write_bytes(data)
            now[rel] = data
        else:
            now[rel] = None
        target = None if rng.random() < 0.3 else f"target {i} {rng.random()}".encode()
        ref = None if target is None else blobs.put(target)
        plans.append(FilePlan(path=rel, target=ref, target_hash=None, last_hash=None))
    return now, backup_files(root, plans, blobs), blobs


def _content(root: Path, rel: str) -> bytes | None:
    try:
        return (root / rel).read_bytes()
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("seed", range(60))
def test_random_failures_while_putting_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Writes to the targets fail at random, and so do some of the rollback's writes: the
    caller gets RestoreFailedError (never a raw OSError) naming the file that failed and each
    file the rollback could not return; every other file is as it was before."""
    rng = random.Random(seed)
    root = tmp_path / "ws"
    root.mkdir()
    before, records, blobs = _workspace(root, rng, rng.randint(1, 8))
    fail_rate = rng.choice([0.1, 0.3, 0.6])
    real = _restore_files.put_file
    failed: dict[str, int] = {}

    def flaky(workdir: Path, rel: str, content: bytes | None, mode: int | None = None) -> None:
        if rng.random() < fail_rate:
            failed[rel] = failed.get(rel, 0) + 1
            raise rng.choice(_ERRORS)
        real(workdir, rel, content, mode)

    monkeypatch.setattr(_restore_files, "put_file", flaky)
    outcome: Exception | None = None
    try:
        apply_files(root, records, blobs, to_target=True)
    except Exception as e:  # noqa: BLE001 -- checked below: only the library's error may come
        outcome = e
    if outcome is not None:
        assert isinstance(outcome, RestoreFailedError), repr(outcome)
        message = str(outcome)
        assert "Errno" not in message
        for rel in failed:
            assert rel in message
        for f in records:
            if f.path not in failed:  # never touched, or written and returned
                assert before[f.path] == _content(root, f.path), f.path
        return
    assert not failed
    for f in records:
        want = None if f.target is None else blobs.get(f.target)
        assert want == _content(root, f.path)


@pytest.mark.parametrize("seed", range(30))
def test_random_failures_while_rolling_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Rolling a finished restore back (to the backups) goes on past a file that fails and
    names every file it could not return; the others are back as they were."""
    rng = random.Random(1000 + seed)
    root = tmp_path / "ws"
    root.mkdir()
    before, records, blobs = _workspace(root, rng, rng.randint(1, 8))
    apply_files(root, records, blobs, to_target=True)
    real = _restore_files.put_file
    failing = {f.path for f in records if rng.random() < 0.4}

    def flaky(workdir: Path, rel: str, content: bytes | None, mode: int | None = None) -> None:
        if rel in failing:
            raise rng.choice(_ERRORS)
        real(workdir, rel, content, mode)

    monkeypatch.setattr(_restore_files, "put_file", flaky)
    if failing:
        with pytest.raises(RestoreFailedError) as info:
            apply_files(root, records, blobs, to_target=False)
        assert f"could not return {len(failing)} of {len(records)} file(s)" in str(info.value)
        for rel in failing:
            assert rel in str(info.value)
    else:
        assert [f.path for f in records] == apply_files(root, records, blobs, to_target=False)
    for f in records:
        if f.path not in failing:
            assert before[f.path] == _content(root, f.path), f.path


def test_a_missing_backup_blob_is_named_not_raised_raw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backup whose blob is gone when the rollback needs it: the rollback still returns the
    other files and names the one it could not."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a before")
    (root / "b.txt").write_bytes(b"b before")
    blobs = memory_checkpointer().blobs
    plans = [
        FilePlan(
            path=p, target=blobs.put(b"target " + p.encode()), target_hash=None, last_hash=None
        )
        for p in ("a.txt", "b.txt")
    ]
    records = backup_files(root, plans, blobs)
    apply_files(root, records, blobs, to_target=True)
    real_get = blobs.get

    def get(ref: str) -> bytes:
        if ref == records[0].backup:
            raise _restore_files.RestoreFailedError("the blob is gone")  # any library error
        return real_get(ref)

    monkeypatch.setattr(blobs, "get", get)
    with pytest.raises(RestoreFailedError, match=r"a\.txt \(the blob is gone\)"):
        apply_files(root, records, blobs, to_target=False)
    assert b"b before" == (root / "b.txt").read_bytes()


def test_cancelling_part_way_returns_the_files_already_written(tmp_path: Path) -> None:
    """A stop between files: the files written so far go back, and the caller gets the
    cancellation."""
    root = tmp_path / "ws"
    root.mkdir()
    blobs = memory_checkpointer().blobs
    for p in ("a.txt", "b.txt", "c.txt"):
        (root / p).write_bytes(p.encode())
    plans = [
        FilePlan(path=p, target=blobs.put(b"new"), target_hash=None, last_hash=None)
        for p in ("a.txt", "b.txt", "c.txt")
    ]
    records = backup_files(root, plans, blobs)
    calls = iter([None, None, "stop now"])
    with pytest.raises(RestoreFailedError) as info:
        apply_files(root, records, blobs, to_target=True, stop=lambda: next(calls))
    assert isinstance(info.value.__cause__, OperationCancelledError)
    assert "the 2 file(s) already changed were returned" in str(info.value)
    assert sorted(os.listdir(root)) == ["a.txt", "b.txt", "c.txt"]
    for p in ("a.txt", "b.txt", "c.txt"):
        assert p.encode() == (root / p).read_bytes()
