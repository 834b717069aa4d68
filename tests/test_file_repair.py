"""repair() on the file backend, on real damaged files: the readable prefix is kept, the rest is
quarantined beside the log (never deleted), the generation changes, the lost seqs are named."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash

from liteagent.eventlog import Position, RepairReport, file_checkpointer
from liteagent.eventlog._frames import FILE_HEADER_SIZE, FRAME_HEAD_SIZE
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import CheckpointConflictError, CorruptLogError, SchemaVersionError

SID = "s1"


def _log(root: Path) -> Path:
    return root / f"{SID}.log"


def _three_batches(root: Path) -> list[int]:
    """Append batches of seqs 1-2, 3 and 4-6; return the file size after each."""
    sizes = []
    with file_checkpointer(root) as cp:
        for batch in (["a", "b"], ["c"], ["d", "e", "f"]):
            cp.append(SID, prompts(*batch))
            sizes.append(_log(root).stat().st_size)
    return sizes


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def _quarantined(root: Path) -> list[Path]:
    return sorted(root.glob(f"{SID}.log.quarantine-*"))


def _repair(root: Path) -> RepairReport:
    with file_checkpointer(root) as cp:
        return cp.repair(SID)


def test_repair_keeps_the_readable_prefix_and_quarantines_the_rest(tmp_path: Path) -> None:
    """A flipped byte in the second frame: seqs 1-2 are kept, seqs 3-6 are reported lost, and
    the bytes from the damaged frame on are in the quarantine file, unchanged."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[0] + FRAME_HEAD_SIZE + 2)
    damaged = _log(tmp_path).read_bytes()
    report = _repair(tmp_path)
    assert (True, 2, ((3, 6),)) == (report.repaired, report.kept_head, report.lost)
    [quarantine] = _quarantined(tmp_path)
    assert str(quarantine) == report.quarantine
    assert damaged[sizes[0] :] == quarantine.read_bytes()
    assert damaged[: sizes[0]][FILE_HEADER_SIZE:] == _log(tmp_path).read_bytes()[FILE_HEADER_SIZE:]


def test_a_repaired_session_reads_its_prefix_and_accepts_appends(tmp_path: Path) -> None:
    """After repair the session reads back the kept prefix under the reported generation,
    takes appends, and the store checks clean; the quarantine file is not a session."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[1] + FRAME_HEAD_SIZE + 2)
    with file_checkpointer(tmp_path) as cp:
        report = cp.repair(SID)
        assert Position(3, report.generation) == cp.position(SID)
        assert ["a", "b", "c"] == texts(cp.read(SID))
        assert 4 == cp.append(SID, prompts("g"), expected_head=3)
        assert [SID] == [i.id for i in cp.list()]
        assert cp.check_integrity().ok
    with file_checkpointer(tmp_path) as cp:
        assert ["a", "b", "c", "g"] == texts(cp.read(SID))


def test_repair_lifts_the_refusal_of_a_damaged_session(tmp_path: Path) -> None:
    """A session whose damage a read found refuses appends until repair(), then takes them."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[0] + FRAME_HEAD_SIZE + 2)
    with file_checkpointer(tmp_path) as cp:
        with pytest.raises(CorruptLogError):
            list(cp.read(SID))
        with pytest.raises(CorruptLogError):
            cp.append(SID, prompts("x"))
        cp.repair(SID)
        assert cp.damaged(SID) is None
        assert 3 == cp.append(SID, prompts("x"))


def test_a_repair_by_another_process_lifts_the_refusal_here(tmp_path: Path) -> None:
    """A long-running checkpointer that found damage takes writes again once another process
    (``lite-agent doctor --repair``, say) repaired the session: the repair's new generation
    tells it so. Without a repair it keeps refusing."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[0] + FRAME_HEAD_SIZE + 2)
    with file_checkpointer(tmp_path) as cp:
        with pytest.raises(CorruptLogError):
            list(cp.read(SID))
        assert cp.damaged(SID) is not None
        with pytest.raises(CorruptLogError, match="writes are refused"):
            cp.append(SID, prompts("x"))
        repair = (
            "import sys\nfrom liteagent.eventlog import file_checkpointer\n"
            "with file_checkpointer(sys.argv[1]) as cp:\n    print(cp.repair(sys.argv[2]).repaired)"
        )
        done = subprocess.run(
            [sys.executable, "-c", repair, str(tmp_path), SID],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "True" == done.stdout.strip()
        assert cp.damaged(SID) is None
        assert 3 == cp.append(SID, prompts("x"))
        assert ["a", "b", "x"] == texts(cp.read(SID))


def test_repair_changes_the_generation_so_stale_writers_conflict(tmp_path: Path) -> None:
    """A writer holding the position from before the repair conflicts instead of appending."""
    sizes = _three_batches(tmp_path)
    with file_checkpointer(tmp_path) as cp:
        before = cp.position(SID)
    os.truncate(_log(tmp_path), sizes[2] - 3)  # a torn tail: also repaired
    report = _repair(tmp_path)
    assert before.generation != report.generation
    with file_checkpointer(tmp_path) as cp, pytest.raises(CheckpointConflictError):
        cp.append(SID, prompts("x"), expected_head=3, expected_generation=before.generation)


def test_repair_of_a_torn_tail_names_the_seqs_of_the_unfinished_write(tmp_path: Path) -> None:
    """A last frame cut short: its intact frame header says it held seqs 4-6, which are
    reported lost; its bytes are quarantined."""
    sizes = _three_batches(tmp_path)
    os.truncate(_log(tmp_path), sizes[2] - 3)
    torn = _log(tmp_path).read_bytes()[sizes[1] :]
    report = _repair(tmp_path)
    assert (3, ((4, 6),)) == (report.kept_head, report.lost)
    assert [torn] == [p.read_bytes() for p in _quarantined(tmp_path)]


def test_repair_after_appended_garbage_cannot_tell_how_far_the_log_went(tmp_path: Path) -> None:
    """Bytes after the last frame that are no frame: everything is kept and the lost range is
    open-ended (None), since the garbage may have hidden later writes."""
    _three_batches(tmp_path)
    with _log(tmp_path).open("ab") as f:
        f.write(b"not a frame at all, just some garbage bytes")
    report = _repair(tmp_path)
    assert (True, 6, ((7, None),)) == (report.repaired, report.kept_head, report.lost)


def test_damaged_header_quarantines_the_whole_file(tmp_path: Path) -> None:
    """A damaged file header: the whole file is quarantined and the session restarts empty
    under a new generation; the intact frames behind the header name the lost seqs 1-6."""
    _three_batches(tmp_path)
    _flip(_log(tmp_path), 20)
    damaged = _log(tmp_path).read_bytes()
    with file_checkpointer(tmp_path) as cp:
        report = cp.repair(SID)
        assert (0, ((1, 6),)) == (report.kept_head, report.lost)
        assert Position(0, report.generation) == cp.position(SID)
        assert 0 != report.generation
        assert [] == texts(cp.read(SID))
        assert 1 == cp.append(SID, prompts("new"))
    assert [damaged] == [p.read_bytes() for p in _quarantined(tmp_path)]


def test_a_header_naming_a_format_none_wrote_is_repaired_as_damage(tmp_path: Path) -> None:
    """A checksummed header naming format 0: repair treats it as the damaged header reads say
    it is (quarantined whole, its seqs named), so the session is usable again afterwards."""
    _three_batches(tmp_path)
    data = bytearray(_log(tmp_path).read_bytes())
    struct.pack_into("<I", data, 8, 0)
    struct.pack_into("<Q", data, 24, xxhash.xxh3_64_intdigest(bytes(data[:24])))
    _log(tmp_path).write_bytes(bytes(data))
    with file_checkpointer(tmp_path) as cp:
        report = cp.repair(SID)
        assert (True, 0, ((1, 6),)) == (report.repaired, report.kept_head, report.lost)
        assert "format 0" in report.detail
        assert 1 == cp.append(SID, prompts("new"))
        assert cp.check_integrity().ok
    assert [bytes(data)] == [p.read_bytes() for p in _quarantined(tmp_path)]


def test_a_log_cut_below_its_header_is_quarantined(tmp_path: Path) -> None:
    """A file shorter than its header: quarantined whole, nothing known of its seqs."""
    _log(tmp_path).write_bytes(b"LALOG\0")
    report = _repair(tmp_path)
    assert (True, 0, ((1, None),)) == (report.repaired, report.kept_head, report.lost)
    assert [b"LALOG\0"] == [p.read_bytes() for p in _quarantined(tmp_path)]
    with file_checkpointer(tmp_path) as cp:
        assert cp.check_integrity().ok
        assert 1 == cp.append(SID, prompts("a"))


def test_healthy_and_unknown_sessions_are_left_as_they_are(tmp_path: Path) -> None:
    """Nothing to repair: repaired is false, the file and its generation are unchanged and no
    quarantine file is made."""
    _three_batches(tmp_path)
    before = _log(tmp_path).read_bytes()
    with file_checkpointer(tmp_path) as cp:
        position = cp.position(SID)
        report = cp.repair(SID)
        unknown = cp.repair("nobody")
    assert RepairReport(SID, False, 6, position.generation, detail="nothing to repair") == report
    assert (False, 0, 0) == (unknown.repaired, unknown.kept_head, unknown.generation)
    assert before == _log(tmp_path).read_bytes()
    assert [] == _quarantined(tmp_path)


def test_repair_never_touches_a_log_of_a_newer_format(tmp_path: Path) -> None:
    """A log written in a newer format is refused with SchemaVersionError and left as is."""
    _three_batches(tmp_path)
    data = bytearray(_log(tmp_path).read_bytes())
    struct.pack_into("<I", data, 8, 2)
    struct.pack_into("<Q", data, 24, xxhash.xxh3_64_intdigest(bytes(data[:24])))
    newer = bytes(data) + b"garbage"
    _log(tmp_path).write_bytes(newer)
    with file_checkpointer(tmp_path) as cp, pytest.raises(SchemaVersionError):
        cp.repair(SID)
    assert newer == _log(tmp_path).read_bytes()
    assert [] == _quarantined(tmp_path)


def test_quarantine_files_outlive_the_session(tmp_path: Path) -> None:
    """Deleting the session leaves its quarantine files; a second repair makes a second file."""
    sizes = _three_batches(tmp_path)
    _flip(_log(tmp_path), sizes[1] + 3)
    _repair(tmp_path)
    with _log(tmp_path).open("ab") as f:
        f.write(b"more garbage after the repair")
    _repair(tmp_path)
    with file_checkpointer(tmp_path) as cp:
        cp.delete(SID)
    assert 2 == len(_quarantined(tmp_path))
