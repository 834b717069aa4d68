"""The conformance suite against the file checkpointer, plain and with a storage codec."""

from __future__ import annotations

import functools
from pathlib import Path

from liteagent.eventlog import file_checkpointer, zlib_codec
from liteagent.eventlog.conformance import (
    CheckpointerConformance,
    CrashConformance,
    DurableConformance,
    Factory,
)


class TestFileCheckpointer(CheckpointerConformance, DurableConformance, CrashConformance):
    """file_checkpointer(root) with durability="normal"."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(file_checkpointer, path)


class TestFileCheckpointerFullZlib(CheckpointerConformance, DurableConformance):
    """file_checkpointer(root, durability="full", codec=zlib_codec())."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(file_checkpointer, path, durability="full", codec=zlib_codec())
