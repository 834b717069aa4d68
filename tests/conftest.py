"""Shared fixtures: the recorded-trajectories folder, and a guard against leaked pykka actors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest
from _cli_runner import Cli, CliServer


def trajectories_dir() -> Path | None:
    """The recorded trajectories folder from ``$LITEAGENT_TRAJECTORIES``, if it exists."""
    value = os.environ.get("LITEAGENT_TRAJECTORIES")
    if not value:
        return None
    path = Path(value)
    return path if path.is_dir() else None


@pytest.fixture
def trajectory_files() -> list[Path]:
    """Every ``*.jsonl`` trajectory; skips (saying why) when the folder is not available."""
    folder = trajectories_dir()
    if folder is None:
        pytest.skip(
            "recorded trajectories not available: set LITEAGENT_TRAJECTORIES to the folder "
            "(.ci/run sets it to the team's shared trajectories folder)"
        )
    files = sorted(folder.glob("*.jsonl"))
    assert files, f"no *.jsonl files in {folder}"
    return files


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
