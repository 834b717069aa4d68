"""liteagent.eventlog.errors — the storage layer's errors.

Every error liteagent raises derives from :class:`LiteAgentError`; ``liteagent.sdk`` re-exports
the few that an agent's ``send``, ``restore`` and ``compact`` document. The tree::

    LiteAgentError
    ├── InvalidSessionIdError        (also ValueError)
    ├── InvalidEventError            (also TypeError)
    ├── InvalidMessageError          (also ValueError)
    ├── InvalidArgumentError         (also ValueError)
    ├── CodecError                   (also ValueError)
    ├── OperationCancelledError
    ├── ContextLimitError
    ├── CheckpointerError
    │   ├── CheckpointConflictError
    │   ├── CheckpointerClosedError
    │   ├── TruncateRangeError       (also ValueError)
    │   ├── SchemaVersionError
    │   ├── CorruptLogError
    │   ├── NotADatabaseError
    │   ├── SessionLeasedError
    │   │   └── LeaseLostError
    │   └── StorageIOError           (also OSError)
    └── BlobError
        ├── InvalidBlobRefError      (also ValueError)
        ├── BlobNotFoundError        (also KeyError)
        ├── CorruptBlobError
        └── BlobCollectionUnsupportedError

Foreign exceptions (apsw, OSError, msgspec, a codec's own errors) are translated at exactly one
boundary per backend, with ``raise ... from e``.
"""

from ._errors import (
    BlobCollectionUnsupportedError,
    BlobError,
    BlobNotFoundError,
    CheckpointConflictError,
    CheckpointerClosedError,
    CheckpointerError,
    CodecError,
    ContextLimitError,
    CorruptBlobError,
    CorruptLogError,
    InvalidArgumentError,
    InvalidBlobRefError,
    InvalidEventError,
    InvalidMessageError,
    InvalidSessionIdError,
    LeaseLostError,
    LiteAgentError,
    NotADatabaseError,
    OperationCancelledError,
    SchemaVersionError,
    SessionLeasedError,
    StorageIOError,
    TruncateRangeError,
)

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
