"""The blob store of the PostgreSQL checkpointer: blobs live in its schema (table ``blobs``),
stored through its codec; the reference is always the SHA-256 of the plain content."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._blobs import BlobStore, blob_ref, check_blob_data, parse_blob_ref, verify_blob
from ._codec import codec_decode, codec_encode
from ._errors import BlobNotFoundError
from ._postgres_schema import q

if TYPE_CHECKING:
    from ._postgres import PostgresCheckpointer
    from ._postgres_db import Conn

__all__ = ["PostgresBlobStore"]


class PostgresBlobStore(BlobStore):
    """Blobs inside the checkpointer's schema, so they live (and are backed up) with the log."""

    def __init__(self, owner: PostgresCheckpointer) -> None:
        self._owner = owner
        self._put = q(
            "INSERT INTO {s}.blobs (ref, data) VALUES (%s, %b) ON CONFLICT DO NOTHING", owner.schema
        )
        self._get = q("SELECT data FROM {s}.blobs WHERE ref = %s", owner.schema)
        self._has = q("SELECT 1 FROM {s}.blobs WHERE ref = %s", owner.schema)

    def put(self, data: bytes) -> str:
        data = check_blob_data(data)
        ref = blob_ref(data)
        self._owner._check_open()
        codec = self._owner.codec
        stored = data if codec is None else codec_encode(codec, data, f"blob {ref}")
        self._owner._db.run(lambda conn, _: conn.execute(self._put, (ref, stored)), "put a blob")
        return ref

    def get(self, ref: str) -> bytes:
        parse_blob_ref(ref)
        self._owner._check_open()

        def fetch(conn: Conn, _attempt: int) -> bytes | None:
            row = conn.cursor(binary=True).execute(self._get, (ref,)).fetchone()
            return None if row is None else bytes(row[0])

        data = self._owner._db.run(fetch, "get a blob")
        if data is None:
            raise BlobNotFoundError(f"no blob {ref}")
        codec = self._owner.codec
        if codec is not None:
            data = codec_decode(codec, data, f"blob {ref}")
        return verify_blob(ref, data)

    def has(self, ref: str) -> bool:
        parse_blob_ref(ref)
        self._owner._check_open()
        return self._owner._db.run(
            lambda conn, _: conn.execute(self._has, (ref,)).fetchone() is not None, "look up a blob"
        )
