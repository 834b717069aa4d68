"""The public names of each package are pinned (a change here is an API change)."""

from __future__ import annotations

import importlib
from types import FunctionType

import pytest

import liteagent.actors
import liteagent.context
import liteagent.eventlog
import liteagent.eventlog.backend
import liteagent.eventlog.conformance
import liteagent.eventlog.errors
import liteagent.eventlog.types
import liteagent.providers
import liteagent.sdk
import liteagent.tools

EVENTLOG = {
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
}
# The value types: messages, model calls and the persisted events.
TYPES = {
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
}
ERRORS = {
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
}
CONFORMANCE = {
    "BAD_SESSION_IDS",
    "TAIL_LOSS",
    "CheckpointerConformance",
    "CorruptionConformance",
    "CorruptionTrialError",
    "CrashConformance",
    "DurableConformance",
    "Factory",
    "damage_file_log",
    "damage_postgres",
    "damage_sqlite",
    "prompt",
    "prompts",
    "texts",
}
BACKEND = {
    "BLOB_REF_PATTERN",
    "DAMAGE_PROBLEMS",
    "EncodedEvent",
    "FileBlobStore",
    "INFORMATIONAL_PROBLEMS",
    "MAX_SEQ",
    "MemoryBlobStore",
    "blob_ref",
    "check_blob_data",
    "check_blob_refs",
    "check_written_before",
    "check_lease_held",
    "check_position",
    "decode_stored",
    "integrity_report",
    "lease_clock",
    "mark_lease_lost",
    "note_lease_renewed",
    "parse_blob_ref",
    "verify_blob",
}


PROVIDERS = {
    "AnthropicProvider",
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "COMPACT",
    "CapabilityNotSupportedError",
    "ContextOverflowError",
    "ModelProvider",
    "OverloadedError",
    "ProviderAuthError",
    "ProviderError",
    "ProviderRequestError",
    "ProviderStreamError",
    "ProviderUnavailableError",
    "RateLimitError",
    "ReplayMismatchError",
    "ReplayProvider",
    "ScriptError",
    "ScriptItem",
    "ScriptedProvider",
    "TOKEN_COUNTING",
    "UnexpectedRequestError",
    "UnusedResponsesError",
    "anthropic",
    "replay",
    "scripted",
}


TOOLS = {
    "FunctionTool",
    "InvalidPathError",
    "PathOutsideWorkspaceError",
    "Tool",
    "ToolContext",
    "ToolDefinitionError",
    "ToolEnv",
    "ToolError",
    "ToolOutput",
    "ToolSpec",
    "UnknownReferenceError",
    "bash",
    "bash_tool",
    "context",
    "default_tools",
    "delete_file",
    "edit_file",
    "glob",
    "grep",
    "read_file",
    "read_spilled",
    "resolve_in_workspace",
    "tool",
    "tool_env",
    "write_file",
}
ACTORS = {
    "CompactorActor",
    "EventHub",
    "FileSnapshotActor",
    "MaintenanceLockActor",
    "ManualCompaction",
    "Restorer",
    "SessionConfig",
    "SessionHost",
}


SDK = {
    "ActorStoppedError",
    "ActorTimeoutError",
    "AgentBusyError",
    "AgentClosedError",
    "AsyncLiteAgent",
    "AsyncSubscription",
    "BackgroundTask",
    "BackgroundTaskFinished",
    "Branch",
    "CancelToken",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointRestore",
    "CompactStats",
    "CompactionFailedError",
    "CompactionProgress",
    "ContextBudgetError",
    "FileChange",
    "HostSaturatedError",
    "HostStats",
    "InterruptedRestoreError",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "LiteAgent",
    "LiteAgentError",
    "LiteAgentResult",
    "LiveEvent",
    "Middleware",
    "Missed",
    "NoBranchError",
    "OperationCancelledError",
    "ProviderError",
    "RestoreFailedError",
    "RestorePreview",
    "RestoreRefusedError",
    "RestoreResult",
    "SessionsDisabledError",
    "SideEffect",
    "Subscription",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnFailed",
    "TurnFailedError",
    "TurnFinished",
    "configure_logging",
    "create_agent",
    "create_async_lite_agent",
    "create_lite_agent",
}


CONTEXT = {
    "CompactResult",
    "Compactor",
    "ContextBudgetError",
    "ContextEngine",
    "ContextOptions",
    "ContextView",
    "NativeCompactionError",
    "Pass",
    "PassReport",
    "Planner",
    "ReplayCheck",
    "ReplayReport",
    "SPILL_PREFIX",
    "SpillStore",
    "SummarizerModel",
    "blob_spill_store",
    "compaction",
    "default_compactor",
    "estimate_tokens",
    "llm_compactor",
    "memory_spill_store",
    "micro_pass",
    "project_context",
    "provider_compaction_planner",
    "reactive_compaction",
    "request_digest",
    "run_pipeline",
    "snip_pass",
    "split_turns",
    "token_budget_compactor",
    "tool_result_budget_pass",
    "verify_replay",
    "view_hash",
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


def test_types_exports() -> None:
    """liteagent.eventlog.types exports exactly the value types."""
    assert TYPES == set(liteagent.eventlog.types.__all__)


def test_errors_exports() -> None:
    """liteagent.eventlog.errors exports exactly the storage layer's errors."""
    assert ERRORS == set(liteagent.eventlog.errors.__all__)


def test_the_six_packages_export_well_under_200_names() -> None:
    """The six layers' own namespaces stay small: their value types and storage errors live in
    liteagent.eventlog.types and liteagent.eventlog.errors."""
    layers = [liteagent.eventlog, liteagent.context, liteagent.providers, liteagent.tools]
    layers += [liteagent.actors, liteagent.sdk]
    total = sum(len(m.__all__) for m in layers)
    assert total == sum(map(len, [EVENTLOG, CONTEXT, PROVIDERS, TOOLS, ACTORS, SDK]))
    assert total < 180  # 168 when the namespaces were made (238 before)


def test_the_old_spelling_of_a_moved_name_resolves_to_its_home() -> None:
    """``liteagent.eventlog.UserPrompt`` (the spelling before the namespaces) still gives the
    object of ``liteagent.eventlog.types``, but is neither exported nor listed by ``dir``; an
    unknown name is an AttributeError as for any module."""
    for name in TYPES:
        assert getattr(liteagent.eventlog, name) is getattr(liteagent.eventlog.types, name)
    for name in ERRORS:
        assert getattr(liteagent.eventlog, name) is getattr(liteagent.eventlog.errors, name)
    assert set() == (TYPES | ERRORS) & (
        set(liteagent.eventlog.__all__) | set(dir(liteagent.eventlog))
    )
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        liteagent.eventlog.Nope  # noqa: B018
    from liteagent.eventlog import UserPrompt  # the old spelling, as written before

    assert UserPrompt is liteagent.eventlog.types.UserPrompt


def test_conformance_exports() -> None:
    """liteagent.eventlog.conformance exports the suite's classes and helpers."""
    assert CONFORMANCE == set(liteagent.eventlog.conformance.__all__)


def test_backend_exports() -> None:
    """liteagent.eventlog.backend exports what a backend needs beyond liteagent.eventlog, and
    none of liteagent.eventlog's own names (each name has one home)."""
    assert BACKEND == set(liteagent.eventlog.backend.__all__)
    assert set() == BACKEND & (EVENTLOG | TYPES | ERRORS)


@pytest.mark.parametrize(
    "module",
    [
        "liteagent.eventlog",
        "liteagent.eventlog.types",
        "liteagent.eventlog.errors",
        "liteagent.eventlog.backend",
        "liteagent.eventlog.conformance",
        "liteagent.providers",
        "liteagent.providers.testing",
        "liteagent.context",
        "liteagent.tools",
        "liteagent.actors",
        "liteagent.sdk",
    ],
)
def test_every_exported_name_exists(module: str) -> None:
    """Each name in __all__ is an attribute of the package."""
    mod = importlib.import_module(module)
    assert [] == [name for name in mod.__all__ if not hasattr(mod, name)]


def test_errors_share_one_root() -> None:
    """Every exported error class derives from LiteAgentError."""
    errors = [getattr(liteagent.eventlog.errors, n) for n in ERRORS]
    assert errors
    assert all(n.endswith("Error") for n in ERRORS)
    assert [] == [n for n in EVENTLOG | TYPES if n.endswith("Error")]
    root = liteagent.eventlog.errors.LiteAgentError
    assert [] == [e.__name__ for e in errors if not issubclass(e, root)]


# The facade re-exports what users of an agent catch and pass; every other public name has one
# home, the package that lists it.
FACADE = {
    "CancelToken",
    "CheckpointConflictError",
    "ContextBudgetError",
    "InvalidArgumentError",
    "LiteAgentError",
    "OperationCancelledError",
    "ProviderError",
}
PACKAGES = [
    "liteagent.eventlog",
    "liteagent.eventlog.types",
    "liteagent.eventlog.errors",
    "liteagent.eventlog.backend",
    "liteagent.context",
    "liteagent.providers",
    "liteagent.tools",
    "liteagent.actors",
    "liteagent.sdk",
]


def test_each_public_name_has_one_home() -> None:
    """No object is exported by two packages, except the facade's re-exports from liteagent.sdk
    (the errors send, restore and compact raise, and CancelToken)."""
    homes: dict[int, list[str]] = {}
    for module in PACKAGES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, (str, int, float, frozenset, tuple)):
                continue  # constants: equal values are not one object exported twice
            homes.setdefault(id(obj), []).append(f"{module}.{name}")
    shared = [
        h
        for h in homes.values()
        if len(h) > 1
        and not (
            len(h) == 2 and h[1].startswith("liteagent.sdk.") and h[1].rsplit(".", 1)[1] in FACADE
        )
    ]
    assert [] == shared


def test_the_facade_reexports_its_names_from_their_home() -> None:
    """Each facade name of liteagent.sdk is the very object its home package exports."""
    homes = [importlib.import_module(m) for m in PACKAGES[:-1]]
    for name in FACADE:
        obj = getattr(liteagent.sdk, name)
        assert [obj] == [getattr(m, name) for m in homes if name in m.__all__]


def test_exported_classes_carry_their_public_name() -> None:
    """Every exported class and function is named as it is exported, so reprs and the API
    reference show that name (``liteagent.sdk.LiteAgentResult`` is not an alias of another
    class, ``liteagent.providers.anthropic`` not one of another function)."""
    renamed = [
        f"{module}.{name} is {obj.__name__}"
        for module in PACKAGES
        for name in importlib.import_module(module).__all__
        if isinstance(obj := getattr(importlib.import_module(module), name), type | FunctionType)
        and obj.__name__ != name
    ]
    assert [] == renamed
