"""Small file-system helpers shared by the file backend and the file blob store."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "write_all"]


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    n = os.write(fd, data)
    if n == len(data):
        return
    view = memoryview(data)[n:]
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(path: Path | str) -> None:
    """fsync a folder, so that a rename or a new file in it survives power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
