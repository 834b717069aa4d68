"""liteagent.context — pure functions over messages and folded state: token estimates, turns,
compaction passes and compactors, spill stores, the archive's marker and slice formats, and
model-call middleware.

This layer imports only :mod:`liteagent.eventlog`.
"""

from ._archive import (
    ARCHIVE_PREFIX,
    REFERENCE_PATTERN,
    archive_marker,
    archive_ref,
    refs_in,
    render_slice,
    slice_text,
)
from ._compactors import default_compactor, token_budget_compactor
from ._contract import Compactor, CompactResult, Pass, PassReport
from ._engine import ContextEngine, create_context_engine, left_out_note, project_context
from ._engine_options import (
    LEVELS,
    NATIVE_EDITS,
    ContextBudgetError,
    ContextOptions,
    ContextView,
    Planner,
)
from ._llm import SUMMARY_HEADER, SummarizerModel, llm_compactor
from ._middleware import (
    CompactionMiddleware,
    ReactiveCompaction,
    compaction,
    reactive_compaction,
    trim_messages,
)
from ._native_planner import NativeCompactionError, provider_compaction_planner
from ._passes import micro_pass, snip_pass, tool_result_budget_pass
from ._pipeline import run_pipeline
from ._replay import ReplayCheck, ReplayReport, verify_replay
from ._spill import (
    SPILL_PREFIX,
    SpillStore,
    blob_spill_store,
    memory_spill_store,
    spill_marker,
)
from ._tokens import (
    BYTES_PER_TOKEN,
    estimate_block_tokens,
    estimate_tokens,
    fit_after_overflow,
    request_overhead_tokens,
)
from ._turns import is_prompt, split_turns, turn_starts
from ._viewhash import (
    combine_view_hash,
    message_digest,
    messages_digest,
    request_digest,
    view_hash,
)

__all__ = [
    "ARCHIVE_PREFIX",
    "BYTES_PER_TOKEN",
    "LEVELS",
    "NATIVE_EDITS",
    "REFERENCE_PATTERN",
    "SPILL_PREFIX",
    "SUMMARY_HEADER",
    "CompactResult",
    "CompactionMiddleware",
    "Compactor",
    "ContextBudgetError",
    "ContextEngine",
    "ContextOptions",
    "ContextView",
    "NativeCompactionError",
    "Pass",
    "PassReport",
    "Planner",
    "ReactiveCompaction",
    "ReplayCheck",
    "ReplayReport",
    "SpillStore",
    "SummarizerModel",
    "archive_marker",
    "archive_ref",
    "blob_spill_store",
    "combine_view_hash",
    "compaction",
    "create_context_engine",
    "default_compactor",
    "estimate_block_tokens",
    "estimate_tokens",
    "fit_after_overflow",
    "is_prompt",
    "left_out_note",
    "llm_compactor",
    "memory_spill_store",
    "message_digest",
    "messages_digest",
    "micro_pass",
    "project_context",
    "provider_compaction_planner",
    "reactive_compaction",
    "refs_in",
    "render_slice",
    "request_digest",
    "request_overhead_tokens",
    "run_pipeline",
    "slice_text",
    "snip_pass",
    "spill_marker",
    "split_turns",
    "token_budget_compactor",
    "tool_result_budget_pass",
    "trim_messages",
    "turn_starts",
    "verify_replay",
    "view_hash",
]
