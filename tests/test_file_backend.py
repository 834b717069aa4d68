"""The file checkpointer's own guarantees: torn tails, corruption, codecs, layout, blobs."""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from liteagent.eventlog import Position, file_checkpointer, project_dir, zlib_codec
from liteagent.eventlog._file import FileCheckpointer
from liteagent.eventlog._frames import FILE_HEADER_SIZE, FRAME_HEAD_SIZE
from liteagent.eventlog._paths import project_hash
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import (
    CodecError,
    CorruptBlobError,
    CorruptLogError,
    InvalidArgumentError,
    InvalidSessionIdError,
    SchemaVersionError,
    SessionLeasedError,
    StorageIOError,
)

SID = "s1"


def _open(root: Path, **kw: object) -> FileCheckpointer:
    cp = file_checkpointer(root, **kw)  # type: ignore[arg-type]
    assert isinstance(cp, FileCheckpointer)
    return cp


def _log(root: Path) -> Path:
    return root / f"{SID}.log"


def _three_batches(root: Path) -> list[int]:
    """Append three batches; return the file size after each."""
    sizes = []
    with _open(root) as cp:
        for batch in (["a", "b"], ["c"], ["d", "e", "f"]):
            cp.append(SID, prompts(*batch))
            sizes.append(_log(root).stat().st_size)
    return sizes


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


# -- torn tails -------------------------------------------------------------------------------


def test_torn_tail_is_invisible_to_readers(tmp_path: Path) -> None:
    """A last frame cut short reads as absent: head and events stop at the last whole frame."""
    sizes = _three_batches(tmp_path)
    os.truncate(_log(tmp_path), sizes[2] - 7)
    with _open(tmp_path) as cp:
        assert ["a", "b", "c"] == texts(cp.read(SID))
        assert 3 == cp.head(SID)


@pytest.mark.parametrize("cut", ["at a frame", "inside a frame"])
def test_a_log_cut_below_what_this_process_read_is_damage(tmp_path: Path, cut: str) -> None:
    """Another program cuts a log this checkpointer wrote and read whole (at a frame boundary,
    or inside a frame): that is not a torn tail of a crashed write but acknowledged events
    gone, so reads and appends raise CorruptLogError, nothing is written over the cut seqs,
    and a repair keeps what is left."""
    with file_checkpointer(tmp_path / "store") as cp:
        cp.append(SID, prompts("a"))
        size = cp.path_of(SID).stat().st_size
        cp.append(SID, prompts("b"))
        assert ["a", "b"] == texts(cp.read(SID))
        os.truncate(cp.path_of(SID), size if cut == "at a frame" else size + 5)
        with pytest.raises(CorruptLogError, match="cut by something other than liteagent"):
            list(cp.read(SID))
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("over the cut"))
        report = cp.repair(SID)
        assert (True, 1) == (report.repaired, report.kept_head)
        assert ["a"] == texts(cp.read(SID))
        assert 2 == cp.append(SID, prompts("after the repair"))


def test_torn_tail_is_reported_by_check_integrity(tmp_path: Path) -> None:
    """check_integrity names the session and the torn tail; it repairs nothing."""
    sizes = _three_batches(tmp_path)
    os.truncate(_log(tmp_path), sizes[2] - 7)
    with _open(tmp_path) as cp:
        report = cp.check_integrity()
    assert not report.ok
    assert [("torn_tail", SID, 4)] == [(p.kind, p.session_id, p.seq) for p in report.problems]
    assert sizes[2] - 7 == _log(tmp_path).stat().st_size


def test_torn_tail_is_cut_on_the_next_write(tmp_path: Path) -> None:
    """The next append cuts the torn tail back to the last whole frame and continues."""
    sizes = _three_batches(tmp_path)
    os.truncate(_log(tmp_path), sizes[2] - 7)
    with _open(tmp_path) as cp:
        assert 4 == cp.append(SID, prompts("g"))
        assert ["a", "b", "c", "g"] == texts(cp.read(SID))
        assert cp.check_integrity().ok


def test_torn_tail_seen_by_a_reader_is_cut_by_the_same_instance(tmp_path: Path) -> None:
    """A checkpointer that first read a torn log still cuts the tail before its own append."""
    sizes = _three_batches(tmp_path)
    os.truncate(_log(tmp_path), sizes[1] + FRAME_HEAD_SIZE + 3)
    with _open(tmp_path) as cp:
        assert Position(3, cp.position(SID).generation) == cp.position(SID)
        assert 4 == cp.append(SID, prompts("x"))
    with _open(tmp_path) as cp:
        assert ["a", "b", "c", "x"] == texts(cp.read(SID))


def test_zero_filled_tail_is_torn(tmp_path: Path) -> None:
    """Zeros after the last frame (space allocated, data never written) are a torn tail."""
    _three_batches(tmp_path)
    with _log(tmp_path).open("ab") as f:
        f.write(b"\0" * 5000)
    with _open(tmp_path) as cp:
        assert 6 == cp.head(SID)
        assert 7 == cp.append(SID, prompts("g"))
        assert cp.check_integrity().ok


def test_empty_log_file_is_an_empty_session(tmp_path: Path) -> None:
    """A log file created but never written (a writer killed between open and write) is an
    empty session: nothing to report, and appends start at 1."""
    _log(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    _log(tmp_path).write_bytes(b"")
    with _open(tmp_path) as cp:
        assert Position(0, 0) == cp.position(SID)
        assert [] == cp.list()
        assert cp.check_integrity().ok
        assert 1 == cp.append(SID, prompts("a"))
        assert ["a"] == texts(cp.read(SID))


def test_log_cut_below_its_header_is_damage(tmp_path: Path) -> None:
    """A log shorter than its header lost whatever it held: check_integrity reports it as
    corrupt, reads and writes raise CorruptLogError, and the bytes are left as they are."""
    _log(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    _log(tmp_path).write_bytes(b"LALOG\0")
    with _open(tmp_path) as cp:
        report = cp.check_integrity()
        assert [("corrupt", SID)] == [(p.kind, p.session_id) for p in report.problems]
        assert not report.ok
        with pytest.raises(CorruptLogError):
            list(cp.read(SID))
    with _open(tmp_path) as cp, pytest.raises(CorruptLogError):
        cp.append(SID, prompts("a"))
    assert b"LALOG\0" == _log(tmp_path).read_bytes()


# -- corruption -------------------------------------------------------------------------------


def test_flipped_byte_mid_file_raises_on_read(tmp_path: Path) -> None:
    """A flipped byte inside an earlier frame raises CorruptLogError naming session and seq."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[0] + FRAME_HEAD_SIZE + 2)  # inside the second frame's payload
    with _open(tmp_path) as cp:
        it = cp.read(SID)
        assert ["a", "b"] == texts([next(it), next(it)])
        with pytest.raises(CorruptLogError) as info:
            next(it)
    assert (SID, 3) == (info.value.session_id, info.value.seq)


def test_flipped_byte_mid_file_fails_check_integrity(tmp_path: Path) -> None:
    """check_integrity reports damage before the tail as corrupt."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[0] + 3)  # inside the second frame's header
    with _open(tmp_path) as cp:
        report = cp.check_integrity()
    assert not report.ok
    assert [("corrupt", SID, 3)] == [(p.kind, p.session_id, p.seq) for p in report.problems]


def test_damaged_last_frame_is_not_taken_for_a_torn_tail(tmp_path: Path) -> None:
    """A whole last frame with a bad checksum is corruption: the next append refuses to cut
    it and nothing is written."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[1] + FRAME_HEAD_SIZE + 1)
    before = _log(tmp_path).read_bytes()
    with _open(tmp_path) as cp:
        with pytest.raises(CorruptLogError) as info:
            cp.append(SID, prompts("g"))
        assert (SID, 4) == (info.value.session_id, info.value.seq)
        with pytest.raises(CorruptLogError):
            cp.head(SID)
    assert before == _log(tmp_path).read_bytes()


def _frames(root: Path, sizes: list[int]) -> tuple[bytes, list[bytes]]:
    """The log's header and its frames (of _three_batches: seqs 1-2, 3, 4-6)."""
    data = _log(root).read_bytes()
    bounds = [FILE_HEADER_SIZE, *sizes]
    return data[:FILE_HEADER_SIZE], [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("last", [0, 1])
def test_repeated_last_frame_is_corruption_not_a_smaller_head(tmp_path: Path, last: int) -> None:
    """A last frame that repeats an earlier one is damage: position() and the writer refuse
    with CorruptLogError instead of taking its seq as the head, so the stale expected_head that
    head would match cannot get an append acknowledged that a read could never reach."""
    header, frames = _frames(tmp_path, _three_batches(tmp_path))
    _log(tmp_path).write_bytes(header + frames[0] + frames[1] + frames[last])
    before = _log(tmp_path).read_bytes()
    with _open(tmp_path) as cp, pytest.raises(CorruptLogError):
        cp.position(SID)
    with _open(tmp_path) as cp, pytest.raises(CorruptLogError):
        cp.append(SID, prompts("x"), expected_head=2 + last)  # the repeated frame's last seq
    assert before == _log(tmp_path).read_bytes()


def test_swapped_last_frames_are_corruption(tmp_path: Path) -> None:
    """The last two frames swapped: the writer finds the seqs out of order and refuses."""
    header, frames = _frames(tmp_path, _three_batches(tmp_path))
    _log(tmp_path).write_bytes(header + frames[0] + frames[2] + frames[1])
    with _open(tmp_path) as cp:
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("x"), expected_head=3)
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("x"))
    with _open(tmp_path) as cp, pytest.raises(CorruptLogError):
        cp.head(SID)


def test_flipped_byte_mid_file_refuses_appends(tmp_path: Path) -> None:
    """With a flipped byte in a middle frame, a fresh writer refuses to append (it verifies the
    whole log on its first write): nothing is acknowledged that read() cannot reach."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[0] + FRAME_HEAD_SIZE + 2)
    before = _log(tmp_path).read_bytes()
    with _open(tmp_path) as cp:
        with pytest.raises(CorruptLogError) as info:
            cp.append(SID, prompts("x"))
        assert (SID, 3) == (info.value.session_id, info.value.seq)
    assert before == _log(tmp_path).read_bytes()


def test_frames_written_by_another_writer_are_verified_before_the_next_append(
    tmp_path: Path,
) -> None:
    """A writer that already verified the log verifies what others appended since: a copy of
    an earlier frame appended behind its back is found before its next append."""
    _header, frames = _frames(tmp_path, _three_batches(tmp_path))
    with _open(tmp_path) as cp:
        assert 7 == cp.append(SID, prompts("g"))
        with _log(tmp_path).open("ab") as f:
            f.write(frames[0])
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("h"))
    with _open(tmp_path) as cp, pytest.raises(CorruptLogError):
        list(cp.read(SID))


def test_a_read_that_finds_damage_refuses_later_writes(tmp_path: Path) -> None:
    """Damage that a read finds (here: after this writer had verified the log) makes the
    session refuse appends and truncates until it is repaired."""
    sizes = _three_batches(tmp_path)
    with _open(tmp_path) as cp:
        assert 6 == cp.head(SID)
        _flip(_log(tmp_path), sizes[0] + FRAME_HEAD_SIZE + 2)
        with pytest.raises(CorruptLogError):
            list(cp.read(SID))
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("x"))
        with pytest.raises(CorruptLogError):
            cp.truncate(SID, 1)
        assert cp.damaged(SID) is not None


def test_damaged_file_header_raises(tmp_path: Path) -> None:
    """A damaged file header raises CorruptLogError for reads and writes alike."""
    _three_batches(tmp_path)
    _flip(_log(tmp_path), 20)
    with _open(tmp_path) as cp:
        with pytest.raises(CorruptLogError):
            list(cp.read(SID))
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("x"))
        assert not cp.check_integrity().ok


def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    """A log written in a newer format raises SchemaVersionError, and is left untouched."""
    import xxhash

    _three_batches(tmp_path)
    data = bytearray(_log(tmp_path).read_bytes())
    struct.pack_into("<I", data, 8, 2)
    struct.pack_into("<Q", data, 24, xxhash.xxh3_64_intdigest(bytes(data[:24])))
    _log(tmp_path).write_bytes(bytes(data))
    with _open(tmp_path) as cp:
        with pytest.raises(SchemaVersionError):
            list(cp.read(SID))
        with pytest.raises(SchemaVersionError):
            cp.append(SID, prompts("x"))
    assert bytes(data) == _log(tmp_path).read_bytes()


def test_a_format_version_no_release_wrote_is_damage(tmp_path: Path) -> None:
    """A header with a valid checksum naming format 0 (none was ever written) is not read as
    the current format: CorruptLogError for reads and writes, the file left as it is."""
    import xxhash

    _three_batches(tmp_path)
    data = bytearray(_log(tmp_path).read_bytes())
    struct.pack_into("<I", data, 8, 0)
    struct.pack_into("<Q", data, 24, xxhash.xxh3_64_intdigest(bytes(data[:24])))
    _log(tmp_path).write_bytes(bytes(data))
    with _open(tmp_path) as cp:
        with pytest.raises(CorruptLogError, match="format 0"):
            list(cp.read(SID))
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("x"))
        assert not cp.check_integrity().ok
    assert bytes(data) == _log(tmp_path).read_bytes()


# -- codecs -----------------------------------------------------------------------------------


class _FailingCodec:
    def encode(self, data: bytes) -> bytes:
        raise RuntimeError("encryption key unavailable")

    def decode(self, data: bytes) -> bytes:
        return data


def test_failing_codec_writes_nothing_and_repairs_nothing(tmp_path: Path) -> None:
    """A codec whose encode raises gives CodecError: no byte written, the torn tail kept."""
    sizes = _three_batches(tmp_path)
    os.truncate(_log(tmp_path), sizes[2] - 7)
    before = _log(tmp_path).read_bytes()
    with _open(tmp_path, codec=_FailingCodec()) as cp, pytest.raises(CodecError):
        cp.append(SID, prompts("x"))
    assert before == _log(tmp_path).read_bytes()


def test_zlib_codec_compresses_on_disk(tmp_path: Path) -> None:
    """With zlib_codec the frames on disk are compressed and read back exactly."""
    text = "repetitive " * 2000
    with _open(tmp_path / "z", codec=zlib_codec()) as cp:
        cp.append(SID, prompts(text))
        assert [text] == texts(cp.read(SID))
    with _open(tmp_path / "p") as cp:
        cp.append(SID, prompts(text))
    assert (tmp_path / "z" / f"{SID}.log").stat().st_size * 10 < _log(tmp_path / "p").stat().st_size


@pytest.mark.parametrize(("write", "read"), [("zlib", None), (None, "zlib")])
def test_wrong_codec_on_read_raises_codec_error(
    tmp_path: Path, write: str | None, read: str | None
) -> None:
    """Reading with the wrong codec raises CodecError naming the session and seq."""
    with _open(tmp_path, codec=zlib_codec() if write else None) as cp:
        cp.append(SID, prompts("a", "b"))
    with _open(tmp_path, codec=zlib_codec() if read else None) as cp:
        with pytest.raises(CodecError) as info:
            list(cp.read(SID))
        report = cp.check_integrity()
    assert (SID, 1) == (info.value.session_id, info.value.seq)
    assert [("codec", SID)] == [(p.kind, p.session_id) for p in report.problems]


def test_blobs_use_the_codec_and_verify_the_hash(tmp_path: Path) -> None:
    """Blobs are stored through the codec; a wrong codec or damaged bytes never pass as data."""
    data = b"file snapshot " * 500
    with _open(tmp_path, codec=zlib_codec()) as cp:
        ref = cp.blobs.put(data)
        assert data == cp.blobs.get(ref)
    (path,) = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert path.stat().st_size < len(data) // 10
    with _open(tmp_path) as cp, pytest.raises(CorruptBlobError):
        cp.blobs.get(ref)
    _flip(path, 5)
    with _open(tmp_path, codec=zlib_codec()) as cp, pytest.raises((CorruptBlobError, CodecError)):
        cp.blobs.get(ref)


def test_damaged_plain_blob_is_detected(tmp_path: Path) -> None:
    """A blob whose bytes changed on disk raises CorruptBlobError."""
    with _open(tmp_path) as cp:
        ref = cp.blobs.put(b"original content")
        path = tmp_path / "blobs" / ref[7:9] / ref[9:]
        _flip(path, 0)
        with pytest.raises(CorruptBlobError):
            cp.blobs.get(ref)


# -- layout -----------------------------------------------------------------------------------


def test_default_root_is_under_the_project_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """root=None puts logs in <$LITE_AGENT_HOME>/projects/<hash of the workdir>/sessions."""
    monkeypatch.setenv("LITE_AGENT_HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    with file_checkpointer(workdir=work) as cp:
        cp.append(SID, prompts("a"))
    expected = tmp_path / "home" / "projects" / project_hash(work) / "sessions" / f"{SID}.log"
    assert expected.is_file()
    assert project_dir(work) / "sessions" == expected.parent


def test_project_hash_follows_symlinks(tmp_path: Path) -> None:
    """A workspace reached through a symlink has the same project hash."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert project_hash(real) == project_hash(tmp_path / "link")
    assert 16 == len(project_hash(real))
    assert project_hash(real) != project_hash(tmp_path)


def test_home_argument_beats_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit home wins over $LITE_AGENT_HOME."""
    monkeypatch.setenv("LITE_AGENT_HOME", str(tmp_path / "env"))
    assert project_dir(tmp_path, home=tmp_path / "arg").is_relative_to(tmp_path / "arg")


def test_list_ignores_files_that_are_not_session_logs(tmp_path: Path) -> None:
    """Foreign files, hidden temp files and headerless logs are not sessions."""
    with _open(tmp_path) as cp:
        cp.append(SID, prompts("a"))
        for name in ("notes.txt", ".x.log", "bad id.log", "empty.log", f".{SID}.tmp"):
            (tmp_path / name).write_bytes(b"")
        assert [SID] == [i.id for i in cp.list()]


def test_leftover_truncate_temp_file_is_reported_and_removed(tmp_path: Path) -> None:
    """The temp file of a killed truncate is reported (not as damage) and removed by the
    session's next writer."""
    _three_batches(tmp_path)
    leftover = tmp_path / f".{SID}.tmp"
    leftover.write_bytes(b"partial")
    with _open(tmp_path) as cp:
        report = cp.check_integrity()
        assert report.ok
        assert ["leftover"] == [p.kind for p in report.problems]
        cp.append(SID, prompts("g"))
    assert not leftover.exists()


def test_truncate_inside_a_batch_rewrites_the_split_frame(tmp_path: Path) -> None:
    """truncate to a seq inside a batch keeps that batch's first events, on disk too."""
    with _open(tmp_path) as cp:
        cp.append(SID, prompts("a", "b", "c", "d", "e"))
        cp.append(SID, prompts("f"))
        cp.truncate(SID, 2)
    with _open(tmp_path) as cp:
        assert ["a", "b"] == texts(cp.read(SID))
        assert cp.check_integrity().ok
        assert 3 == cp.append(SID, prompts("c'"))


def test_file_starts_with_header_then_frames(tmp_path: Path) -> None:
    """One append of a new session writes the header and one frame in one go."""
    with _open(tmp_path) as cp:
        cp.append(SID, prompts("a", "b"))
    data = _log(tmp_path).read_bytes()
    assert data.startswith(b"LALOG\0\0\x01")
    length, first, count = struct.unpack_from("<IQI", data, FILE_HEADER_SIZE)
    assert (1, 2) == (first, count)
    assert FILE_HEADER_SIZE + FRAME_HEAD_SIZE + length + 4 == len(data)


# -- arguments --------------------------------------------------------------------------------


def test_bad_durability_is_refused(tmp_path: Path) -> None:
    """durability must be 'normal' or 'full'."""
    with pytest.raises(InvalidArgumentError):
        file_checkpointer(tmp_path, durability="fast")  # type: ignore[arg-type]


def test_bad_codec_is_refused(tmp_path: Path) -> None:
    """A codec without encode/decode is refused at construction."""
    with pytest.raises(InvalidArgumentError):
        file_checkpointer(tmp_path, codec="zlib")  # type: ignore[arg-type]


def test_root_that_is_a_file_gives_storage_io_error(tmp_path: Path) -> None:
    """A root that cannot be created as a folder raises StorageIOError."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageIOError):
        file_checkpointer(tmp_path / "file" / "sessions")


def test_many_sessions_keep_a_bounded_number_of_open_files(tmp_path: Path) -> None:
    """Writing 300 sessions keeps at most 128 cached file handles open."""
    with _open(tmp_path) as cp:
        for i in range(300):
            cp.append(f"s{i}", prompts(str(i)))
        open_fds = sum(1 for h in cp._handles.values() if h.fd >= 0)
        assert open_fds <= 128
        assert ["7"] == texts(cp.read("s7"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"root": 5},
        {"root": b"x"},
        {"root": "a\0b"},
        {"root": None, "workdir": None},
        {"root": None, "home": 5},
        {"durability": ["full"]},
        {"durability": None},
        {"codec": 5},
        {"codec": zlib_codec},
    ],
    ids=str,
)
def test_bad_argument_types_are_invalid_argument_errors(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    """Wrong types for root, workdir, home, durability or codec raise InvalidArgumentError
    (never a bare TypeError), before anything is created."""
    args: dict[str, object] = {"root": tmp_path / "store", **kwargs}
    with pytest.raises(InvalidArgumentError):
        file_checkpointer(**args)  # type: ignore[arg-type]
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("level", [10, -2, "6", 1.5, True])
def test_bad_zlib_level_is_an_invalid_argument_error(level: object) -> None:
    """zlib_codec refuses a level outside -1..9 with InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        zlib_codec(level)  # type: ignore[arg-type]


# -- blob durability --------------------------------------------------------------------------


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the path of every file or folder fsynced from now on."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_full_durability_fsyncs_every_new_blob_folder_and_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under "full", the first put creates blobs/ and blobs/xx/ and fsyncs the folder holding
    each (so the new entries survive power loss), then the blob and its folder."""
    root = tmp_path / "store"
    with _open(root, durability="full") as cp:
        synced = _record_fsyncs(monkeypatch)
        ref = cp.blobs.put(b"snapshot")
    blob = root / "blobs" / ref[7:9] / ref[9:]
    folders = [str(root), str(root / "blobs"), str(blob.parent)]
    assert folders == [p for p in synced if p in folders]
    assert any(p.startswith(str(blob.parent / ".tmp-")) for p in synced)
    assert b"snapshot" == blob.read_bytes()


def test_durability_flows_to_the_blob_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blob store has its checkpointer's durability; under "normal" a put (like an
    append) fsyncs nothing."""
    with _open(tmp_path / "full", durability="full") as cp:
        assert "full" == cp.blobs.durability  # type: ignore[attr-defined]
    with _open(tmp_path / "normal") as cp:
        assert "normal" == cp.blobs.durability  # type: ignore[attr-defined]
        synced = _record_fsyncs(monkeypatch)
        ref = cp.blobs.put(b"snapshot")
        assert b"snapshot" == cp.blobs.get(ref)
    assert [] == synced


# -- the disk is full -------------------------------------------------------------------------

_FILL_TMPFS = """
import os, subprocess, sys
target = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", target], check=True)
from liteagent.eventlog import file_checkpointer
from liteagent.eventlog.errors import StorageIOError
from liteagent.eventlog.conformance import prompts
with file_checkpointer(target) as cp:
    big = "x" * 50_000
    for op in ("append", "blob"):
        try:
            for i in range(100):
                if op == "append":
                    cp.append("s", prompts(big + str(i)))
                else:
                    cp.blobs.put((big + str(i)).encode())
        except StorageIOError as e:
            print(op, e.errno)
        else:
            print(op, "no error")
"""


@pytest.mark.processes
def test_disk_full_is_a_storage_io_error_with_enospc(tmp_path: Path) -> None:
    """On a full disk (a 256 KiB tmpfs, in a private mount namespace) append and blob put raise
    StorageIOError with errno ENOSPC."""
    import errno
    import subprocess
    import sys

    target = tmp_path / "small"
    target.mkdir()
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    probe = subprocess.run(
        [unshare, "-m", sys.executable, "-c", ""], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip("cannot make a private mount namespace here")
    result = subprocess.run(
        [unshare, "-m", sys.executable, "-c", _FILL_TMPFS, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == result.returncode, result.stderr
    assert [f"append {errno.ENOSPC}", f"blob {errno.ENOSPC}"] == result.stdout.split("\n")[:2]


@pytest.mark.parametrize(
    "call",
    [
        lambda cp: cp.append(SID, prompts("a")),
        lambda cp: list(cp.read(SID)),
        lambda cp: cp.position(SID),
        lambda cp: cp.truncate(SID, 0),
        lambda cp: cp.delete(SID),
        lambda cp: cp.repair(SID),
    ],
    ids=["append", "read", "position", "truncate", "delete", "repair"],
)
def test_a_folder_in_place_of_a_log_is_a_storage_io_error(
    tmp_path: Path, call: Callable[[FileCheckpointer], object]
) -> None:
    """Every operation on a session whose log path is a folder raises StorageIOError with
    errno EISDIR (never a bare OSError)."""
    import errno

    _log(tmp_path).mkdir(parents=True)
    with _open(tmp_path) as cp, pytest.raises(StorageIOError) as info:
        call(cp)
    assert errno.EISDIR == info.value.errno


def test_path_of_refuses_a_session_id_that_is_a_path(tmp_path: Path) -> None:
    """path_of validates the session id: it never names a file outside the root."""
    with _open(tmp_path) as cp:
        assert tmp_path / f"{SID}.log" == cp.path_of(SID)
        with pytest.raises(InvalidSessionIdError):
            cp.path_of("../outside")


def test_a_file_where_the_store_folder_goes_is_named(tmp_path: Path) -> None:
    """A file (or a link to one) where the store's folder goes: StorageIOError(ENOTDIR) that
    says so, not "File exists"; the file is left as it was."""
    (tmp_path / "store").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "store")
    for name in ("store", "link"):
        with pytest.raises(StorageIOError, match="it is not a folder") as info:
            file_checkpointer(tmp_path / name)
        assert errno.ENOTDIR == info.value.errno
    assert "mine" == (tmp_path / "store").read_text()


_WITHOUT_PRIVILEGES = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]
"""Run a command as root without the capabilities that let root ignore file modes (it stays
the owner of what the test made)."""

_AS_READER = """
import errno, json, sys
from liteagent.eventlog import file_checkpointer
from liteagent.eventlog.errors import StorageIOError
from liteagent.eventlog.conformance import prompts, texts
root = sys.argv[1]
with file_checkpointer(root=root) as cp:
    out = {"read": texts(cp.read("s")), "head": cp.head("s"), "list": [i.id for i in cp.list()]}
    try:
        cp.append("s", prompts("more"))
    except StorageIOError as e:
        out["append"] = [e.errno == errno.EACCES, "Permission denied" in str(e)]
    out["again"] = texts(cp.read("s", since_seq=1))
print(json.dumps(out))
"""


def test_a_log_this_user_may_only_read_is_read_and_a_write_refused(tmp_path: Path) -> None:
    """A session log of mode 0444 (another user's, or made read-only): reads work; an append
    is refused with EACCES, and the session still reads. (In a child process without the
    privileges that let root ignore file modes.)"""
    root = tmp_path / "store"
    with file_checkpointer(root=root) as cp:
        cp.append("s", prompts("a", "b"))
    (root / "s.log").chmod(0o444)
    command = [sys.executable, "-c", _AS_READER, str(root)]
    if os.geteuid() == 0:
        command = [*_WITHOUT_PRIVILEGES, *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert 0 == done.returncode, done.stderr
    assert {
        "read": ["a", "b"],
        "head": 2,
        "list": ["s"],
        "append": [True, True],
        "again": ["b"],
    } == json.loads(done.stdout)


@pytest.mark.processes
def test_a_forked_child_keeps_no_copy_of_a_lease_file(tmp_path: Path) -> None:
    """A child forked while threads of its parent take and release leases (and one is held)
    has no descriptor of any lease file open once it runs: a copy would keep the parent's
    flock alive after the parent died, for as long as the child lives."""
    stop = threading.Event()
    with file_checkpointer(root=tmp_path / "store") as cp:
        held = cp.acquire_lease("held")

        def churn(n: int) -> None:
            while not stop.is_set():
                with contextlib.suppress(SessionLeasedError):
                    cp.acquire_lease(f"s{n}").release()

        threads = [threading.Thread(target=churn, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        try:
            for _ in range(20):
                read, write = os.pipe()
                pid = os.fork()
                if pid == 0:  # pragma: no cover -- in the child
                    os.close(read)
                    names = []
                    for fd in os.listdir("/proc/self/fd"):
                        with contextlib.suppress(OSError):
                            names.append(os.readlink(f"/proc/self/fd/{fd}"))
                    leases = [n for n in names if n.endswith(".lease")]
                    os.write(write, json.dumps(leases).encode())
                    os._exit(0)
                os.close(write)
                with os.fdopen(read, "rb") as f:
                    found = json.loads(f.read() or b"null")
                os.waitpid(pid, 0)
                assert [] == found
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        held.release()


def test_a_read_after_what_was_read_starts_where_that_read_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read after the seq an earlier read of the same log reached starts at the end of that
    read's last frame: a live tail of a long log walked every frame header from the start
    for each new event (0.3 s an event at 300,000 events). A truncate or a delete (a new file,
    a new generation) is read from the start again, and gives what is there."""
    from liteagent.eventlog import _filescan

    starts: list[int] = []
    scanner = _filescan.FrameScanner

    def recorded(fd: int, offset: int, end: int, **kw: Any) -> Any:
        starts.append(offset)
        return scanner(fd, offset, end, **kw)

    monkeypatch.setattr(_filescan, "FrameScanner", recorded)
    with file_checkpointer(tmp_path / "s") as cp, file_checkpointer(tmp_path / "s") as reader:
        cp.append("a", prompts(*(f"p{i}" for i in range(50))))
        assert 50 == len(list(reader.read("a")))
        for i in range(50, 60):
            cp.append("a", prompts(f"p{i}"))
            starts.clear()
            assert [f"p{i}"] == texts(reader.read("a", i))
            assert starts
            assert min(starts) > FILE_HEADER_SIZE
        cp.truncate("a", 5)
        cp.append("a", prompts("after"))
        assert ["after"] == texts(reader.read("a", 5))
        assert ["p0", "p1", "p2", "p3", "p4", "after"] == texts(reader.read("a"))
        cp.delete("a")
        cp.append("a", prompts("new"))
        assert ["new"] == texts(reader.read("a", 0))
        assert [] == texts(reader.read("a", 1))
