"""liteagent.context — pure functions over messages and folded state: token estimates, turns,
compaction passes and compactors, spill stores, the archive's marker and slice formats, and
model-call middleware.

This layer imports only :mod:`liteagent.eventlog`. Its functions raise
:class:`~liteagent.eventlog.InvalidArgumentError` for arguments of the wrong type or shape
(see :mod:`._boundary`).
"""

from ._archive import (
    ARCHIVE_PREFIX,
    REFERENCE_PATTERN,
)
from ._archive import archive_marker as _archive_marker
from ._archive import archive_ref as _archive_ref
from ._archive import refs_in as _refs_in
from ._archive import render_slice as _render_slice
from ._archive import slice_text as _slice_text
from ._bodies import spilled_text as _spilled_text
from ._boundary import public
from ._compactors import default_compactor as _default_compactor
from ._compactors import token_budget_compactor as _token_budget_compactor
from ._contract import Compactor, CompactResult, Pass, PassReport
from ._engine import ContextEngine
from ._engine import create_context_engine as _create_context_engine
from ._engine import left_out_note as _left_out_note
from ._engine import project_context as _project_context
from ._engine_options import (
    LEVELS,
    NATIVE_EDITS,
    ContextBudgetError,
    ContextOptions,
    ContextView,
    Planner,
)
from ._llm import SUMMARY_HEADER, SummarizerModel
from ._llm import llm_compactor as _llm_compactor
from ._middleware import (
    CompactionMiddleware,
    ReactiveCompaction,
)
from ._middleware import compaction as _compaction
from ._middleware import reactive_compaction as _reactive_compaction
from ._middleware import trim_messages as _trim_messages
from ._native_planner import NativeCompactionError
from ._native_planner import provider_compaction_planner as _provider_compaction_planner
from ._passes import micro_pass as _micro_pass
from ._passes import snip_pass as _snip_pass
from ._passes import tool_result_budget_pass as _tool_result_budget_pass
from ._pipeline import run_pipeline as _run_pipeline
from ._replay import ReplayCheck, ReplayReport
from ._replay import verify_replay as _verify_replay
from ._spill import (
    SPILL_PREFIX,
    SpillStore,
)
from ._spill import blob_spill_store as _blob_spill_store
from ._spill import memory_spill_store as _memory_spill_store
from ._spill import spill_marker as _spill_marker
from ._tokens import (
    BYTES_PER_TOKEN,
)
from ._tokens import estimate_block_tokens as _estimate_block_tokens
from ._tokens import estimate_tokens as _estimate_tokens
from ._tokens import fit_after_overflow as _fit_after_overflow
from ._tokens import request_overhead_tokens as _request_overhead_tokens
from ._turns import is_prompt as _is_prompt
from ._turns import split_turns as _split_turns
from ._turns import turn_starts as _turn_starts
from ._view import ConversationView
from ._viewhash import combine_view_hash as _combine_view_hash
from ._viewhash import message_digest as _message_digest
from ._viewhash import messages_digest as _messages_digest
from ._viewhash import request_digest as _request_digest
from ._viewhash import view_hash as _view_hash

archive_marker = public(_archive_marker)
archive_ref = public(_archive_ref)
blob_spill_store = public(_blob_spill_store)
combine_view_hash = public(_combine_view_hash)
compaction = public(_compaction)
create_context_engine = public(_create_context_engine)
default_compactor = public(_default_compactor)
estimate_block_tokens = public(_estimate_block_tokens)
estimate_tokens = public(_estimate_tokens)
fit_after_overflow = public(_fit_after_overflow)
is_prompt = public(_is_prompt)
left_out_note = public(_left_out_note)
llm_compactor = public(_llm_compactor)
memory_spill_store = public(_memory_spill_store)
message_digest = public(_message_digest)
messages_digest = public(_messages_digest)
micro_pass = public(_micro_pass)
project_context = public(_project_context)
provider_compaction_planner = public(_provider_compaction_planner)
reactive_compaction = public(_reactive_compaction)
refs_in = public(_refs_in)
render_slice = public(_render_slice)
request_digest = public(_request_digest)
request_overhead_tokens = public(_request_overhead_tokens)
run_pipeline = public(_run_pipeline)
slice_text = public(_slice_text)
snip_pass = public(_snip_pass)
spill_marker = public(_spill_marker)
spilled_text = public(_spilled_text)
split_turns = public(_split_turns)
token_budget_compactor = public(_token_budget_compactor)
tool_result_budget_pass = public(_tool_result_budget_pass)
trim_messages = public(_trim_messages)
turn_starts = public(_turn_starts)
verify_replay = public(_verify_replay)
view_hash = public(_view_hash)

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
    "ConversationView",
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
    "spilled_text",
    "split_turns",
    "token_budget_compactor",
    "tool_result_budget_pass",
    "trim_messages",
    "turn_starts",
    "verify_replay",
    "view_hash",
]
