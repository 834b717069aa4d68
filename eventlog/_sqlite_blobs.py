"""The blob store of the SQLite checkpointer: blobs live in its database (table ``blobs``).

Write times (for garbage collection) are in a table of their own, ``blob_times``, created by
the first blob operation (a store none has touched has no such table). A put writes the blob
and its time in one transaction; a blob without a time row (none is stored without one, so
only a hand-edited store has it) counts as written at time 0, so garbage collection deletes it
when nothing references it. Every change is one write transaction of the checkpointer's
writer, so a conditional delete and a ``put`` racing it are serialized by SQLite's write lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import apsw

from ._blobref import check_blob_refs, check_written_before, is_blob_ref
from ._blobs import BlobInfo, BlobStore, blob_ref, parse_blob_ref, verify_blob
from ._codec import Codec, codec_decode, codec_encode
from ._errors import BlobNotFoundError, CorruptBlobError, InvalidArgumentError
from ._sqlite_batch import Batch
from ._sqlite_db import translate

if TYPE_CHECKING:
    from ._sqlite import SqliteCheckpointer

__all__ = ["SqliteBlobStore"]

_TIMES = (
    "CREATE TABLE IF NOT EXISTS blob_times(ref TEXT PRIMARY KEY, written REAL NOT NULL) "
    "WITHOUT ROWID"
)
_STAMP = (
    "INSERT INTO blob_times(ref, written) VALUES (?, ?) "
    "ON CONFLICT(ref) DO UPDATE SET written = excluded.written"
)
_CHUNK = 100  # deletes per transaction: a long collection never holds the write lock long


class SqliteBlobStore(BlobStore):
    """Blobs inside the checkpointer's database (table ``blobs``), so they live with the log."""

    def __init__(self, owner: SqliteCheckpointer, codec: Codec | None = None) -> None:
        self._owner = owner
        self._codec = codec
        self._times_ready = False

    def _times(self, conn: apsw.Connection) -> None:
        if not self._times_ready:
            conn.execute(_TIMES)

    def _write(self, op: Any) -> Any:
        result = self._owner._submit(op, None)
        self._times_ready = True
        return result

    def put(self, data: bytes) -> str:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"blob data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        ref = blob_ref(data)
        self._owner._check_open()
        stored = data if self._codec is None else codec_encode(self._codec, data, f"blob {ref}")

        def op(conn: apsw.Connection, _tx: Batch) -> None:
            self._times(conn)
            conn.execute("INSERT OR IGNORE INTO blobs(ref, data) VALUES (?, ?)", (ref, stored))
            conn.execute(_STAMP, (ref, time.time()))

        self._write(op)
        return ref

    def _fetch(self, ref: str) -> tuple[Any, Any] | None:
        parse_blob_ref(ref)
        self._owner._check_open()
        with self._owner._conn() as conn, translate():
            row = conn.execute(
                "SELECT CAST(data AS BLOB), typeof(data) FROM blobs WHERE ref = ?", (ref,)
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def get(self, ref: str) -> bytes:
        row = self._fetch(ref)
        if row is None:
            raise BlobNotFoundError(f"no blob {ref}")
        data, typ = row
        if typ != "blob" or type(data) is not bytes:
            raise CorruptBlobError(f"blob {ref} is damaged: it is stored as {typ}, not BLOB")
        if self._codec is not None:
            data = codec_decode(self._codec, data, f"blob {ref}")
        return verify_blob(ref, data)

    def has(self, ref: str) -> bool:
        return self._fetch(ref) is not None

    # -- garbage collection ---------------------------------------------------------------------

    def touch(self, refs: Iterable[str]) -> list[str]:
        wanted = check_blob_refs(refs)
        if not wanted:
            return []
        self._owner._check_open()

        def op(conn: apsw.Connection, _tx: Batch) -> list[str]:
            self._times(conn)
            now = time.time()
            missing = []
            for ref in wanted:
                if conn.execute("SELECT 1 FROM blobs WHERE ref = ?", (ref,)).fetchone() is None:
                    missing.append(ref)
                else:
                    conn.execute(_STAMP, (ref, now))
            return missing

        result: list[str] = self._write(op)
        return result

    def list_blobs(self) -> Iterator[BlobInfo]:
        self._owner._check_open()
        self._write(lambda conn, _tx: self._times(conn))
        with self._owner._conn() as conn, translate():
            rows = conn.execute(
                "SELECT b.ref, COALESCE(t.written, 0.0), length(b.data) FROM blobs b "
                "LEFT JOIN blob_times t ON t.ref = b.ref"
            ).fetchall()
        return iter(
            [BlobInfo(str(r[0]), _written(r[1]), int(r[2] or 0)) for r in rows if is_blob_ref(r[0])]
        )

    def delete_blobs(self, refs: Iterable[str], *, written_before: float) -> list[str]:
        written_before = check_written_before(written_before)
        wanted = check_blob_refs(refs)
        self._owner._check_open()
        deleted: list[str] = []
        for i in range(0, len(wanted), _CHUNK):
            chunk = wanted[i : i + _CHUNK]

            def op(conn: apsw.Connection, _tx: Batch, chunk: list[str] = chunk) -> list[str]:
                self._times(conn)
                gone = []
                for ref in chunk:
                    conn.execute(
                        "DELETE FROM blobs WHERE ref = ? AND "
                        "COALESCE((SELECT written FROM blob_times WHERE ref = ?), 0.0) < ?",
                        (ref, ref, written_before),
                    )
                    if conn.changes():
                        conn.execute("DELETE FROM blob_times WHERE ref = ?", (ref,))
                        gone.append(ref)
                return gone

            deleted.extend(self._write(op))
        return deleted


def _written(value: object) -> float:
    """A ``blob_times.written`` value as a time: a number as it is; a value that is no number
    (a damaged row) as now, so the blob is kept (the delete's SQL comparison keeps it too, a
    text or blob being greater than any number) until a ``put`` or ``touch`` writes a time."""
    if type(value) in (int, float):
        return float(value)  # type: ignore[arg-type]
    return time.time()
