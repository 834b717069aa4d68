"""Where restores keep what they take away: branch sessions, and the digest that tells whether
a session is still as an operation left it.

A branch is a session of its own in the same store, under a reserved id derived from its
origin's (``branch..<16 hex of the origin id's SHA-256>.<time><random>``): its first event is a
:class:`~._events.BranchCreated` header, the events after it are those the restore removed.
Any backend holds it through the ordinary contract, its events are read (and its blobs kept)
like any session's, and the branches of a session are found from ``list()`` by the prefix.
Nothing else may create sessions whose id starts with ``branch..``.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
import time
from collections.abc import Iterable

from ._contract import Checkpointer
from ._eventcodec import encode_body
from ._events import BranchCreated, StoredEvent

__all__ = [
    "BRANCH_PREFIX",
    "branch_header",
    "branch_prefix",
    "is_branch_session",
    "log_digest",
    "new_branch_id",
]

BRANCH_PREFIX = "branch.."
"""The id prefix of branch sessions (no other session id may start with it)."""


def branch_prefix(origin: str) -> str:
    """The id prefix of the branch sessions of ``origin``."""
    return f"{BRANCH_PREFIX}{hashlib.sha256(origin.encode()).hexdigest()[:16]}."


def new_branch_id(origin: str) -> str:
    """A fresh branch session id for ``origin`` (sortable by creation time)."""
    return f"{branch_prefix(origin)}{time.time_ns():016x}{secrets.token_hex(4)}"


def is_branch_session(session_id: str) -> bool:
    """Whether ``session_id`` names a branch session."""
    return session_id.startswith(BRANCH_PREFIX)


def branch_header(checkpointer: Checkpointer, branch_id: str) -> BranchCreated | None:
    """The header of branch session ``branch_id``; ``None`` when it does not exist (or its
    first event is not a header)."""
    for event in checkpointer.read(branch_id):
        return event.body if isinstance(event.body, BranchCreated) else None
    return None


def log_digest(events: Iterable[StoredEvent]) -> str:
    """The SHA-256 (hex) of a log's content: each event's seq, kind and body, not its time
    (events brought back or copied get the time of that write)."""
    h = hashlib.sha256()
    for e in events:
        kind, body = encode_body(e.body)
        h.update(struct.pack(">QI", e.seq, len(kind)))
        h.update(kind.encode())
        h.update(struct.pack(">Q", len(body)))
        h.update(body)
    return h.hexdigest()
