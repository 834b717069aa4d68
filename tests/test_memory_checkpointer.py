"""The conformance suite against the in-memory reference checkpointer."""

from __future__ import annotations

from pathlib import Path

from liteagent.eventlog import memory_checkpointer
from liteagent.eventlog.conformance import CheckpointerConformance, Factory


class TestMemoryCheckpointer(CheckpointerConformance):
    """memory_checkpointer() passes the single-process contract."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return memory_checkpointer
