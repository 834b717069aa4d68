"""Damage to a SQLite store's rows: every column is covered by a checksum or a check.

Each test edits the database behind the checkpointer's back with a plain apsw connection (a bit
flipped in a column, a row deleted, moved or retyped, a session record changed), then opens a
fresh checkpointer and checks that reads, ``position()``, appends and ``check_integrity()``
report the damage as :class:`CorruptLogError` (kind ``"corrupt"``) naming the seq, never as a
shorter or different history and never as a foreign exception; and that ``repair()`` keeps the
readable prefix, moves the rest to the ``quarantine`` table and reports what was lost.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from liteagent.eventlog import (
    Checkpointer,
    Position,
    StoredEvent,
    _sqlite_rows,
    sqlite_checkpointer,
)
from liteagent.eventlog._sqlite_rows import session_crc
from liteagent.eventlog.conformance import damage_sqlite, prompts, texts
from liteagent.eventlog.errors import CorruptLogError, LiteAgentError

# -- helpers ---------------------------------------------------------------------------------------

NAMES = [f"event-{i}" for i in range(1, 8)]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A closed store: session "s" holds 7 prompts (appended 3 + 4), "other" holds 3."""
    path = tmp_path / "log.db"
    with sqlite_checkpointer(path) as cp:
        cp.append("s", prompts(*NAMES[:3]), ts=1_700_000_001.5)
        cp.append("s", prompts(*NAMES[3:]), ts=1_700_000_002.5)
        cp.append("other", prompts("o1", "o2", "o3"), ts=1_700_000_003.5)
    return path


Reopen = Callable[[], Checkpointer]


@pytest.fixture
def reopen(db: Path) -> Iterator[Reopen]:
    """Opens a fresh checkpointer on the store (after the test's damage); closed at the end."""
    opened: list[Checkpointer] = []

    def open_store() -> Checkpointer:
        opened.append(sqlite_checkpointer(db))
        return opened[-1]

    yield open_store
    for c in opened:
        c.close()


def edit(db: Path, sql: str, *args: object) -> None:
    """Run one statement on the closed store with a plain connection."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute(sql, args)
    finally:
        conn.close()


def query(db: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(db))
    try:
        return list(conn.execute(sql, args))
    finally:
        conn.close()


def read_until_error(cp: Checkpointer, session_id: str) -> tuple[list[StoredEvent], Exception]:
    """The events ``read`` yields before it raises, and what it raised."""
    got: list[StoredEvent] = []
    with pytest.raises(Exception) as info:  # noqa: PT011 -- the caller checks the type
        got.extend(cp.read(session_id))
    return got, info.value


def assert_corrupt_at(cp: Checkpointer, seq: int) -> None:
    """Reading "s" yields seqs 1..seq-1 then raises CorruptLogError at ``seq``."""
    got, err = read_until_error(cp, "s")
    assert (CorruptLogError, "s", seq) == (type(err), err.session_id, err.seq)  # type: ignore[attr-defined]
    assert NAMES[: seq - 1] == texts(got)


def flip_text(value: str) -> str:
    """``value`` with one bit of its 3rd character flipped (still valid text)."""
    return value[:2] + chr(ord(value[2]) ^ 1) + value[3:]


# -- every column is covered -----------------------------------------------------------------------

FLIP_KIND = "UPDATE events SET kind = ? WHERE session_id = 's' AND seq = 4"


def test_flipped_bit_in_kind_is_corrupt(db: Path, reopen: Reopen) -> None:
    """A bit flipped in a row's kind: the read stops there with CorruptLogError (before, the
    event came back as an unknown kind and the prompt vanished from the conversation)."""
    edit(db, FLIP_KIND, flip_text("user_prompt"))
    cp = reopen()
    assert_corrupt_at(cp, 4)


def test_flipped_bit_in_kind_fails_check_integrity(db: Path, reopen: Reopen) -> None:
    """check_integrity reports a flipped kind as "corrupt" at its seq and is not ok."""
    edit(db, FLIP_KIND, flip_text("user_prompt"))
    cp = reopen()
    report = cp.check_integrity()
    assert (False, [("corrupt", "s", 4)]) == (
        report.ok,
        [(p.kind, p.session_id, p.seq) for p in report.problems],
    )


def test_flipped_bit_in_ts_is_corrupt(db: Path, reopen: Reopen) -> None:
    """A changed timestamp is CorruptLogError at its seq, not a silently different time."""
    edit(db, "UPDATE events SET ts = ts + 0.001 WHERE session_id = 's' AND seq = 2")
    cp = reopen()
    assert_corrupt_at(cp, 2)


def test_row_moved_to_another_session_is_corrupt(db: Path, reopen: Reopen) -> None:
    """A row copied (with its checksum) over the same seq of another session is corrupt there."""
    edit(db, "DELETE FROM events WHERE session_id = 's' AND seq = 3")
    edit(db, "UPDATE events SET session_id = 's' WHERE session_id = 'other' AND seq = 3")
    cp = reopen()
    assert_corrupt_at(cp, 3)


def test_rows_swapped_by_seq_are_corrupt(db: Path, reopen: Reopen) -> None:
    """Two rows whose seqs were swapped (checksums kept) are CorruptLogError at the first."""
    q = "UPDATE events SET seq = ? WHERE session_id = 's' AND seq = ?"
    edit(db, q, -1, 2)
    edit(db, q, 2, 5)
    edit(db, q, 5, -1)
    cp = reopen()
    assert_corrupt_at(cp, 2)


def test_deleted_last_row_is_corrupt_not_a_shorter_history(db: Path, reopen: Reopen) -> None:
    """With its last row deleted, a session reads 1..6 then raises CorruptLogError at 7."""
    edit(db, "DELETE FROM events WHERE session_id = 's' AND seq = 7")
    cp = reopen()
    assert_corrupt_at(cp, 7)


def test_deleted_last_row_makes_position_corrupt(db: Path, reopen: Reopen) -> None:
    """position() does not report a head that no read can reach."""
    edit(db, "DELETE FROM events WHERE session_id = 's' AND seq = 7")
    cp = reopen()
    with pytest.raises(CorruptLogError):
        cp.position("s")


def test_row_after_the_recorded_head_is_corrupt(db: Path, reopen: Reopen) -> None:
    """A session record whose head (with a valid checksum) is below its rows: the read raises
    at the first row after the head instead of returning rows the head does not own."""
    (gen,) = query(db, "SELECT generation FROM sessions WHERE id = 's'")[0]
    edit(db, "UPDATE sessions SET head = 5, crc = ? WHERE id = 's'", session_crc("s", 5, gen))
    cp = reopen()
    got, err = read_until_error(cp, "s")
    assert (CorruptLogError, 6) == (type(err), err.seq)  # type: ignore[attr-defined]
    assert NAMES[:5] == texts(got)


@pytest.mark.parametrize("column", ["head", "generation"])
def test_changed_session_record_is_corrupt(db: Path, reopen: Reopen, column: str) -> None:
    """A session record whose head or generation changed fails its checksum: reads, position
    and appends raise CorruptLogError, and nothing is appended."""
    edit(db, f"UPDATE sessions SET {column} = {column} + 1 WHERE id = 's'")  # noqa: S608
    cp = reopen()
    with pytest.raises(CorruptLogError):
        list(cp.read("s"))
    with pytest.raises(CorruptLogError):
        cp.position("s")
    with pytest.raises(CorruptLogError):
        cp.append("s", prompts("late"))
    assert [(7,)] == query(db, "SELECT count(*) FROM events WHERE session_id = 's'")


# -- wrong column types ----------------------------------------------------------------------------

RETYPES = {
    "body as text (not UTF-8)": "UPDATE events SET body = CAST(body AS TEXT)",
    "body as text (UTF-8)": "UPDATE events SET body = 'plain text'",
    "body as integer": "UPDATE events SET body = 7",
    "body as real": "UPDATE events SET body = 7.5",
    "kind as blob": "UPDATE events SET kind = CAST(kind AS BLOB)",
    "kind as text of a number": "UPDATE events SET kind = 42",
    "kind not UTF-8": "UPDATE events SET kind = CAST(x'ff75736572' AS TEXT)",
    "ts as text": "UPDATE events SET ts = 'x' || ts",
    "ts as blob": "UPDATE events SET ts = x'00'",
    "seq as real": "UPDATE events SET seq = seq + 0.5",
    "crc as text": "UPDATE events SET crc = 'crc' || crc",
    "crc as real": "UPDATE events SET crc = 0.5",
}


@pytest.mark.parametrize("sql", RETYPES.values(), ids=RETYPES.keys())
def test_wrong_column_type_is_corrupt_naming_the_seq(db: Path, reopen: Reopen, sql: str) -> None:
    """A column of row 3 stored with the wrong type is CorruptLogError at seq 3 (never a raw
    TypeError or UnicodeDecodeError), in a read and in check_integrity."""
    edit(db, sql + " WHERE session_id = 's' AND seq = 3")
    cp = reopen()
    assert_corrupt_at(cp, 3)
    report = cp.check_integrity()
    assert [("corrupt", "s", 3)] == [(p.kind, p.session_id, p.seq) for p in report.problems]


def test_session_id_not_utf8_is_reported_not_raised(db: Path, reopen: Reopen) -> None:
    """A session record whose id is not valid UTF-8: list() leaves it out, check_integrity
    reports it (and the session that lost its record) as corrupt; nothing raises."""
    edit(db, "UPDATE sessions SET id = CAST(x'73ff' AS TEXT) WHERE id = 's'")
    cp = reopen()
    assert ["other"] == [i.id for i in cp.list()]
    report = cp.check_integrity()
    assert False is report.ok
    assert {("corrupt", None), ("corrupt", "s")} == {
        (p.kind, p.session_id) for p in report.problems
    }


# -- appends never build on damage -----------------------------------------------------------------


def test_append_onto_an_unread_damaged_row_is_refused(db: Path, reopen: Reopen) -> None:
    """A fresh checkpointer's first append to a session with a damaged middle row is refused
    with CorruptLogError and writes nothing (before, it was acknowledged onto a log that no
    read could pass)."""
    edit(db, "UPDATE events SET body = CAST(body AS TEXT) WHERE session_id = 's' AND seq = 3")
    cp = reopen()
    with pytest.raises(CorruptLogError) as info:
        cp.append("s", prompts("late"))
    assert 3 == info.value.seq
    assert [(7,)] == query(db, "SELECT max(seq) FROM events WHERE session_id = 's'")


def test_append_after_deleted_tail_is_refused(db: Path, reopen: Reopen) -> None:
    """An append to a session whose last rows are gone is refused, not stored at a seq that a
    read can never reach."""
    edit(db, "DELETE FROM events WHERE session_id = 's' AND seq >= 6")
    cp = reopen()
    with pytest.raises(CorruptLogError):
        cp.append("s", prompts("late"), expected_head=7)
    assert [(5,)] == query(db, "SELECT max(seq) FROM events WHERE session_id = 's'")


def test_other_sessions_stay_writable(db: Path, reopen: Reopen) -> None:
    """Damage in one session leaves the others readable and writable."""
    edit(db, "UPDATE events SET ts = 1.0 WHERE session_id = 's' AND seq = 2")
    cp = reopen()
    with pytest.raises(CorruptLogError):
        list(cp.read("s"))
    assert 4 == cp.append("other", prompts("o4"))
    assert ["o1", "o2", "o3", "o4"] == texts(cp.read("other"))


# -- repair ----------------------------------------------------------------------------------------


def test_repair_keeps_the_prefix_and_quarantines_the_rest(db: Path, reopen: Reopen) -> None:
    """A damaged row 4 of 7: repair keeps 1..3, moves 4..7 to the quarantine table with their
    reasons, reports seqs 4..7 lost, bumps the generation, and the session takes appends."""
    edit(db, "UPDATE events SET kind = 'user_prompX' WHERE session_id = 's' AND seq = 4")
    before = query(
        db,
        "SELECT seq, ts, kind, body, crc FROM events WHERE session_id = 's' "
        "AND seq >= 4 ORDER BY seq",
    )
    cp = reopen()
    old_gen = cp.position("other").generation  # any generation issued before the repair
    report = cp.repair("s")
    assert (True, 3, ((4, 7),)) == (report.repaired, report.kept_head, report.lost)
    assert report.generation > old_gen
    assert Position(3, report.generation) == cp.position("s")
    assert NAMES[:3] == texts(cp.read("s"))
    moved = query(
        db,
        "SELECT seq, ts, kind, body, crc, reason, generation FROM quarantine "
        "WHERE session_id = 's' ORDER BY seq",
    )
    assert before == [m[:5] for m in moved]
    assert "checksum" in moved[0][5]
    assert {"stored after the first damaged seq 4"} == {m[5] for m in moved[1:]}
    assert {report.generation} == {m[6] for m in moved}
    assert 4 == cp.append("s", prompts("again"), expected_head=3)
    assert [*NAMES[:3], "again"] == texts(cp.read("s"))


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE events SET kind = 'user_prompX' WHERE session_id = 's' AND seq = 4",
        "DELETE FROM events WHERE session_id = 's' AND seq >= 6",  # the position meets it too
    ],
)
def test_a_repair_by_another_checkpointer_lifts_the_refusal_here(
    db: Path, reopen: Reopen, sql: str
) -> None:
    """A checkpointer that found damage takes writes again once another one (another process,
    ``lite-agent doctor --repair``) repaired the session; until then it refuses them."""
    edit(db, sql)
    cp, other = reopen(), reopen()
    with pytest.raises(CorruptLogError):
        list(cp.read("s"))
    with pytest.raises(CorruptLogError):
        cp.append("s", prompts("late"))
    assert cp.damaged("s") is not None
    report = other.repair("s")
    assert cp.damaged("s") is None
    assert report.kept_head + 1 == cp.append("s", prompts("late"))
    assert [*NAMES[: report.kept_head], "late"] == texts(cp.read("s"))


def test_repair_of_a_deleted_tail_reports_the_lost_seqs(db: Path, reopen: Reopen) -> None:
    """Rows 6 and 7 deleted: repair keeps 1..5 and reports 6..7 lost, with nothing to move."""
    edit(db, "DELETE FROM events WHERE session_id = 's' AND seq >= 6")
    cp = reopen()
    report = cp.repair("s")
    assert (True, 5, ((6, 7),), None) == (
        report.repaired,
        report.kept_head,
        report.lost,
        report.quarantine,
    )
    assert NAMES[:5] == texts(cp.read("s"))


def test_repair_of_a_damaged_record_cannot_know_the_end(db: Path, reopen: Reopen) -> None:
    """A damaged session record: repair keeps every verifying row and says the end is unknown."""
    edit(db, "UPDATE sessions SET head = 99 WHERE id = 's'")
    cp = reopen()
    report = cp.repair("s")
    assert (True, 7, ((8, None),)) == (report.repaired, report.kept_head, report.lost)
    assert Position(7, report.generation) == cp.position("s")
    assert NAMES == texts(cp.read("s"))


def test_repair_of_a_healthy_session_changes_nothing(db: Path, reopen: Reopen) -> None:
    """repair() of an intact session reports repaired false and keeps its position."""
    cp = reopen()
    pos = cp.position("s")
    report = cp.repair("s")
    assert (False, pos.head, pos.generation, ()) == (
        report.repaired,
        report.kept_head,
        report.generation,
        report.lost,
    )
    assert pos == cp.position("s")


def test_repair_is_seen_by_a_reopened_store(db: Path) -> None:
    """After a repair and a close, a new checkpointer reads the kept prefix and check_integrity
    finds nothing wrong with the session."""
    edit(db, "UPDATE events SET body = x'00' WHERE session_id = 's' AND seq = 6")
    with sqlite_checkpointer(db) as cp:
        cp.repair("s")
    with sqlite_checkpointer(db) as cp:
        assert NAMES[:5] == texts(cp.read("s"))
        assert True is cp.check_integrity().ok


# -- SQLite's own pages ----------------------------------------------------------------------------


def _zero_page_of(db: Path, table: str) -> None:
    """Overwrite the root page of ``table`` (here its only page) with zeros."""
    (root,) = query(db, "SELECT rootpage FROM sqlite_master WHERE name = ?", table)[0]
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    data[(root - 1) * size : root * size] = bytes(size)
    db.write_bytes(bytes(data))


def test_zeroed_events_page_is_corrupt_everywhere(db: Path, reopen: Reopen) -> None:
    """A zeroed page of the events table: read, position and append raise CorruptLogError,
    check_integrity reports kind "database"; no apsw exception escapes."""
    _zero_page_of(db, "events")
    cp = reopen()
    with pytest.raises(CorruptLogError):
        list(cp.read("s"))
    with pytest.raises(CorruptLogError):
        cp.append("other", prompts("late"))
    report = cp.check_integrity()
    assert False is report.ok
    assert "database" in {p.kind for p in report.problems}


def _zero_middle_page(db: Path) -> int:
    """Overwrite a page in the middle of the file (an events page here) with zeros; return
    its number."""
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    page = len(data) // size // 2
    data[(page - 1) * size : page * size] = bytes(size)
    db.write_bytes(bytes(data))
    return page


def _big_store(path: Path) -> dict[str, list[str]]:
    """Three sessions of 65 events of ~330 bytes, interleaved in batches of 5 (30 pages)."""
    written: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    with sqlite_checkpointer(path) as cp:
        for i in range(39):
            sid = "abc"[i % 3]
            batch = [f"{sid}{i}-{j}-" + "y" * 300 for j in range(5)]
            cp.append(sid, prompts(*batch))
            written[sid] += batch
    return written


def test_repair_salvages_a_table_with_a_zeroed_page(tmp_path: Path) -> None:
    """A zeroed page inside the events table: each session's repair keeps its readable prefix
    (the rows on other pages are copied into a new table, the damaged one is moved aside),
    reports what was lost, and afterwards every session reads back, takes appends, and
    check_integrity is ok (the table moved aside is reported as a leftover)."""
    db = tmp_path / "log.db"
    written = _big_store(db)
    _zero_middle_page(db)
    with sqlite_checkpointer(db) as cp:
        reports = {sid: cp.repair(sid) for sid in sorted(written)}
        for sid, report in reports.items():
            assert written[sid][: report.kept_head] == texts(cp.read(sid))
            if report.kept_head < len(written[sid]):
                assert (report.kept_head + 1, len(written[sid])) == report.lost[0]
            assert report.kept_head + 1 == cp.append(sid, prompts("after"))
        assert any(r.kept_head < len(written[s]) for s, r in reports.items())
        report = cp.check_integrity()
    # Only the rows of the zeroed page are gone: the others are kept or in quarantine.
    kept = sum(r.kept_head for r in reports.values())
    (quarantined,) = query(db, "SELECT count(*) FROM quarantine")[0]
    assert 195 - 12 <= kept + quarantined < 195
    assert True is report.ok
    assert ["leftover"] == [p.kind for p in report.problems]
    assert "events_damaged_1" in report.problems[0].detail
    tables = {r[0] for r in query(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"events", "events_damaged_1"} <= tables


@pytest.mark.parametrize("table", ["sessions", "meta"])
def test_repair_rebuilds_a_zeroed_bookkeeping_table(tmp_path: Path, table: str) -> None:
    """A zeroed sessions or meta page: repair rebuilds the table, every session reads back a
    prefix of its history and takes appends, and a new session can be created."""
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db) as cp:
        cp.append("s", prompts(*NAMES))
    _zero_page_of(db, table)
    with sqlite_checkpointer(db) as cp:
        report = cp.repair("s")
        assert NAMES[: report.kept_head] == texts(cp.read("s"))
        assert report.kept_head + 1 == cp.append("s", prompts("after"))
        assert 1 == cp.append("new", prompts("first"))


def test_first_append_to_a_long_unread_session_verifies_it(tmp_path: Path) -> None:
    """A session of 5,000 events (more than an append verifies inside its transaction) that
    this process never read: its first append checks every row first, so damage at row 4,000
    refuses it; an intact one is appended to."""
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db) as cp:
        cp.append("long", prompts(*[f"e{i}" for i in range(5000)]))
        cp.append("intact", prompts(*[f"e{i}" for i in range(5000)]))
    edit(db, "UPDATE events SET ts = 5.0 WHERE session_id = 'long' AND seq = 4000")
    with sqlite_checkpointer(db) as cp:
        with pytest.raises(CorruptLogError) as info:
            cp.append("long", prompts("late"))
        assert 4000 == info.value.seq
        assert 5001 == cp.append("intact", prompts("late"))
    assert [(5000,)] == query(db, "SELECT max(seq) FROM events WHERE session_id = 'long'")


def test_repair_rebuilds_an_index_that_misses_rows(tmp_path: Path) -> None:
    """The events index entry of row 7 says seq 9 (SQLite: "row 7 missing from index"):
    reads stop with CorruptLogError at seq 7; repair rebuilds the index from the table and
    loses nothing."""
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db) as cp:
        cp.append("zz", prompts(*NAMES))
    (root,) = query(
        db, "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_events_1'"
    )[0]
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    at = (root - 1) * size + data[(root - 1) * size : root * size].index(b"zz")
    assert 7 == data[at + 2]  # the cell last written: ("zz", seq 7, rowid 7)
    data[at + 2] = 9
    db.write_bytes(bytes(data))
    with sqlite_checkpointer(db) as cp:
        with pytest.raises(CorruptLogError) as info:
            list(cp.read("zz"))
        assert 7 == info.value.seq
        report = cp.repair("zz")
        assert (True, 7, ()) == (report.repaired, report.kept_head, report.lost)
        assert "indexes rebuilt" in report.detail
        assert NAMES == texts(cp.read("zz"))
        assert True is cp.check_integrity().ok


@pytest.mark.parametrize(
    ("old", "new"),
    [("ts REAL", "tx REAL"), ("seq INTEGER", "seq INTEGEX")],
    ids=["renamed column", "changed type"],
)
def test_damaged_schema_is_refused_on_open(db: Path, old: str, new: str) -> None:
    """A table definition changed in the schema (a column renamed, a type changed) makes the
    store refuse to open with CorruptLogError, not fail later with a raw SQL error."""
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = 'events'", (old, new)
    )
    conn.close()
    with pytest.raises(CorruptLogError, match="schema is damaged"):
        sqlite_checkpointer(db)


@pytest.mark.parametrize("seed", range(5))
def test_damage_sqlite_goes_on_damaging_a_store_it_already_broke(tmp_path: Path, seed: int) -> None:
    """The conformance helper applied again and again to one store (as a test of many damaged
    sessions does) keeps damaging it, also once earlier damage left a file SQLite cannot read
    (it raised SQLite's own CorruptError while folding the WAL, or found no database header);
    the checkpointer then refuses the file or reports its problems, with library errors."""
    rng = random.Random(seed)
    with sqlite_checkpointer(tmp_path / "log.db") as cp:
        for i in range(30):
            cp.append(f"s{i}", prompts(*(f"p{i}-{k}" for k in range(3))))
    for _ in range(40):
        assert damage_sqlite(tmp_path, f"s{rng.randrange(30)}", rng)
    try:
        cp = sqlite_checkpointer(tmp_path / "log.db")
    except LiteAgentError:
        return  # refused at open: not a database any more, say
    with cp:
        assert not cp.check_integrity().ok


def test_a_daemon_going_through_many_sessions_remembers_a_bounded_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a process remembers of each session's verified rows is bounded (a daemon goes
    through millions of sessions); a session it forgot is verified again on its next append,
    so damage another process made to its rows meanwhile is still refused, not written over."""
    monkeypatch.setattr(_sqlite_rows, "MAX_VERIFIED", 8)
    path = tmp_path / "log.db"
    with sqlite_checkpointer(path) as cp:
        for i in range(50):
            cp.append(f"s{i}", prompts("a", "b"))
        verified = cp._writer.verified  # type: ignore[attr-defined]
        assert len(verified.heads) <= 8
        assert len(verified.rows) <= 8
        assert "s0" not in verified.heads  # the first ones were forgotten
        edit(path, "UPDATE events SET ts = ts + 0.001 WHERE session_id = 's0' AND seq = 1")
        with pytest.raises(CorruptLogError):
            cp.append("s0", prompts("c"))
        for i in range(1, 50):
            assert 3 == cp.append(f"s{i}", prompts("c"), expected_head=2)
            assert ["a", "b", "c"] == texts(cp.read(f"s{i}"))
        assert len(verified.heads) <= 8
