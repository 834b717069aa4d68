"""liteagent.context — pure functions over messages and folded state: token estimates, turns,
compaction passes and compactors, spill stores, the archive's marker and slice formats, and
model-call middleware.

This layer imports only :mod:`liteagent.eventlog`. Its functions raise
:class:`~liteagent.eventlog.errors.InvalidArgumentError` for arguments of the wrong type or shape
(see :mod:`._boundary`).
"""

from ._boundary import public
from ._compactors import default_compactor as _default_compactor
from ._compactors import token_budget_compactor as _token_budget_compactor
from ._contract import Compactor, CompactResult, Pass, PassReport
from ._engine import ContextEngine
from ._engine import project_context as _project_context
from ._engine_options import ContextBudgetError, ContextOptions, ContextView, Planner
from ._llm import SummarizerModel
from ._llm import llm_compactor as _llm_compactor
from ._middleware import compaction as _compaction
from ._middleware import reactive_compaction as _reactive_compaction
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
from ._tokens import estimate_tokens as _estimate_tokens
from ._turns import split_turns as _split_turns
from ._viewhash import request_digest as _request_digest
from ._viewhash import view_hash as _view_hash

blob_spill_store = public(_blob_spill_store)
compaction = public(_compaction)
default_compactor = public(_default_compactor)
estimate_tokens = public(_estimate_tokens)
llm_compactor = public(_llm_compactor)
memory_spill_store = public(_memory_spill_store)
micro_pass = public(_micro_pass)
project_context = public(_project_context)
provider_compaction_planner = public(_provider_compaction_planner)
reactive_compaction = public(_reactive_compaction)
request_digest = public(_request_digest)
run_pipeline = public(_run_pipeline)
snip_pass = public(_snip_pass)
split_turns = public(_split_turns)
token_budget_compactor = public(_token_budget_compactor)
tool_result_budget_pass = public(_tool_result_budget_pass)
verify_replay = public(_verify_replay)
view_hash = public(_view_hash)

__all__ = [
    "SPILL_PREFIX",
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
]
