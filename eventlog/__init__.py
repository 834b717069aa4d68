"""liteagent.eventlog — the source of truth: the Checkpointer contract and its backends, the
blob store, the fold and the interchange format.

This package imports nothing else of liteagent. Its value types (messages, model calls, the
persisted events) are in :mod:`liteagent.eventlog.types`, its errors in
:mod:`liteagent.eventlog.errors`. The conformance suite for backends lives in
:mod:`liteagent.eventlog.conformance` (it needs the ``test`` extra: pytest and hypothesis), and
what a backend of your own needs beyond this package in :mod:`liteagent.eventlog.backend`.
"""

from . import errors, types
from ._blobs import BlobInfo, BlobStore
from ._cancel import CancelToken
from ._codec import Codec, zlib_codec
from ._contract import (
    Checkpointer,
    IntegrityProblem,
    IntegrityReport,
    Lease,
    LeaseInfo,
    Position,
    RepairReport,
    SessionInfo,
)
from ._events import StoredEvent
from ._file import file_checkpointer
from ._fold import SessionState, apply, conversation, fold
from ._follow import Follower
from ._gc import GarbageReport, collect_garbage
from ._ids import validate_session_id
from ._interchange import messages_from_dicts, messages_to_dicts
from ._memory import memory_checkpointer
from ._paths import project_dir
from ._postgres_api import postgres_checkpointer
from ._sqlite import sqlite_checkpointer

__all__ = [
    "BlobInfo",
    "BlobStore",
    "CancelToken",
    "Checkpointer",
    "Codec",
    "Follower",
    "GarbageReport",
    "IntegrityProblem",
    "IntegrityReport",
    "Lease",
    "LeaseInfo",
    "Position",
    "RepairReport",
    "SessionInfo",
    "SessionState",
    "StoredEvent",
    "apply",
    "collect_garbage",
    "conversation",
    "file_checkpointer",
    "fold",
    "memory_checkpointer",
    "messages_from_dicts",
    "messages_to_dicts",
    "postgres_checkpointer",
    "project_dir",
    "sqlite_checkpointer",
    "validate_session_id",
    "zlib_codec",
]

_MOVED = dict.fromkeys(errors.__all__, errors) | dict.fromkeys(types.__all__, types)


def __getattr__(name: str) -> object:
    """Resolve the spelling of before the value types and errors had their own namespaces
    (``liteagent.eventlog.UserPrompt`` for :class:`liteagent.eventlog.types.UserPrompt`), so
    code written against it keeps running. These names are not this package's API: they are
    not in ``__all__`` or the reference, and a type checker sees them as ``object``."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(home, name)
