"""liteagent.context — pure functions over messages and folded state: token estimates, turns,
compaction passes and compactors, spill stores, and model-call middleware.

This layer imports only :mod:`liteagent.eventlog`.
"""

from ._contract import Compactor, CompactResult, Pass, PassReport
from ._pipeline import run_pipeline
from ._spill import (
    SPILL_PREFIX,
    SpillStore,
    blob_spill_store,
    memory_spill_store,
    spill_marker,
)
from ._tokens import BYTES_PER_TOKEN, estimate_block_tokens, estimate_tokens
from ._turns import is_prompt, split_turns

__all__ = [
    "BYTES_PER_TOKEN",
    "SPILL_PREFIX",
    "CompactResult",
    "Compactor",
    "Pass",
    "PassReport",
    "SpillStore",
    "blob_spill_store",
    "estimate_block_tokens",
    "estimate_tokens",
    "is_prompt",
    "memory_spill_store",
    "run_pipeline",
    "spill_marker",
    "split_turns",
]
