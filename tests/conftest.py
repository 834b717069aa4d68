"""Shared fixtures: the recorded trajectories, a fresh current folder and home for every test,
and a guard against leaked pykka actors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest
from _cli_runner import Cli, CliServer
from _postgres_server import Bouncer, Server, start_pgbouncer, start_server

SHIPPED_TRAJECTORIES = Path(__file__).parent / "data" / "trajectories"
"""The few small recorded trajectories the repository ships (their source and licence are in the
README.md there)."""


def trajectories_dir() -> Path:
    """The recorded trajectories folder: ``$LITEAGENT_TRAJECTORIES`` when it is set (a larger
    set), else the small set shipped in ``tests/data/trajectories``."""
    value = os.environ.get("LITEAGENT_TRAJECTORIES")
    return Path(value) if value else SHIPPED_TRAJECTORIES


@pytest.fixture(scope="session")
def trajectory_files() -> list[Path]:
    """Every ``*.jsonl`` trajectory of :func:`trajectories_dir`. A ``$LITEAGENT_TRAJECTORIES``
    that is not a folder of ``*.jsonl`` files fails the test (a set asked for is never skipped
    silently)."""
    folder = trajectories_dir()
    assert folder.is_dir(), f"LITEAGENT_TRAJECTORIES={folder} is not a folder"
    files = sorted(folder.glob("*.jsonl"))
    assert files, f"no *.jsonl files in {folder}"
    return files


@pytest.fixture(autouse=True)
def _own_folders(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in a fresh empty current folder with ``$LITE_AGENT_HOME`` in a fresh
    folder, so that a relative path or a default home never writes into the repository or the
    user's own ``~/.lite-agent`` (a test that needs either sets it itself)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    monkeypatch.setenv("LITE_AGENT_HOME", str(tmp_path_factory.mktemp("lite-agent-home")))


@pytest.fixture(autouse=True)
def _no_leaked_actors() -> Iterator[None]:
    """Fail a test that leaves a pykka actor running (it would hang the process at exit)."""
    yield
    leaked = pykka.ActorRegistry.get_all()
    pykka.ActorRegistry.stop_all(timeout=5)
    assert not leaked, f"test leaked actors: {leaked}"


@pytest.fixture(scope="module")
def server() -> Iterator[CliServer]:
    """The CLI tests' fork server (one per module: importing liteagent takes seconds)."""
    s = CliServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def cli(server: CliServer, tmp_path: Path) -> Cli:
    """A CLI on an empty workspace and home."""
    return Cli(server, tmp_path)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    """The PostgreSQL server of the Postgres tests (``$LITEAGENT_TEST_POSTGRES_DSN``, or a
    throwaway one; see ``tests/_postgres_server.py``); the tests are skipped, with the reason,
    when there is none."""
    server = start_server()
    if isinstance(server, str):
        pytest.skip(server)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: Server) -> Iterator[Bouncer]:
    """PgBouncer in transaction mode in front of the Postgres tests' server (skipped, with the
    reason, when PgBouncer is not installed)."""
    bouncer = start_pgbouncer(postgres_server)
    if isinstance(bouncer, str):
        pytest.skip(bouncer)
    try:
        yield bouncer
    finally:
        bouncer.stop()
