"""liteagent.eventlog.types — the value types: messages, model calls and the persisted events.

Everything here is a frozen ``msgspec.Struct`` (or a union of them); like ``anthropic.types``,
this namespace holds the vocabulary, so that :mod:`liteagent.eventlog` itself stays the
operations (checkpointers, the fold, the interchange format) and :mod:`liteagent.eventlog.errors`
the errors.

Messages and their blocks (provider-neutral, shaped like the Anthropic Messages API):
    :class:`Message`, :data:`Block` (:class:`TextBlock`, :class:`ToolUseBlock`,
    :class:`ToolResultBlock`, :class:`ThinkingBlock`, :class:`RedactedThinkingBlock`,
    :class:`CompactionBlock`, :class:`RawBlock`), :class:`Usage`, and the
    :class:`ConversationEntry` that :func:`liteagent.eventlog.conversation` yields.

A model call as data (what the context layer builds and a provider streams):
    :class:`ModelRequest`, :class:`ToolSchema`, the native context edits :data:`ContextEdit`
    (:class:`ClearToolUses`, :class:`ClearThinking`, :class:`Compact`), :class:`ModelResponse`
    with its :class:`AppliedEdit` records, and the live :data:`StreamEvent` union
    (:class:`TextDelta`, :class:`ThinkingDelta`, :class:`ToolUseStart`,
    :class:`ToolInputDelta`, :class:`ResponseComplete`).

The persisted events (:data:`Event`, version 1; stored as a
:class:`~liteagent.eventlog.StoredEvent`):
    :class:`SessionStarted`, :class:`UserPrompt`, :class:`AssistantMessage`,
    :class:`ToolResult`, :class:`FileSnapshot`, :class:`Compaction` (with its
    :class:`PassRecord` entries), :class:`ContextStatus` (with its :class:`ContextSettings`),
    :class:`ContentArchived`, :class:`ModelRequestRecord`, :class:`BackgroundStarted`,
    :class:`BackgroundCompleted`, :class:`TurnAborted`, :class:`RestoreStarted` (with its
    :class:`RestoreFile` entries), :class:`RestoreFinished`, :class:`BranchCreated`,
    :class:`Forked`, :class:`TranscriptImported`; and :class:`OpaqueEvent`, an event of a kind
    a newer liteagent wrote, kept as its exact bytes.
"""

from ._events import (
    AssistantMessage,
    BackgroundCompleted,
    BackgroundStarted,
    BranchCreated,
    Compaction,
    ContentArchived,
    ContextSettings,
    ContextStatus,
    Event,
    FileSnapshot,
    Forked,
    ModelRequestRecord,
    OpaqueEvent,
    PassRecord,
    RestoreFile,
    RestoreFinished,
    RestoreStarted,
    SessionStarted,
    ToolResult,
    TranscriptImported,
    TurnAborted,
    Usage,
    UserPrompt,
)
from ._fold import ConversationEntry
from ._messages import (
    Block,
    CompactionBlock,
    Message,
    RawBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ._model import (
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
    Compact,
    ContextEdit,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSchema,
    ToolUseStart,
)

__all__ = [
    "AppliedEdit",
    "AssistantMessage",
    "BackgroundCompleted",
    "BackgroundStarted",
    "Block",
    "BranchCreated",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "Compaction",
    "CompactionBlock",
    "ContentArchived",
    "ContextEdit",
    "ContextSettings",
    "ContextStatus",
    "ConversationEntry",
    "Event",
    "FileSnapshot",
    "Forked",
    "Message",
    "ModelRequest",
    "ModelRequestRecord",
    "ModelResponse",
    "OpaqueEvent",
    "PassRecord",
    "RawBlock",
    "RedactedThinkingBlock",
    "ResponseComplete",
    "RestoreFile",
    "RestoreFinished",
    "RestoreStarted",
    "SessionStarted",
    "StreamEvent",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolResult",
    "ToolResultBlock",
    "ToolSchema",
    "ToolUseBlock",
    "ToolUseStart",
    "TranscriptImported",
    "TurnAborted",
    "Usage",
    "UserPrompt",
]
