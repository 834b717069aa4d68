"""Truncating a file-backend log: write the kept history to a temp file, fsync it, rename it
over the log and fsync the folder, so a crash leaves either the old log or the new one."""

from __future__ import annotations

import contextlib
import os
import secrets

from ._codec import Codec
from ._errors import CorruptLogError
from ._frames import (
    FILE_HEADER_SIZE,
    Damage,
    Frame,
    FrameScanner,
    build_frame,
    build_header,
    decode_payload,
    encode_records,
)
from ._fsutil import fsync_dir, write_all

__all__ = ["new_generation", "rewrite_log", "unlink_quietly"]

_COPY_CHUNK = 1 << 20


def new_generation() -> int:
    """A fresh random generation (63 bits, never 0): practically never reused."""
    return secrets.randbits(63) | 1


def unlink_quietly(path: str) -> None:
    """Remove ``path`` if it exists; ignore failures (used for temp files)."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def rewrite_log(
    fd: int,
    size: int,
    to_seq: int,
    generation: int,
    *,
    paths: tuple[str, str, str],
    session_id: str,
    codec: Codec | None,
) -> tuple[int, int]:
    """Replace the log open as ``fd`` (``size`` bytes of whole frames) by its events up to
    ``to_seq`` under a new ``generation``. ``paths`` are the log, its temp file and their
    folder. Returns the new file's fd (read-write, append) and size. The caller holds the log's
    exclusive lock; on any error the log is unchanged and the temp file removed."""
    log_path, tmp, folder = paths
    keep_end, partial = FILE_HEADER_SIZE, None
    for item in FrameScanner(fd, FILE_HEADER_SIZE, size):
        if isinstance(item, Damage):
            raise CorruptLogError(session_id, None, item.reason)
        if item.last_seq <= to_seq:
            keep_end = item.end
            continue
        if item.first_seq <= to_seq:
            partial = item
        break
    tail = b"" if partial is None else _split(partial, to_seq, session_id, codec)
    unlink_quietly(tmp)  # a leftover, or a symlink planted there: made anew, never followed
    tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            write_all(tfd, build_header(generation))
            pos = FILE_HEADER_SIZE
            while pos < keep_end:
                chunk = os.pread(fd, min(_COPY_CHUNK, keep_end - pos), pos)
                write_all(tfd, chunk)
                pos += len(chunk)
            write_all(tfd, tail)
            os.fsync(tfd)
        finally:
            os.close(tfd)
        new_fd = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        unlink_quietly(tmp)
        raise
    try:
        os.replace(tmp, log_path)
    except BaseException:
        os.close(new_fd)
        unlink_quietly(tmp)
        raise
    fsync_dir(folder)
    return new_fd, keep_end + len(tail)


def _split(frame: Frame, to_seq: int, session_id: str, codec: Codec | None) -> bytes:
    """The first events of ``frame``, up to ``to_seq``, as a frame of their own."""
    records = decode_payload(frame.payload, codec, session_id, frame.first_seq)
    kept = records[: to_seq - frame.first_seq + 1]
    return build_frame(encode_records(kept, codec), frame.first_seq, len(kept))
