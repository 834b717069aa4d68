"""The public names of each package are pinned (a change here is an API change)."""

from __future__ import annotations

import importlib

import pytest

import liteagent.actors
import liteagent.context
import liteagent.eventlog
import liteagent.eventlog.backend
import liteagent.eventlog.conformance
import liteagent.providers
import liteagent.sdk
import liteagent.tools

EVENTLOG = {
    "AppliedEdit", "AssistantMessage", "BLOB_REF_PATTERN", "BackgroundCompleted", "BlobError",
    "BlobNotFoundError", "BlobStore", "Block", "CancelToken", "CheckpointConflictError",
    "CheckpointMark", "Checkpointer", "CheckpointerClosedError", "CheckpointerError",
    "ClearThinking", "ClearToolUses", "Codec", "CodecError", "Compact", "Compaction",
    "CompactionBlock", "ContextEdit", "ContextLimitError", "ContextStatus", "ConversationEntry",
    "ContentArchived", "ContextSettings",
    "CorruptBlobError", "CorruptLogError", "EVENT_KINDS", "Event", "FileSnapshot",
    "IntegrityProblem", "IntegrityReport", "InvalidArgumentError", "InvalidBlobRefError",
    "InvalidEventError", "InvalidMessageError", "InvalidSessionIdError", "Lease", "LeaseInfo",
    "LeaseLostError",
    "LiteAgentError", "Message", "ModelRequest", "ModelRequestRecord", "ModelResponse",
    "NotADatabaseError",
    "OpaqueEvent", "OperationCancelledError", "Origin", "PVec", "PassRecord", "Position",
    "RepairReport",
    "RawBlock", "RedactedThinkingBlock", "ResponseComplete", "RestoreFile", "RestoreFinished",
    "RestoreStarted", "Role", "SESSION_ID_PATTERN", "SchemaVersionError", "SessionInfo",
    "SessionLeasedError", "SessionStarted", "SessionState", "StorageIOError", "StoredEvent",
    "StreamEvent", "TextBlock",
    "TextDelta", "ThinkingBlock", "ThinkingDelta", "ToolInputDelta", "ToolResult",
    "ToolResultBlock", "ToolSchema", "ToolUseBlock", "ToolUseStart", "TruncateRangeError",
    "TurnAborted", "Usage", "UserPrompt", "apply", "apply_all", "blob_ref", "conversation",
    "file_checkpointer", "fold", "kind_of", "lite_agent_home", "memory_checkpointer",
    "message_from_dict", "message_text", "message_to_dict", "messages_from_dicts",
    "messages_to_dicts", "project_dir", "project_hash", "sqlite_checkpointer",
    "validate_session_id", "zlib_codec",
    "merge_adjacent",
}
CONFORMANCE = {
    "BAD_SESSION_IDS", "TAIL_LOSS", "CheckpointerConformance", "CorruptionConformance",
    "CorruptionTrialError", "CrashConformance", "DurableConformance", "Factory",
    "damage_file_log", "damage_sqlite", "prompt", "prompts", "texts",
}
BACKEND = {
    "DAMAGE_PROBLEMS", "INFORMATIONAL_PROBLEMS", "MAX_SEQ", "EncodedEvent", "FileBlobStore",
    "MemoryBlobStore", "check_blob_data", "check_lease_held", "check_position", "decode_stored",
    "integrity_report", "mark_lease_lost", "parse_blob_ref", "verify_blob",
}


PROVIDERS = {
    "CLEAR_THINKING", "CLEAR_TOOL_USES", "COMPACT", "TOKEN_COUNTING", "AnthropicProvider",
    "AppliedEdit", "CapabilityNotSupportedError", "ClearThinking", "ClearToolUses", "Compact",
    "ContextEdit", "ContextOverflowError", "ModelProvider", "ModelRequest", "ModelResponse",
    "OverloadedError", "ProviderAuthError", "ProviderError", "ProviderRequestError",
    "ProviderStreamError", "ProviderUnavailableError", "RateLimitError", "ReplayMismatchError",
    "ReplayProvider", "ResponseComplete", "ScriptError", "ScriptItem", "ScriptedProvider",
    "StreamEvent", "TextDelta", "ThinkingDelta", "ToolInputDelta", "ToolSchema", "ToolUseStart",
    "UnexpectedRequestError", "UnusedResponsesError", "anthropic", "anthropic_provider", "replay",
    "replay_messages", "response_events", "scripted",
}


TOOLS = {
    "BackgroundStarter", "FunctionTool", "InvalidPathError", "PathOutsideWorkspaceError", "Tool",
    "ToolContext", "ToolDefinitionError", "ToolError", "ToolOutput", "ToolSpec", "bash",
    "default_tools", "delete_file", "edit_file", "glob", "grep", "read_file",
    "resolve_in_workspace", "tool", "write_file",
    "ArchiveReader", "UnknownReferenceError", "context", "read_spilled",
    "ToolEnv", "bash_tool", "tool_env",
}
ACTORS = {
    "Acquire", "ActorBase", "ActorStoppedError", "ActorTimeoutError", "AgentBusyError",
    "BackgroundTask", "BackgroundTaskFinished", "Checkpoint", "CheckpointRestore", "CompactStats",
    "CompactionProgress", "CompactorActor", "Envelope", "EventHub",
    "FileSnapshotActor", "HostSaturatedError", "HostStats", "InterruptedRestoreError",
    "InvalidCheckpointError", "IsHeld", "LiveEvent", "MaintenanceLockActor", "ManualCompaction",
    "Message", "Middleware", "Missed", "Release", "RestoreFailedError", "RestoreRefusedError",
    "RestoreResult", "Restorer", "RunCompaction", "SessionActor", "SessionConfig", "SessionCore",
    "SessionHost", "Subscription", "ToolCallFinished", "ToolCallStarted", "TurnFailed",
    "TurnFailedError", "TurnFinished", "TurnResult", "ask", "tell",
}


SDK = {
    "ActorStoppedError", "ActorTimeoutError", "HostSaturatedError", "HostStats",
    "AgentBusyError", "AgentClosedError", "AsyncLiteAgent", "AsyncSubscription", "BackgroundTask",
    "BackgroundTaskFinished", "Checkpoint", "CheckpointRestore", "CompactStats",
    "CompactionProgress", "InterruptedRestoreError",
    "InvalidCheckpointError", "LiteAgent", "LiteAgentResult", "LiveEvent", "Missed",
    "RestoreFailedError", "RestoreRefusedError", "RestoreResult",
    "SessionsDisabledError", "Subscription", "ToolCallFinished", "ToolCallStarted", "TurnFailed",
    "TurnFailedError", "TurnFinished", "configure_logging", "create_agent",
    "create_async_lite_agent", "create_lite_agent",
}


CONTEXT = {
    "BYTES_PER_TOKEN", "SPILL_PREFIX", "SUMMARY_HEADER", "CompactResult", "CompactionMiddleware",
    "Compactor", "Pass", "PassReport", "ReactiveCompaction", "SpillStore", "SummarizerModel",
    "blob_spill_store", "compaction", "default_compactor", "estimate_block_tokens",
    "estimate_tokens", "is_prompt", "llm_compactor", "memory_spill_store", "micro_pass",
    "reactive_compaction", "run_pipeline", "snip_pass", "spill_marker", "split_turns",
    "turn_starts",
    "token_budget_compactor", "tool_result_budget_pass", "trim_messages",
    "ARCHIVE_PREFIX", "REFERENCE_PATTERN", "archive_marker", "archive_ref", "refs_in",
    "render_slice", "slice_text",
    "LEVELS", "NATIVE_EDITS", "ContextBudgetError", "ContextEngine", "ContextOptions",
    "ContextView", "Planner",
    "ReplayCheck", "ReplayReport", "create_context_engine", "left_out_note", "project_context",
    "request_digest", "verify_replay", "view_hash", "combine_view_hash", "message_digest",
    "messages_digest", "NativeCompactionError", "provider_compaction_planner",
    "fit_after_overflow", "request_overhead_tokens",
    "spilled_text", "ConversationView",
}


def test_context_exports() -> None:
    """liteagent.context exports exactly its documented names."""
    assert CONTEXT == set(liteagent.context.__all__)


def test_tools_exports() -> None:
    """liteagent.tools exports exactly its documented names."""
    assert TOOLS == set(liteagent.tools.__all__)


def test_sdk_exports() -> None:
    """liteagent.sdk exports exactly its documented names."""
    assert SDK == set(liteagent.sdk.__all__)


def test_actors_exports() -> None:
    """liteagent.actors exports exactly its documented names."""
    assert ACTORS == set(liteagent.actors.__all__)


def test_providers_exports() -> None:
    """liteagent.providers exports exactly its documented names."""
    assert PROVIDERS == set(liteagent.providers.__all__)


def test_eventlog_exports() -> None:
    """liteagent.eventlog exports exactly its documented names."""
    assert EVENTLOG == set(liteagent.eventlog.__all__)


def test_conformance_exports() -> None:
    """liteagent.eventlog.conformance exports the suite's classes and helpers."""
    assert CONFORMANCE == set(liteagent.eventlog.conformance.__all__)


def test_backend_exports() -> None:
    """liteagent.eventlog.backend exports what a backend needs beyond liteagent.eventlog, and
    none of liteagent.eventlog's own names (each name has one home)."""
    assert BACKEND == set(liteagent.eventlog.backend.__all__)
    assert set() == BACKEND & EVENTLOG


@pytest.mark.parametrize(
    "module", ["liteagent.eventlog", "liteagent.eventlog.backend",
               "liteagent.eventlog.conformance", "liteagent.providers",
               "liteagent.providers.testing", "liteagent.context", "liteagent.tools",
               "liteagent.actors", "liteagent.sdk"]
)
def test_every_exported_name_exists(module: str) -> None:
    """Each name in __all__ is an attribute of the package."""
    mod = importlib.import_module(module)
    assert [] == [name for name in mod.__all__ if not hasattr(mod, name)]


def test_errors_share_one_root() -> None:
    """Every exported error class derives from LiteAgentError."""
    errors = [
        getattr(liteagent.eventlog, n) for n in EVENTLOG
        if n.endswith("Error") and isinstance(getattr(liteagent.eventlog, n), type)
    ]
    assert errors
    root = liteagent.eventlog.LiteAgentError
    assert [] == [e.__name__ for e in errors if not issubclass(e, root)]
