"""The blob store of the PostgreSQL checkpointer: blobs live in its schema (table ``blobs``),
stored through its codec; the reference is always the SHA-256 of the plain content."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ._blobref import check_blob_refs, check_written_before, is_blob_ref
from ._blobs import BlobInfo, BlobStore, blob_ref, check_blob_data, parse_blob_ref, verify_blob
from ._codec import codec_decode, codec_encode
from ._errors import BlobNotFoundError
from ._postgres_schema import q

if TYPE_CHECKING:
    from ._postgres import PostgresCheckpointer
    from ._postgres_db import Conn

__all__ = ["PostgresBlobStore"]

_CHUNK = 100  # refs per DELETE statement (each its own transaction, short locks)


class PostgresBlobStore(BlobStore):
    """Blobs inside the checkpointer's schema, so they live (and are backed up) with the log."""

    def __init__(self, owner: PostgresCheckpointer) -> None:
        self._owner = owner
        # a put of stored content refreshes its write time (what garbage collection compares)
        self._put = q(
            "INSERT INTO {s}.blobs (ref, data, written) VALUES (%s, %b, %s) ON CONFLICT (ref) "
            "DO UPDATE SET written = GREATEST({s}.blobs.written, EXCLUDED.written)",
            owner.schema,
        )
        self._touch = q(
            "UPDATE {s}.blobs SET written = GREATEST(written, %s) WHERE ref = ANY(%s) "
            "RETURNING ref",
            owner.schema,
        )
        self._list = q("SELECT ref, written, length(data) FROM {s}.blobs", owner.schema)
        self._delete = q(
            "DELETE FROM {s}.blobs WHERE ref = ANY(%s) AND written < %s RETURNING ref",
            owner.schema,
        )
        self._get = q("SELECT data FROM {s}.blobs WHERE ref = %s", owner.schema)
        self._has = q("SELECT 1 FROM {s}.blobs WHERE ref = %s", owner.schema)

    def put(self, data: bytes) -> str:
        data = check_blob_data(data)
        ref = blob_ref(data)
        self._owner._check_open()
        codec = self._owner.codec
        stored = data if codec is None else codec_encode(codec, data, f"blob {ref}")
        now = time.time()
        self._owner._db.run(
            lambda conn, _: conn.execute(self._put, (ref, stored, now)), "put a blob"
        )
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

    # -- garbage collection (each statement is atomic: a racing put either comes first and
    # keeps the blob, or comes after and stores it again) -------------------------------------

    def touch(self, refs: Iterable[str]) -> list[str]:
        wanted = check_blob_refs(refs)
        if not wanted:
            return []
        self._owner._check_open()
        now = time.time()

        def op(conn: Conn, _attempt: int) -> set[str]:
            return {str(r[0]) for r in conn.execute(self._touch, (now, wanted)).fetchall()}

        stored = self._owner._db.run(op, "touch blobs")
        return [ref for ref in wanted if ref not in stored]

    def list_blobs(self) -> Iterator[BlobInfo]:
        self._owner._check_open()

        def op(conn: Conn, _attempt: int) -> list[BlobInfo]:
            rows = conn.execute(self._list).fetchall()
            return [BlobInfo(str(r[0]), float(r[1]), int(r[2])) for r in rows if is_blob_ref(r[0])]

        return iter(self._owner._db.run(op, "list blobs"))

    def delete_blobs(self, refs: Iterable[str], *, written_before: float) -> list[str]:
        written_before = check_written_before(written_before)
        wanted = check_blob_refs(refs)
        self._owner._check_open()
        deleted: list[str] = []
        for i in range(0, len(wanted), _CHUNK):
            chunk = wanted[i : i + _CHUNK]

            def op(conn: Conn, _attempt: int, chunk: list[str] = chunk) -> list[str]:
                rows = conn.execute(self._delete, (chunk, written_before)).fetchall()
                return [str(r[0]) for r in rows]

            deleted.extend(self._owner._db.run(op, "delete blobs"))
        return deleted
