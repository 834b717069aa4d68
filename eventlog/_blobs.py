"""Content-addressed blob stores (file snapshots, archived tool results).

A blob's reference is ``sha256:<hex>`` of its plain content, so equal content is stored once and a
reference is stable across processes and machines. Every store verifies the hash on ``get``.

Garbage collection (``liteagent.eventlog.collect_garbage``) uses the hooks after the three
basic methods: each blob has a *write time*, which ``put`` (also of content already stored) and
``touch`` set to now, and ``delete_blobs`` removes a blob only if its write time is still older
than a cutoff, checked atomically with the removal. Writers put or touch every blob before the
append that references it, so a collection never removes a blob written (or re-referenced)
after it started looking, however the two interleave across processes.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ._blob_files import FileBlobCollection
from ._blobref import (
    BLOB_REF_PATTERN,
    BlobInfo,
    blob_ref,
    check_blob_data,
    check_blob_refs,
    check_written_before,
    parse_blob_ref,
    verify_blob,
)
from ._codec import Codec
from ._errors import (
    BlobCollectionUnsupportedError,
    BlobNotFoundError,
    CodecError,
    CorruptBlobError,
    InvalidArgumentError,
    StorageIOError,
)
from ._fsutil import fsync_dir, open_regular, write_all
from ._shown import shown

__all__ = [
    "BLOB_REF_PATTERN",
    "BlobInfo",
    "BlobStore",
    "FileBlobStore",
    "MemoryBlobStore",
    "blob_ref",
    "check_blob_data",
    "parse_blob_ref",
    "verify_blob",
]


class BlobStore(abc.ABC):
    """Content-addressed storage: ``put(data) -> ref``, ``get(ref) -> data``, ``has(ref)``.

    ``put`` is idempotent and returns only once the blob is durable in the store's own sense (the
    file store fsyncs; the SQLite store commits with its checkpointer's synchronous level).
    ``get`` raises :class:`BlobNotFoundError` for an unknown ref and :class:`CorruptBlobError`
    when the stored bytes no longer hash to the ref.

    The garbage-collection hooks (see the module docstring): ``touch``, ``list_blobs``,
    ``delete_blobs``, and for stores whose deletes are not one atomic step,
    ``remove_leftovers``, ``interrupted_deletes`` and ``restore_interrupted_deletes``. A store
    that does not implement ``list_blobs`` and ``delete_blobs`` works for everything else, but
    garbage cannot be collected from it (:class:`BlobCollectionUnsupportedError`).
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

    # -- garbage collection ---------------------------------------------------------------------

    def touch(self, refs: Iterable[str]) -> list[str]:
        """Set the write time of each stored ref of ``refs`` to now (as a ``put`` of its
        content would) and return those that are not stored. A writer touches the blobs an
        event will reference without putting them (a copy of events that name them) before it
        appends. The default only checks presence: right for a store that cannot collect."""
        return [ref for ref in check_blob_refs(refs) if not self.has(ref)]

    def list_blobs(self) -> Iterator[BlobInfo]:
        """Every stored blob, in any order, with its write time and size."""
        raise BlobCollectionUnsupportedError(f"{type(self).__name__} cannot list its blobs")

    def delete_blobs(self, refs: Iterable[str], *, written_before: float) -> list[str]:  # noqa: ARG002
        """Delete each blob of ``refs`` whose write time is still before ``written_before``,
        checked atomically with its removal (a ``put`` or ``touch`` racing the delete either
        comes first and keeps the blob, or comes after and stores it again); return the refs
        deleted. Unknown refs are skipped."""
        raise BlobCollectionUnsupportedError(f"{type(self).__name__} cannot delete blobs")

    def remove_leftovers(self, *, written_before: float) -> int:  # noqa: ARG002 -- a hook
        """Remove what interrupted writes left behind (temp files) older than
        ``written_before``; return how many. Default: there are none."""
        return 0

    def interrupted_deletes(self) -> list[str]:
        """The blobs a deletion killed half way set aside (neither kept nor removed). Reads of
        such a blob put it back by themselves. Default: a store whose deletes are atomic."""
        return []

    def restore_interrupted_deletes(self) -> int:
        """Put back every blob :meth:`interrupted_deletes` lists (a rollback of the killed
        deletion: the next collection decides again); return how many."""
        return 0


class MemoryBlobStore(BlobStore):
    """A process-local blob store (used by ``memory_checkpointer``)."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._written: dict[str, float] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes) -> str:
        data = check_blob_data(data)
        ref = blob_ref(data)
        with self._lock:
            self._data.setdefault(ref, data)
            self._written[ref] = time.time()
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

    def touch(self, refs: Iterable[str]) -> list[str]:
        wanted = check_blob_refs(refs)
        now = time.time()
        missing = []
        with self._lock:
            for ref in wanted:
                if ref in self._data:
                    self._written[ref] = now
                else:
                    missing.append(ref)
        return missing

    def list_blobs(self) -> Iterator[BlobInfo]:
        with self._lock:
            infos = [BlobInfo(r, self._written[r], len(d)) for r, d in self._data.items()]
        return iter(infos)

    def delete_blobs(self, refs: Iterable[str], *, written_before: float) -> list[str]:
        written_before = check_written_before(written_before)
        wanted = check_blob_refs(refs)
        deleted = []
        with self._lock:
            for ref in wanted:
                if ref in self._data and self._written[ref] < written_before:
                    del self._data[ref], self._written[ref]
                    deleted.append(ref)
        return deleted


def _read_regular(path: Path, ref: str) -> bytes:
    """The bytes of the blob file at ``path``; :class:`CorruptBlobError` when what is there is
    not a regular file (a FIFO would block the read forever, a folder cannot be read)."""
    try:
        fd = open_regular(path, os.O_RDONLY, follow=True)
    except OSError as e:
        # a FIFO, socket, device or symlink loop is damage; a folder (EISDIR) stays a read
        # error, as the caller reports any other OSError
        if e.errno in (errno.EINVAL, errno.ENXIO, errno.ELOOP):
            raise CorruptBlobError(f"blob {ref} is damaged: {e.strerror}") from e
        raise
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class FileBlobStore(FileBlobCollection, BlobStore):
    """Blobs as files ``<root>/<2 hex>/<62 hex>``, written to a temp file and renamed into place,
    so a reader never sees part of a blob. The codec applies to the bytes on disk; the hash is
    always of the plain content.

    ``durability`` is the file checkpointer's: a blob is put before the event that names it is
    appended, so it gets the same guarantee as that event. ``"normal"`` survives a process
    crash (the rename of a whole temp file; no fsync). ``"full"`` also survives power loss: the
    blob's data, its folder, and the parent of every folder the put created (``blobs/`` and
    ``blobs/xx/``) are fsynced before the reference is returned.

    A blob's write time is its file's mtime: a put of a blob already stored, and a touch, set it
    to now. A deletion renames the file to ``<name>.gc`` (atomically), checks the mtime of what
    it renamed, and unlinks it only if that is still before the cutoff (else it links it back):
    a put that refreshed the file first is seen; one that comes after the rename finds no file
    and stores it again. A read of a blob whose deletion was killed half way puts it back.
    """

    def __init__(self, root: Path, codec: Codec | None = None, *, durability: str = "full") -> None:
        if type(durability) is not str or durability not in ("normal", "full"):
            raise InvalidArgumentError(
                f"durability must be 'normal' or 'full', got {shown(durability)}"
            )
        self._root = Path(os.path.abspath(root))  # not moved by a later change of folder
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
        if self._refresh(path, ref):
            return ref
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
            try:
                stored = _read_regular(path, ref)
            except FileNotFoundError:
                if not self._put_back(path):
                    raise
                stored = _read_regular(path, ref)
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
            return path.exists() or self._put_back(path)
        except OSError as e:
            raise StorageIOError(e.errno, f"cannot look up blob {ref}: {e.strerror}") from e
