"""Where liteagent keeps its data: the home folder and one folder per project (workspace)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from ._errors import InvalidArgumentError
from ._shown import shown

__all__ = ["check_path", "lite_agent_home", "project_dir", "project_hash"]


def check_path(name: str, value: object) -> str:
    """Return ``value`` as a str path; raise :class:`InvalidArgumentError` unless it is a
    non-empty str or ``os.PathLike`` of str without NUL characters (``""`` would silently mean
    the current folder) that the file system can encode (no lone surrogate it cannot take)."""
    path: object = None
    if isinstance(value, (str, os.PathLike)):
        with contextlib.suppress(Exception):  # a path-like whose __fspath__ fails: refused
            path = os.fspath(value)
    if isinstance(path, str) and "\0" not in path and path:
        path = str.__str__(path)  # a plain str: a subclass's methods may be anything
        try:
            os.fsencode(path)
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                f"{name} contains {path[e.start : e.end]!r}, which the file system cannot "
                f"encode: {shown(value)}"
            ) from None
        return path
    raise InvalidArgumentError(
        f"{name} must be a non-empty path (str or os.PathLike), got {shown(value)}"
    )


def lite_agent_home(home: str | os.PathLike[str] | None = None) -> Path:
    """Return the home folder, absolute: ``home`` if given, else ``$LITE_AGENT_HOME``, else
    ``~/.lite-agent``."""
    try:
        if home is not None:
            return _absolute(Path(check_path("home", home)).expanduser())
        env = os.environ.get("LITE_AGENT_HOME")
        if env:
            return _absolute(Path(env).expanduser())
        return _absolute(Path.home() / ".lite-agent")
    except (RuntimeError, KeyError) as e:  # "~nobody/x", or no home folder to be found
        where = "home" if home is not None else "$LITE_AGENT_HOME" if env else "the home folder"
        raise InvalidArgumentError(f"{where}: cannot find the user's home folder ({e})") from e


def _absolute(path: Path) -> Path:
    """``path`` against the current folder: a later change of folder must not move the store."""
    return Path(os.path.abspath(path))


def project_hash(workdir: str | os.PathLike[str] = ".") -> str:
    """Return a stable 16-hex-digit hash of the workspace's real path (symlinks resolved)."""
    real = os.path.realpath(check_path("workdir", workdir))
    return hashlib.sha256(os.fsencode(real)).hexdigest()[:16]


def project_dir(
    workdir: str | os.PathLike[str] = ".", home: str | os.PathLike[str] | None = None
) -> Path:
    """Return ``<home>/projects/<project-hash>``, the folder of one workspace's sessions and
    blobs. Nothing is created."""
    return lite_agent_home(home) / "projects" / project_hash(workdir)
