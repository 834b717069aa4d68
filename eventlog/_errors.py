"""The error tree of liteagent's storage layer.

Every error liteagent raises derives from :class:`LiteAgentError`; the tree of the storage
layer's errors is drawn in :mod:`liteagent.eventlog.errors`, their public home.

Foreign exceptions (apsw, OSError, msgspec, a codec's own errors) are translated at exactly one
boundary per backend, with ``raise ... from e``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._shown import shown

if TYPE_CHECKING:
    from ._lease import LeaseInfo

__all__ = [
    "BlobCollectionUnsupportedError",
    "BlobError",
    "BlobNotFoundError",
    "CheckpointConflictError",
    "CheckpointerClosedError",
    "CheckpointerError",
    "CodecError",
    "ContextLimitError",
    "CorruptBlobError",
    "CorruptLogError",
    "InvalidArgumentError",
    "InvalidBlobRefError",
    "InvalidEventError",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "LeaseLostError",
    "LiteAgentError",
    "NotADatabaseError",
    "OperationCancelledError",
    "SchemaVersionError",
    "SessionLeasedError",
    "StorageIOError",
    "TruncateRangeError",
]


class LiteAgentError(Exception):
    """Raised for every error liteagent itself reports; the root of the tree."""


class InvalidSessionIdError(LiteAgentError, ValueError):
    """Raised when a session id does not match ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``, or
    (with ``reason``) names what a session cannot be, such as a branch a restore keeps.

    It is raised before any I/O: a session id is never a path.
    """

    def __init__(self, session_id: object, reason: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(
            reason
            or f"invalid session id {shown(session_id)}: expected 1-128 characters from "
            "[A-Za-z0-9._-], starting with a letter or digit"
        )


class InvalidEventError(LiteAgentError, TypeError):
    """Raised when something that is not a liteagent event is handed to a checkpointer."""


class InvalidMessageError(LiteAgentError, ValueError):
    """Raised when a message (or message dict) is not in the expected shape; names where."""


class InvalidArgumentError(LiteAgentError, ValueError):
    """Raised when an argument is out of its documented range (e.g. a negative ``since_seq``)."""


class OperationCancelledError(LiteAgentError):
    """Raised when an operation stops because its :class:`CancelToken` was cancelled; nothing
    partial is returned."""


class ContextLimitError(LiteAgentError):
    """Raised when a request does not fit the model's context window; ``tokens`` is its size
    and ``maximum`` the window, as reported (``None`` when unknown). The provider layer raises
    it as ``liteagent.providers.ContextOverflowError``."""

    def __init__(
        self, message: str, *, tokens: int | None = None, maximum: int | None = None
    ) -> None:
        self.tokens = tokens
        self.maximum = maximum
        super().__init__(message)


class CodecError(LiteAgentError, ValueError):
    """Raised when encoding or decoding stored bytes fails.

    On write nothing is stored; on read ``session_id`` and ``seq`` name the first event that could
    not be decoded (a wrong storage codec, or bytes that are not a valid event).
    """

    def __init__(self, message: str, *, session_id: str | None = None, seq: int | None = None):
        self.session_id = session_id
        self.seq = seq
        where = ""
        if session_id is not None:
            where = f" (session {session_id!r}" + (f", seq {seq}" if seq is not None else "") + ")"
        super().__init__(message + where)


class CheckpointerError(LiteAgentError):
    """Raised for failures of a checkpointer; the root of the storage errors."""


class CheckpointConflictError(CheckpointerError):
    """Raised when a write's ``expected_head`` or ``expected_generation`` is not the session's.

    Also raised by a ``read`` whose history was replaced (truncated or deleted) while it iterated.
    ``expected`` and ``actual`` are heads, or ``(head, generation)`` positions when a generation
    was involved.
    """

    def __init__(self, session_id: str, expected: object, actual: object, reason: str = "") -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        msg = f"session {session_id!r}: expected {expected!r}, found {actual!r}"
        if reason:
            msg += f" ({reason})"
        super().__init__(msg)


class CheckpointerClosedError(CheckpointerError):
    """Raised when a closed checkpointer is used."""


class TruncateRangeError(CheckpointerError, ValueError):
    """Raised when ``truncate`` is asked for a ``to_seq`` below 0 or beyond the head."""

    def __init__(self, session_id: str, to_seq: int, head: int) -> None:
        self.session_id = session_id
        self.to_seq = to_seq
        self.head = head
        super().__init__(
            f"session {session_id!r}: cannot truncate to seq {to_seq}; valid range is 0..{head}"
        )


class SchemaVersionError(CheckpointerError):
    """Raised when a store's schema version is not the one this liteagent reads: written by a
    newer liteagent, or older (written by a development version before the first release: there
    is no migration from it). Nothing in the store is changed."""


class CorruptLogError(CheckpointerError):
    """Raised when stored data is damaged anywhere but a torn tail; never silently skipped.

    ``session_id`` and ``seq`` name the session and the first event that could not be read
    (``seq`` is ``None`` when the damage is not tied to one event, e.g. a file header).
    """

    def __init__(self, session_id: str | None, seq: int | None, detail: str) -> None:
        self.session_id = session_id
        self.seq = seq
        self.detail = detail
        where = "store" if session_id is None else f"session {session_id!r}"
        if seq is not None:
            where += f" at seq {seq}"
        super().__init__(f"corrupt log in {where}: {detail}")


class NotADatabaseError(CheckpointerError):
    """Raised when a file given as a SQLite checkpointer database is not a SQLite database."""


class SessionLeasedError(CheckpointerError):
    """Raised when a session's lease is held by another live holder (another process, or
    another acquire in this one: leases are not reentrant); nothing was written.

    ``holder`` is the current holder as far as the backend can tell (``None`` when unknown).
    """

    def __init__(self, session_id: str, holder: LeaseInfo | None) -> None:
        self.session_id = session_id
        self.holder = holder
        who = "another holder"
        if holder is not None:
            who = f"{holder.owner} (pid {holder.pid} on {holder.host}, token {holder.token})"
        super().__init__(f"session {session_id!r} is leased by {who}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.session_id, self.holder))


class LeaseLostError(SessionLeasedError):
    """Raised when a write made under a lease (``append(..., lease=...)``) finds that lease no
    longer held: released, or expired and taken by another holder; nothing was written."""

    def __init__(self, session_id: str, holder: LeaseInfo | None, why: str) -> None:
        super().__init__(session_id, holder)
        self.why = why
        self.args = (f"session {session_id!r}: the lease this write was made under {why}",)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.session_id, self.holder, self.why))


class StorageIOError(CheckpointerError, OSError):
    """Raised when the operating system refuses a storage operation (disk full, permissions).

    Its message is what failed and the system's reason (``cannot read session 's1':
    Permission denied``), without the ``[Errno 13]`` an ``OSError`` puts first; ``errno`` and
    ``strerror`` are set as on any ``OSError``."""

    def __str__(self) -> str:
        if not self.strerror:
            return super().__str__()
        return str(self.strerror if self.filename is None else f"{self.strerror}: {self.filename}")


class BlobError(LiteAgentError):
    """Raised for failures of a blob store; the root of the blob errors."""


class InvalidBlobRefError(BlobError, ValueError):
    """Raised when a string is not a blob reference of the form ``sha256:<64 hex digits>``."""


class BlobNotFoundError(BlobError, KeyError):
    """Raised when a blob reference is well formed but no such blob is stored."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "blob not found"


class CorruptBlobError(BlobError):
    """Raised when a stored blob no longer hashes to its reference, or cannot be decoded."""


class BlobCollectionUnsupportedError(BlobError):
    """Raised when a blob store cannot list or delete its blobs (a third-party store that does
    not implement the garbage-collection hooks), so garbage cannot be collected from it."""
