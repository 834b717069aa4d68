"""A small tmpfs mounted for a test: a real file system that fills up (needs root and mount(8);
the test is skipped, with the reason, where it cannot mount one)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["grow", "small_tmpfs"]


@contextmanager
def small_tmpfs(point: Path, size_kib: int) -> Iterator[Path]:
    """Mount a ``size_kib`` KiB tmpfs on the new folder ``point``; unmount it afterwards."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    point.mkdir()
    if os.geteuid() != 0 or mount is None or umount is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace')}")
    try:
        yield point
    finally:
        subprocess.run([umount, "-l", str(point)], check=True)


def grow(point: Path, size_kib: int) -> None:
    """Give the tmpfs mounted on ``point`` room again: resize it to ``size_kib`` KiB."""
    mount = shutil.which("mount")
    assert mount is not None  # small_tmpfs mounted it
    subprocess.run(
        [mount, "-o", f"remount,size={size_kib}k", str(point)], check=True, capture_output=True
    )
