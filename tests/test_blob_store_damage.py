"""Damage in a blob store never stops garbage collection or is reported as repaired when it
is not: a SQLite ``blob_times`` row that is no number, a folder named like a blob (and like a
blob a collection set aside)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import apsw
from _cli_runner import Cli

from liteagent.eventlog import collect_garbage, file_checkpointer, sqlite_checkpointer
from liteagent.eventlog.conformance import prompts


def test_a_sqlite_write_time_that_is_no_number_keeps_its_blob(tmp_path: Path) -> None:
    """A ``blob_times.written`` of ``'abc'`` or a blob value (a damaged row) made every
    collection raise ValueError. The blob is listed as written now, so it is kept, and a
    ``put`` of its content writes a time again, after which it is collected."""
    db = str(tmp_path / "s.db")
    with sqlite_checkpointer(db) as cp:
        cp.append("s", prompts("a"))
        texty, blobby = cp.blobs.put(b"one"), cp.blobs.put(b"two")
    conn = apsw.Connection(db)
    conn.execute("UPDATE blob_times SET written = 'abc' WHERE ref = ?", (texty,))
    conn.execute("UPDATE blob_times SET written = x'0102' WHERE ref = ?", (blobby,))
    conn.close()
    with sqlite_checkpointer(db) as cp:
        before = time.time()
        infos = {b.ref: b.written for b in cp.blobs.list_blobs()}
        assert all(w >= before for w in infos.values())
        report = collect_garbage(cp, grace=0)
        assert (0, {texty, blobby}) == (
            report.deleted,
            {b.ref for b in cp.blobs.list_blobs()},
        )
        cp.blobs.put(b"one")  # a time again
        cp.blobs.put(b"two")
        time.sleep(0.05)
        assert 2 == collect_garbage(cp, grace=0).deleted


def test_a_folder_named_like_a_blob_is_not_collected_and_stops_nothing(tmp_path: Path) -> None:
    """A folder at a blob's path (old, unreferenced) used to be renamed aside by every
    collection, which then failed with "Is a directory". It is not listed, not deleted, and
    the blobs around it are collected."""
    with file_checkpointer(tmp_path) as cp:
        cp.append("s", prompts("a"))
        garbage = cp.blobs.put(b"garbage")
    folder = tmp_path / "blobs" / "ab" / ("c" * 62)
    folder.mkdir(parents=True)
    (folder / "inside.txt").write_text("someone's\n")
    os.utime(folder, (1e9, 1e9))
    time.sleep(0.05)
    with file_checkpointer(tmp_path) as cp:
        assert [garbage] == [b.ref for b in cp.blobs.list_blobs()]
        assert 1 == collect_garbage(cp, grace=0).deleted
        assert [] == cp.blobs.delete_blobs(["sha256:ab" + "c" * 62], written_before=time.time())
    assert ["inside.txt"] == os.listdir(folder)


def test_doctor_counts_only_the_blobs_it_put_back(cli: Cli) -> None:
    """``doctor --repair`` used to report "put back 1 blobs set aside" for a folder named like
    a set-aside blob that it could not put back: such a folder is no set-aside blob, and
    nothing is reported for it."""
    cli.ok("run", "hi", "--session", "s1", provider=cli.script({"text": "ok"}))
    (project,) = (cli.home / "projects").iterdir()
    aside = project / "sessions" / "blobs" / "ab" / ("c" * 62 + ".gc")
    aside.mkdir(parents=True)
    result = cli("doctor", "--repair")
    assert 0 == result.code, result
    assert "put back" not in result.out
    assert aside.is_dir()
