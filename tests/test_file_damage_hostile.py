"""The file backend facing hostile or odd file-system entries, on real files: symlinks, FIFOs,
folders and symlink loops where session files and blobs belong, and frames whose header count
disagrees with their payload. Each is refused or reported with a LiteAgentError; none is
followed, none blocks, none hides the rest of the store."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from liteagent.eventlog import IntegrityReport, collect_garbage, file_checkpointer, zlib_codec
from liteagent.eventlog._codec import Codec
from liteagent.eventlog._frames import Record, build_frame, encode_records
from liteagent.eventlog.conformance import damage_file_log, prompts
from liteagent.eventlog.conformance._damage_file import file_frames
from liteagent.eventlog.errors import (
    CorruptBlobError,
    CorruptLogError,
    LiteAgentError,
    StorageIOError,
)
from liteagent.eventlog.types import TextBlock, UserPrompt

_BOUND = 20.0  # seconds: far more than any of these operations needs


def _finishes(fn: Callable[[], object]) -> object:
    """Run ``fn`` in a thread; fail if it is still running after a generous bound. Return its
    result or the LiteAgentError it raised."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["r"] = fn()
        except LiteAgentError as e:
            out["r"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(_BOUND)
    assert not t.is_alive(), "the operation blocked"
    return out["r"]


def _store(tmp_path: Path, codec: Codec | None = None) -> Path:
    root = tmp_path / "store"
    with file_checkpointer(root, codec=codec) as cp:
        for i in range(3):
            cp.append("s2", prompts(f"s2 p{i}"))
        cp.append("s1", prompts("s1"))
    return root


def test_symlink_at_lease_path_is_refused_not_followed(tmp_path: Path) -> None:
    """A symlink at a session's lease path pointing at another session's log is refused with
    a StorageIOError naming the path; the other log is untouched."""
    root = _store(tmp_path)
    (root / ".s1.lease").unlink(missing_ok=True)
    os.symlink("s2.log", root / ".s1.lease")
    before = (root / "s2.log").read_bytes()
    with file_checkpointer(root) as cp:
        with pytest.raises(StorageIOError, match=r"\.s1\.lease is a symbolic link"):
            cp.acquire_lease("s1")
        with pytest.raises(StorageIOError, match="symbolic link"):
            cp.lease_holder("s1")
        assert [e.seq for e in cp.read("s2")] == [1, 2, 3]
    assert (root / "s2.log").read_bytes() == before


def test_symlink_at_log_path_is_refused_not_followed(tmp_path: Path) -> None:
    """A symlink at a session's log is never followed: reads, appends and repairs of that
    session raise StorageIOError, the target is untouched, and check_integrity reports it."""
    root = _store(tmp_path)
    (root / "s1.log").unlink()
    os.symlink("s2.log", root / "s1.log")
    before = (root / "s2.log").read_bytes()
    with file_checkpointer(root) as cp:
        with pytest.raises(StorageIOError, match="symbolic link"):
            list(cp.read("s1"))
        with pytest.raises(StorageIOError, match="symbolic link"):
            cp.append("s1", prompts("x"))
        with pytest.raises(StorageIOError, match="symbolic link"):
            cp.repair("s1")
        report = cp.check_integrity()
        assert not report.ok
        assert [p.session_id for p in report.problems] == ["s1"]
        assert [e.seq for e in cp.read("s2")] == [1, 2, 3]
    assert (root / "s2.log").read_bytes() == before


def _mismatched(root: Path, count: int, codec: Codec | None = None) -> None:
    """Append to s2 a checksum-valid frame holding one record whose header says ``count``."""
    log = root / "s2.log"
    data = log.read_bytes()
    s, e = file_frames(log)[-1]
    payload = data[s + 28 : e - 4]
    if codec is not None:
        payload = codec.decode(payload)
    rec = msgspec.msgpack.decode(payload, type=list[Record])[0]
    log.write_bytes(data + build_frame(encode_records([rec], codec), 4, count))


@pytest.mark.parametrize("codec", [None, zlib_codec()], ids=["plain", "zlib"])
def test_frame_count_mismatch_is_damage(tmp_path: Path, codec: Codec | None) -> None:
    """A frame whose header count disagrees with the records in its payload (checksums
    valid) is damage: read and append raise CorruptLogError, check_integrity reports it, and
    repair quarantines from that frame, after which the session works again."""
    root = _store(tmp_path, codec)
    _mismatched(root, 5, codec)
    with file_checkpointer(root, codec=codec) as cp:
        with pytest.raises(CorruptLogError, match="counts 5 events but holds 1"):
            [e.seq for e in cp.read("s2")]
        with pytest.raises(CorruptLogError):
            cp.append("s2", prompts("next"))
        report = cp.check_integrity()
        assert not report.ok
        assert [(p.kind, p.seq) for p in report.problems] == [("corrupt", 4)]
        rep = cp.repair("s2")
        assert rep.repaired
        assert rep.kept_head == 3
        assert rep.quarantine is not None
        assert cp.append("s2", prompts("next")) == 4
        assert [e.seq for e in cp.read("s2")] == [1, 2, 3, 4]
        assert cp.check_integrity().ok


def test_fifo_at_log_path_does_not_block(tmp_path: Path) -> None:
    """A FIFO in place of a session's log makes read, head, append and repair raise
    StorageIOError at once (never block), and check_integrity report it."""
    root = _store(tmp_path)
    (root / "s1.log").unlink()
    os.mkfifo(root / "s1.log")
    with file_checkpointer(root) as cp:
        for fn in (
            lambda: list(cp.read("s1")),
            lambda: cp.head("s1"),
            lambda: cp.append("s1", prompts("x")),
            lambda: cp.repair("s1"),
        ):
            result = _finishes(fn)
            assert isinstance(result, StorageIOError)
            assert "FIFO" in str(result)
        report = _finishes(cp.check_integrity)
        assert isinstance(report, IntegrityReport)
        assert not report.ok
        assert [e.seq for e in cp.read("s2")] == [1, 2, 3]


def test_fifo_at_lease_path_does_not_block(tmp_path: Path) -> None:
    """A FIFO at a session's lease path is refused at once with a StorageIOError."""
    root = _store(tmp_path)
    (root / ".s1.lease").unlink(missing_ok=True)
    os.mkfifo(root / ".s1.lease")
    with file_checkpointer(root) as cp:
        assert isinstance(_finishes(lambda: cp.acquire_lease("s1")), StorageIOError)
        assert isinstance(_finishes(lambda: cp.lease_holder("s1")), StorageIOError)


def test_fifo_in_place_of_blob_does_not_block(tmp_path: Path) -> None:
    """A FIFO in place of a blob file makes get() raise CorruptBlobError at once."""
    root = tmp_path / "store"
    with file_checkpointer(root) as cp:
        ref = cp.blobs.put(b"old file content")
        path = root / "blobs" / ref[7:9] / ref[9:]
        path.unlink()
        os.mkfifo(path)
        result = _finishes(lambda: cp.blobs.get(ref))
        assert isinstance(result, CorruptBlobError)
        assert "FIFO" in str(result)


def test_folder_in_place_of_blob_is_a_read_error(tmp_path: Path) -> None:
    """A folder in place of a blob file makes get() raise StorageIOError (it cannot be
    read), as before."""
    root = tmp_path / "store"
    with file_checkpointer(root) as cp:
        ref = cp.blobs.put(b"content")
        path = root / "blobs" / ref[7:9] / ref[9:]
        path.unlink()
        path.mkdir()
        with pytest.raises(StorageIOError):
            cp.blobs.get(ref)


def _blob_folder(root: Path) -> Path:
    return next(p for p in (root / "blobs").iterdir() if p.is_dir())


def test_gc_skips_symlink_loop_in_blob_folder(tmp_path: Path) -> None:
    """A symlink loop in a blob folder does not make garbage collection raise: it is skipped
    and the unreferenced blob is still collected."""
    root = tmp_path / "store"
    with file_checkpointer(root) as cp:
        cp.blobs.put(b"hello")
        folder = _blob_folder(root)
        os.symlink("a" * 62, folder / ("a" * 62))
        report = collect_garbage(cp, grace=0)
        assert report.deleted == 1
        assert os.path.islink(folder / ("a" * 62))


def test_gc_skips_tmp_leftover_that_is_a_folder(tmp_path: Path) -> None:
    """An old '.tmp-*' entry that is a folder is not a leftover of a put: collection skips it
    instead of raising, and still removes an old '.tmp-*' file."""
    root = tmp_path / "store"
    with file_checkpointer(root) as cp:
        cp.blobs.put(b"hello")
        folder = _blob_folder(root)
        d = folder / ".tmp-leftover"
        d.mkdir()
        os.utime(d, (0, 0))
        f = folder / ".tmp-file"
        f.write_bytes(b"partial")
        os.utime(f, (0, 0))
        report = collect_garbage(cp, grace=0)
        assert report.leftovers == 1
        assert d.is_dir()
        assert not f.exists()


def test_symlink_loop_log_does_not_hide_other_sessions(tmp_path: Path) -> None:
    """One '<id>.log' that is a symlink loop is listed (a damaged session, not a hidden one)
    and reported by check_integrity(); the healthy sessions are still listed and checked."""
    root = _store(tmp_path)
    os.symlink("bad.log", root / "bad.log")
    with file_checkpointer(root) as cp:
        assert sorted(s.id for s in cp.list()) == ["bad", "s1", "s2"]
        report = cp.check_integrity()
        assert not report.ok
        assert [p.session_id for p in report.problems] == ["bad"]
        assert report.detail.startswith("3 sessions, 4 events checked")


def test_symlink_at_the_temp_path_of_a_truncate_is_not_followed(tmp_path: Path) -> None:
    """A symlink planted at ``.s1.tmp`` (where a truncate writes the new log) pointing at
    another session's log: truncating s1 replaces the link, never writes through it, and the
    other session keeps every event."""
    root = tmp_path / "store"
    with file_checkpointer(root) as cp:
        for i in range(3):
            cp.append("s1", [UserPrompt(content=(TextBlock(f"s1 p{i}"),))])
            cp.append("s2", [UserPrompt(content=(TextBlock(f"s2 p{i}"),))])
    os.symlink("s2.log", root / ".s1.tmp")
    with file_checkpointer(root) as cp:
        assert 1 == cp.truncate("s1", 1)
    with file_checkpointer(root) as cp:
        assert not (root / "s1.log").is_symlink()
        assert [1] == [e.seq for e in cp.read("s1")]
        assert [1, 2, 3] == [e.seq for e in cp.read("s2")]


def test_a_truncate_temp_file_left_beside_a_log_that_is_not_a_file_is_a_leftover(
    tmp_path: Path,
) -> None:
    """A ``.<id>.tmp`` whose log is gone, or is a symlink (no flock to ask whether a truncate
    is running), is reported as a leftover of an interrupted truncate; one beside a healthy,
    unlocked log too."""
    root = _store(tmp_path)
    (root / ".s1.tmp").write_bytes(b"partial")  # beside a healthy log
    (root / ".gone.tmp").write_bytes(b"partial")  # its log is gone
    os.symlink(root / "s1.log", root / "linked.log")
    (root / ".linked.tmp").write_bytes(b"partial")  # its log is a symlink
    with file_checkpointer(root) as cp:
        report = cp.check_integrity()
    leftovers = sorted(p.session_id or "" for p in report.problems if p.kind == "leftover")
    assert ["gone", "linked", "s1"] == leftovers


@pytest.mark.parametrize("seed", range(10))
def test_damage_file_log_goes_on_damaging_a_log_it_already_broke(tmp_path: Path, seed: int) -> None:
    """The conformance helper applied again and again to one log keeps damaging it, also once
    the log was cut below its header (it indexed past the end of the bytes); the store then
    reads what is left or refuses it, with library errors only."""
    rng = random.Random(seed)
    with file_checkpointer(tmp_path) as cp:
        cp.append("s", prompts("a", "b", "c"))
    for _ in range(60):
        assert damage_file_log(tmp_path, "s", rng)
    with file_checkpointer(tmp_path) as cp:
        report = cp.check_integrity()
        try:
            head = cp.head("s")
        except LiteAgentError:
            assert not report.ok  # what a read refuses, the check reports
        else:
            assert head <= 3


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "folder", "link to a log"])
def test_a_log_that_is_not_a_file_is_listed_as_a_damaged_session(tmp_path: Path, kind: str) -> None:
    """A session whose log became a FIFO, a link to nothing, a folder or a link to a real log
    is listed (it was left out of list(), so `lite-agent sessions` hid it), reading or
    appending to it raises StorageIOError, check_integrity() reports it, and the other
    sessions are untouched."""
    root = _store(tmp_path)
    log = root / "s1.log"
    before = (root / "s2.log").read_bytes()
    moved = tmp_path / "elsewhere.log"
    os.rename(log, moved)
    if kind == "fifo":
        os.mkfifo(log)
    elif kind == "dangling link":
        os.symlink(tmp_path / "nowhere.log", log)
    elif kind == "folder":
        log.mkdir()
    else:
        os.symlink(moved, log)
    with file_checkpointer(root) as cp:
        assert ["s1", "s2"] == sorted(s.id for s in cp.list())
        with pytest.raises(StorageIOError):
            list(cp.read("s1"))
        with pytest.raises(StorageIOError):
            cp.append("s1", prompts("x"))
        assert ["s1"] == [p.session_id for p in cp.check_integrity().problems]
    assert before == (root / "s2.log").read_bytes()
