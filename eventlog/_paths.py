"""Where liteagent keeps its data: the home folder and one folder per project (workspace)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["lite_agent_home", "project_dir", "project_hash"]


def lite_agent_home(home: str | os.PathLike[str] | None = None) -> Path:
    """Return the home folder: ``home`` if given, else ``$LITE_AGENT_HOME``, else
    ``~/.lite-agent``."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("LITE_AGENT_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".lite-agent"


def project_hash(workdir: str | os.PathLike[str] = ".") -> str:
    """Return a stable 16-hex-digit hash of the workspace's real path (symlinks resolved)."""
    real = os.path.realpath(os.fspath(workdir))
    return hashlib.sha256(os.fsencode(real)).hexdigest()[:16]


def project_dir(
    workdir: str | os.PathLike[str] = ".", home: str | os.PathLike[str] | None = None
) -> Path:
    """Return ``<home>/projects/<project-hash>``, the folder of one workspace's sessions and
    blobs. Nothing is created."""
    return lite_agent_home(home) / "projects" / project_hash(workdir)
