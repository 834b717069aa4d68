"""Content-addressed blob stores (file snapshots, archived tool results).

A blob's reference is ``sha256:<hex>`` of its plain content, so equal content is stored once and a
reference is stable across processes and machines. Every store verifies the hash on ``get``.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import os
import re
import secrets
import threading
from pathlib import Path

from ._codec import Codec
from ._errors import (
    BlobNotFoundError,
    CodecError,
    CorruptBlobError,
    InvalidArgumentError,
    InvalidBlobRefError,
    StorageIOError,
)
from ._fsutil import fsync_dir, write_all

__all__ = [
    "BLOB_REF_PATTERN",
    "BlobStore",
    "FileBlobStore",
    "MemoryBlobStore",
    "blob_ref",
    "check_blob_data",
    "parse_blob_ref",
    "verify_blob",
]

BLOB_REF_PATTERN = r"sha256:[0-9a-f]{64}"
_REF = re.compile(BLOB_REF_PATTERN)


def blob_ref(data: bytes) -> str:
    """Return the reference a blob store gives ``data``: ``sha256:`` + the hex digest."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def parse_blob_ref(ref: object) -> str:
    """Return the hex digest of ``ref``; raise :class:`InvalidBlobRefError` if malformed."""
    if type(ref) is not str or _REF.fullmatch(ref) is None:
        raise InvalidBlobRefError(f"not a blob reference (sha256:<64 hex digits>): {ref!r}")
    return ref[7:]


def check_blob_data(data: object) -> bytes:
    """Return ``data`` as ``bytes``; raise :class:`InvalidArgumentError` unless it is bytes-like
    (what every ``BlobStore.put`` accepts)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"blob data must be bytes, got {type(data).__name__}")
    return bytes(data)


class BlobStore(abc.ABC):
    """Content-addressed storage: ``put(data) -> ref``, ``get(ref) -> data``, ``has(ref)``.

    ``put`` is idempotent and returns only once the blob is durable in the store's own sense (the
    file store fsyncs; the SQLite store commits with its checkpointer's synchronous level).
    ``get`` raises :class:`BlobNotFoundError` for an unknown ref and :class:`CorruptBlobError`
    when the stored bytes no longer hash to the ref.
    """

    @abc.abstractmethod
    def put(self, data: bytes) -> str:
        """Store ``data`` and return its reference."""

    @abc.abstractmethod
    def get(self, ref: str) -> bytes:
        """Return the content of ``ref``."""

    @abc.abstractmethod
    def has(self, ref: str) -> bool:
        """Return whether ``ref`` is stored (a malformed ref raises InvalidBlobRefError)."""


def verify_blob(ref: str, data: bytes) -> bytes:
    """Return ``data`` if it hashes to ``ref``, else raise :class:`CorruptBlobError`."""
    if blob_ref(data) != ref:
        raise CorruptBlobError(f"blob {ref} is damaged: its content no longer matches its hash")
    return data


class MemoryBlobStore(BlobStore):
    """A process-local blob store (used by ``memory_checkpointer``)."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes) -> str:
        data = check_blob_data(data)
        ref = blob_ref(data)
        with self._lock:
            self._data.setdefault(ref, data)
        return ref

    def get(self, ref: str) -> bytes:
        parse_blob_ref(ref)
        with self._lock:
            data = self._data.get(ref)
        if data is None:
            raise BlobNotFoundError(f"no blob {ref}")
        return data

    def has(self, ref: str) -> bool:
        parse_blob_ref(ref)
        with self._lock:
            return ref in self._data


class FileBlobStore(BlobStore):
    """Blobs as files ``<root>/<2 hex>/<62 hex>``, written to a temp file and renamed into place,
    so a reader never sees part of a blob. The codec applies to the bytes on disk; the hash is
    always of the plain content.

    ``durability`` is the file checkpointer's: a blob is put before the event that names it is
    appended, so it gets the same guarantee as that event. ``"normal"`` survives a process
    crash (the rename of a whole temp file; no fsync). ``"full"`` also survives power loss: the
    blob's data, its folder, and the parent of every folder the put created (``blobs/`` and
    ``blobs/xx/``) are fsynced before the reference is returned.
    """

    def __init__(self, root: Path, codec: Codec | None = None, *, durability: str = "full") -> None:
        if durability not in ("normal", "full"):
            raise InvalidArgumentError(f"durability must be 'normal' or 'full', got {durability!r}")
        self._root = Path(root)
        self._codec = codec
        self._full = durability == "full"

    @property
    def root(self) -> Path:
        """The folder holding the blobs."""
        return self._root

    @property
    def durability(self) -> str:
        """``"full"`` (fsynced, survives power loss) or ``"normal"`` (survives a crash)."""
        return "full" if self._full else "normal"

    def _path(self, hexdigest: str) -> Path:
        return self._root / hexdigest[:2] / hexdigest[2:]

    def put(self, data: bytes) -> str:
        data = check_blob_data(data)
        ref = blob_ref(data)
        path = self._path(ref[7:])
        try:
            if path.exists():
                return ref
        except OSError as e:
            raise StorageIOError(e.errno, f"cannot store blob {ref}: {e.strerror}") from e
        stored = data if self._codec is None else self._codec_encode(data, ref)
        tmp = path.parent / f".tmp-{secrets.token_hex(8)}"
        try:
            self._make_folders(path.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                write_all(fd, stored)
                if self._full:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            if self._full:
                fsync_dir(path.parent)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StorageIOError(e.errno, f"cannot store blob {ref}: {e.strerror}") from e
        return ref

    def _make_folders(self, folder: Path) -> None:
        """Create ``folder`` and its missing parents; under ``full`` fsync the parent of each
        folder created, so the new entry survives power loss."""
        missing = []
        while not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        for f in reversed(missing):
            try:
                f.mkdir()
            except FileExistsError:
                continue
            if self._full:
                fsync_dir(f.parent)

    def _codec_encode(self, data: bytes, ref: str) -> bytes:
        assert self._codec is not None
        try:
            return self._codec.encode(data)
        except Exception as e:
            raise CodecError(f"the storage codec could not encode blob {ref}: {e}") from e

    def get(self, ref: str) -> bytes:
        path = self._path(parse_blob_ref(ref))
        try:
            stored = path.read_bytes()
        except FileNotFoundError as e:
            raise BlobNotFoundError(f"no blob {ref}") from e
        except OSError as e:
            raise StorageIOError(e.errno, f"cannot read blob {ref}: {e.strerror}") from e
        if self._codec is not None:
            try:
                stored = self._codec.decode(stored)
            except Exception as e:
                raise CodecError(f"the storage codec could not decode blob {ref}: {e}") from e
        return verify_blob(ref, stored)

    def has(self, ref: str) -> bool:
        path = self._path(parse_blob_ref(ref))
        try:
            return path.exists()
        except OSError as e:
            raise StorageIOError(e.errno, f"cannot look up blob {ref}: {e.strerror}") from e
