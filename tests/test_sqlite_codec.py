"""The SQLite checkpointer's storage codec: stored bytes are the codec's, reads decode them,
a wrong or failing codec is a CodecError and never a plaintext fallback."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from liteagent.eventlog import sqlite_checkpointer, zlib_codec
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import CodecError, CorruptBlobError, InvalidArgumentError


class _FailingCodec:
    def encode(self, data: bytes) -> bytes:
        raise RuntimeError("encryption key unavailable")

    def decode(self, data: bytes) -> bytes:
        return data


def _bodies(db: Path) -> list[bytes]:
    conn = apsw.Connection(str(db))
    try:
        return [bytes(r[0]) for r in conn.execute("SELECT body FROM events ORDER BY seq")]
    finally:
        conn.close()


def test_bodies_are_stored_through_the_codec(tmp_path: Path) -> None:
    """With zlib_codec the stored bodies are compressed and read back exactly."""
    text = "repetitive " * 2000
    with sqlite_checkpointer(tmp_path / "z.db", codec=zlib_codec()) as cp:
        cp.append("s", prompts(text))
        assert [text] == texts(cp.read("s"))
    with sqlite_checkpointer(tmp_path / "p.db") as cp:
        cp.append("s", prompts(text))
    assert len(_bodies(tmp_path / "z.db")[0]) * 10 < len(_bodies(tmp_path / "p.db")[0])


@pytest.mark.parametrize(("write", "read"), [(True, False), (False, True)])
def test_wrong_codec_on_read_is_a_codec_error(tmp_path: Path, write: bool, read: bool) -> None:
    """Reading with the wrong codec raises CodecError naming the session and seq; the
    integrity check reports it as a codec problem, not damage."""
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db, codec=zlib_codec() if write else None) as cp:
        cp.append("s", prompts("a", "b"))
    with sqlite_checkpointer(db, codec=zlib_codec() if read else None) as cp:
        with pytest.raises(CodecError) as info:
            list(cp.read("s"))
        report = cp.check_integrity()
    assert ("s", 1) == (info.value.session_id, info.value.seq)
    assert [("codec", "s")] == [(p.kind, p.session_id) for p in report.problems]


def test_failing_codec_writes_nothing(tmp_path: Path) -> None:
    """A codec whose encode raises gives CodecError and stores nothing."""
    with sqlite_checkpointer(tmp_path / "log.db", codec=_FailingCodec()) as cp:
        with pytest.raises(CodecError):
            cp.append("s", prompts("a"))
        assert 0 == cp.head("s")
        with pytest.raises(CodecError):
            cp.blobs.put(b"data")


def test_blobs_go_through_the_codec(tmp_path: Path) -> None:
    """Blobs are stored compressed; without the codec they do not pass as data."""
    data = b"file snapshot " * 500
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db, codec=zlib_codec()) as cp:
        ref = cp.blobs.put(data)
        assert data == cp.blobs.get(ref)
    conn = apsw.Connection(str(db))
    try:
        (stored,) = conn.execute("SELECT data FROM blobs").fetchone()
    finally:
        conn.close()
    assert len(stored) * 10 < len(data)
    with sqlite_checkpointer(db) as cp, pytest.raises(CorruptBlobError):
        cp.blobs.get(ref)


def test_codec_must_be_a_codec(tmp_path: Path) -> None:
    """A codec without encode/decode is refused."""
    with pytest.raises(InvalidArgumentError):
        sqlite_checkpointer(tmp_path / "log.db", codec="zlib")  # type: ignore[arg-type]
