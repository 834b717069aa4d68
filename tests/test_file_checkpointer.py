"""The conformance suite against the file checkpointer, plain and with a storage codec."""

from __future__ import annotations

import functools
import random
from pathlib import Path

from liteagent.eventlog import file_checkpointer, zlib_codec
from liteagent.eventlog.conformance import (
    CheckpointerConformance,
    CorruptionConformance,
    CrashConformance,
    DurableConformance,
    Factory,
    damage_file_log,
)


class TestFileCheckpointer(
    CheckpointerConformance, DurableConformance, CrashConformance, CorruptionConformance
):
    """file_checkpointer(root) with durability="normal"."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(file_checkpointer, path)

    def damage(self, path: Path, session_id: str, rng: random.Random) -> str:
        return damage_file_log(path, session_id, rng)


class TestFileCheckpointerFullZlib(
    CheckpointerConformance, DurableConformance, CorruptionConformance
):
    """file_checkpointer(root, durability="full", codec=zlib_codec())."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(file_checkpointer, path, durability="full", codec=zlib_codec())

    def damage(self, path: Path, session_id: str, rng: random.Random) -> str:
        return damage_file_log(path, session_id, rng)
