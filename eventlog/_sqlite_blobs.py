"""The blob store of the SQLite checkpointer: blobs live in its database (table ``blobs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from ._blobs import BlobStore, blob_ref, parse_blob_ref, verify_blob
from ._codec import Codec, codec_decode, codec_encode
from ._errors import BlobNotFoundError, CorruptBlobError, InvalidArgumentError
from ._sqlite_batch import Batch
from ._sqlite_db import translate

if TYPE_CHECKING:
    from ._sqlite import SqliteCheckpointer

__all__ = ["SqliteBlobStore"]


class SqliteBlobStore(BlobStore):
    """Blobs inside the checkpointer's database (table ``blobs``), so they live with the log."""

    def __init__(self, owner: SqliteCheckpointer, codec: Codec | None = None) -> None:
        self._owner = owner
        self._codec = codec

    def put(self, data: bytes) -> str:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"blob data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        ref = blob_ref(data)
        self._owner._check_open()
        stored = data if self._codec is None else codec_encode(self._codec, data, f"blob {ref}")

        def op(conn: apsw.Connection, _tx: Batch) -> None:
            conn.execute("INSERT OR IGNORE INTO blobs(ref, data) VALUES (?, ?)", (ref, stored))

        self._owner._submit(op, None)
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
