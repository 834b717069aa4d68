"""Spill stores: where large tool results go when a budget pass moves them out of the view.

A spilled body leaves a short marker in the conversation that starts with :data:`SPILL_PREFIX`
and names the key it can be read back with; the full text stays retrievable.
"""

from __future__ import annotations

import abc
import hashlib
import threading

from liteagent.eventlog import BlobStore
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import BlobNotFoundError, CodecError, InvalidArgumentError

__all__ = [
    "SPILL_PREFIX",
    "SpillStore",
    "blob_spill_store",
    "memory_spill_store",
    "spill_marker",
]

SPILL_PREFIX = "[liteagent:spilled "


def spill_marker(key: str, text: str, preview_chars: int = 200) -> str:
    """The marker left in place of a spilled ``text``: prefix, key, size, then a preview."""
    preview = text[:preview_chars]
    more = "…" if len(text) > preview_chars else ""
    return f"{SPILL_PREFIX}{key} {len(text)} chars; read it with the context tool]\n{preview}{more}"


class SpillStore(abc.ABC):
    """Keeps spilled text by key; the same text always gets the same key."""

    @abc.abstractmethod
    def put(self, text: str) -> str:
        """Store ``text``; return its key."""

    @abc.abstractmethod
    def get(self, key: str) -> str:
        """The text stored under ``key``; raises
        :class:`~liteagent.eventlog.errors.BlobNotFoundError` (a ``KeyError``) if there is none."""


class _MemorySpillStore(SpillStore):
    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    def put(self, text: str) -> str:
        text = _text(text)
        key = "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        with self._lock:
            self._data.setdefault(key, text)
        return key

    def get(self, key: str) -> str:
        with self._lock:
            text = self._data.get(key) if isinstance(key, str) else None
        if text is None:
            raise BlobNotFoundError(f"no spilled text under {key!r}")
        return text


class _BlobSpillStore(SpillStore):
    def __init__(self, blobs: BlobStore) -> None:
        self._blobs = blobs

    def put(self, text: str) -> str:
        return self._blobs.put(_text(text).encode("utf-8", "surrogatepass"))

    def get(self, key: str) -> str:
        data = self._blobs.get(key)  # BlobNotFoundError (a KeyError) when absent
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as e:
            raise CodecError(f"the spilled content {key} is not UTF-8 text") from e


def memory_spill_store() -> SpillStore:
    """A process-local spill store."""
    return _MemorySpillStore()


def blob_spill_store(blobs: BlobStore) -> SpillStore:
    """A spill store over a checkpointer's blob store (durable, content-addressed)."""
    if not isinstance(blobs, BlobStore):
        raise InvalidArgumentError(f"blobs must be a BlobStore, got {shown(blobs)}")
    return _BlobSpillStore(blobs)


def _text(text: object) -> str:
    """``text`` as a plain str; :class:`InvalidArgumentError` when it is none."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"spilled text must be a str, got {type(text).__name__}")
    return str.__str__(text)
