"""The in-memory reference checkpointer: process-local, same contract and errors as the others.

Session leases live in a dict of this object: they exclude other acquires through this
checkpointer (there is no other process to exclude) and end with it.

Events are stored encoded, so callers can never mutate what was appended, and an event that
cannot be encoded fails here exactly as it would on disk.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ._blobs import BlobStore, MemoryBlobStore
from ._contract import (
    Checkpointer,
    EncodedEvent,
    IntegrityReport,
    Position,
    RepairReport,
    SessionInfo,
    check_position,
    decode_stored,
)
from ._errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    SessionLeasedError,
    TruncateRangeError,
)
from ._events import StoredEvent
from ._lease import Lease, LeaseInfo, next_token

__all__ = ["MemoryCheckpointer", "memory_checkpointer"]

# Generations are never reused within the process, across all memory checkpointers.
_GENERATIONS = itertools.count(1)
_GENERATIONS_LOCK = threading.Lock()


def _next_generation() -> int:
    with _GENERATIONS_LOCK:
        return next(_GENERATIONS)


@dataclass
class _Session:
    generation: int
    mtime: float
    events: list[tuple[float, str, bytes]] = field(default_factory=list)


class MemoryCheckpointer(Checkpointer):
    """See :func:`memory_checkpointer`."""

    def __init__(self) -> None:
        super().__init__()
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._blob_store = MemoryBlobStore()
        self._held: dict[str, Lease] = {}  # session id -> its live lease
        self._tokens: dict[str, int] = {}  # session id -> its last fencing token
        self._followers: dict[str, set[threading.Event]] = {}  # session id -> waiting followers

    def _changed(self, session_id: str) -> None:
        """Wake the followers of ``session_id``; call with ``_lock`` held."""
        for wake in self._followers.get(session_id, ()):
            wake.set()

    def _follow_wait(
        self, session_id: str, position: Position, wake: threading.Event, timeout: float
    ) -> None:
        with self._lock:
            s = self._sessions.get(session_id)
            now = Position(0, 0) if s is None else Position(len(s.events), s.generation)
            if now != position:
                return
            self._followers.setdefault(session_id, set()).add(wake)
        try:
            wake.wait(timeout)
        finally:
            with self._lock:
                waiting = self._followers.get(session_id)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self._followers[session_id]

    def _append(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        with self._lock:
            s = self._sessions.get(session_id)
            head, gen = (0, 0) if s is None else (len(s.events), s.generation)
            check_position(session_id, head, gen, expected_head, expected_generation)
            if not batch:
                return head
            if s is None:
                s = self._sessions[session_id] = _Session(_next_generation(), ts)
            s.events.extend((ts, e.kind, e.body) for e in batch)
            s.mtime = ts
            self._changed(session_id)
            return len(s.events)

    def _read(self, session_id: str, since_seq: int) -> Iterator[StoredEvent]:
        with self._lock:
            s = self._sessions.get(session_id)
            generation = 0 if s is None else s.generation
        seq = since_seq
        while True:
            with self._lock:
                if self._closed:
                    raise CheckpointerClosedError("MemoryCheckpointer is closed")
                current = self._sessions.get(session_id)
                if current is not s or (s is not None and s.generation != generation):
                    raise CheckpointConflictError(
                        session_id,
                        generation,
                        0 if current is None else current.generation,
                        "the history was replaced while it was being read",
                    )
                if s is None or seq >= len(s.events):
                    return
                ts, kind, body = s.events[seq]
            seq += 1
            yield decode_stored(session_id, seq, ts, kind, body)

    def _position(self, session_id: str) -> Position:
        with self._lock:
            s = self._sessions.get(session_id)
            return Position(0, 0) if s is None else Position(len(s.events), s.generation)

    def _list(self) -> list[SessionInfo]:
        with self._lock:
            return [SessionInfo(sid, s.mtime) for sid, s in self._sessions.items()]

    def _delete(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)
            self._changed(session_id)

    def _truncate(
        self,
        session_id: str,
        to_seq: int,
        expected_head: int | None,
        expected_generation: int | None,
    ) -> int:
        with self._lock:
            s = self._sessions.get(session_id)
            head, gen = (0, 0) if s is None else (len(s.events), s.generation)
            check_position(session_id, head, gen, expected_head, expected_generation)
            if not 0 <= to_seq <= head:
                raise TruncateRangeError(session_id, to_seq, head)
            if s is None:
                return 0
            del s.events[to_seq:]
            s.generation = _next_generation()
            s.mtime = time.time()
            self._changed(session_id)
            return to_seq

    def _check_integrity(self) -> IntegrityReport:
        with self._lock:
            n = len(self._sessions)
        return IntegrityReport(True, f"{n} sessions in memory; nothing to check on disk")

    def _repair(self, session_id: str) -> RepairReport:
        head, generation = self._position(session_id)
        return RepairReport(session_id, False, head, generation, detail="nothing to repair")

    def _acquire_lease(self, session_id: str, owner: str, ttl: float) -> Lease:  # noqa: ARG002
        with self._lock:
            held = self._held.get(session_id)
            if held is not None:
                raise SessionLeasedError(session_id, held.info)
            last = self._tokens.get(session_id)
            token = next_token(last)
            self._tokens[session_id] = token
            info = LeaseInfo(owner, os.getpid(), socket.gethostname(), token, None)
            lease = self._held[session_id] = Lease(self, session_id, info)
            return lease

    def _release_lease(self, lease: Lease) -> None:
        with self._lock:
            if self._held.get(lease.session_id) is lease:
                del self._held[lease.session_id]
            if lease.session_id not in self._sessions:  # never written, or deleted meanwhile
                self._tokens.pop(lease.session_id, None)

    def _drop_lease(self, session_id: str) -> None:
        with self._lock:
            if session_id not in self._held:
                self._tokens.pop(session_id, None)

    def _lease_records(self) -> list[str]:
        with self._lock:
            return list(self._tokens)

    def _lease_holder(self, session_id: str) -> LeaseInfo | None:
        with self._lock:
            held = self._held.get(session_id)
            return None if held is None else held.info

    def _blobs(self) -> BlobStore:
        return self._blob_store

    def _close(self) -> None:
        with self._lock:
            self._sessions.clear()
            for waiting in self._followers.values():
                for wake in waiting:
                    wake.set()


def memory_checkpointer() -> Checkpointer:
    """Return a process-local checkpointer: the reference implementation of the contract.

    It raises the same errors as the durable backends; its contents are lost when it is closed
    or the process ends.
    """
    return MemoryCheckpointer()
