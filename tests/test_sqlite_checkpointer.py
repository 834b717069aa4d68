"""The conformance suite against the SQLite checkpointer, on a file and in memory."""

from __future__ import annotations

import functools
import random
from pathlib import Path

from liteagent.eventlog import sqlite_checkpointer, zlib_codec
from liteagent.eventlog.conformance import (
    CheckpointerConformance,
    CorruptionConformance,
    CrashConformance,
    DurableConformance,
    Factory,
    damage_sqlite,
)


class TestSqliteCheckpointer(CheckpointerConformance, DurableConformance, CrashConformance):
    """sqlite_checkpointer(file) with synchronous="normal"."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(sqlite_checkpointer, path / "log.db")


class TestSqliteCheckpointerFull(CheckpointerConformance):
    """sqlite_checkpointer(file, synchronous="full")."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(sqlite_checkpointer, path / "log.db", synchronous="full")


class TestSqliteCheckpointerInMemory(CheckpointerConformance):
    """sqlite_checkpointer(":memory:") is process-local but keeps the whole contract."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(sqlite_checkpointer, ":memory:")


class TestSqliteCorruption(CorruptionConformance):
    """Random damage to a closed SQLite store: rows edited behind its back, the file itself."""

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(sqlite_checkpointer, path / "log.db")

    def damage(self, path: Path, session_id: str, rng: random.Random) -> str:
        return damage_sqlite(path, session_id, rng)


class TestSqliteCheckpointerZlib(CheckpointerConformance, CorruptionConformance):
    """sqlite_checkpointer(file, codec=zlib_codec()): every body and blob through the codec."""

    corruption_trials = 60

    def checkpointer_factory(self, path: Path) -> Factory:
        return functools.partial(sqlite_checkpointer, path / "log.db", codec=zlib_codec())

    def damage(self, path: Path, session_id: str, rng: random.Random) -> str:
        return damage_sqlite(path, session_id, rng)
