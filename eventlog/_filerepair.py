"""Salvaging a damaged file-backend log (``Checkpointer.repair``).

The readable prefix (whole, checksummed frames continuing the seqs from 1) is kept; everything
after it is moved to a quarantine file beside the log, ``<sid>.log.quarantine-<UTC time>``, which
is never deleted and never taken for a session (the listing only matches ``<sid>.log``). The log
is then rewritten from the kept frames under a new generation: temp file, fsync, rename over the
log, fsync of the folder (the quarantine file is made durable first, so a crash between the two
steps leaves the old log and, at worst, a second copy of the damaged bytes).

A damaged file header (or a file shorter than one) hides everything: the whole file is
quarantined and the session restarts empty, with a fresh header and a new generation, so a
writer that still expects the old history conflicts instead of appending to the new one. A
header of a newer format is never touched (:class:`SchemaVersionError`).

The lost seqs are learnt from the quarantined bytes: every frame whose header is intact (it
carries its own check) says which seqs it held, even when its payload is damaged. When some of
those bytes are explained by no frame, or no frame in them goes past the kept seqs, how far the
log went is unknown and the lost range ends with ``None``.
"""

from __future__ import annotations

import os
import struct
import time
from typing import NamedTuple

import xxhash

from ._codec import Codec
from ._decodecheck import wrong_codec
from ._errors import CodecError, SchemaVersionError
from ._filerewrite import new_generation, rewrite_log
from ._filescan import verify_frames
from ._frames import (
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    FRAME_HEAD_SIZE,
    FRAME_OVERHEAD,
    parse_header,
)
from ._fsutil import fsync_dir, write_all

__all__ = ["QUARANTINE_INFIX", "Salvage", "assess_log", "salvage_log", "survey"]

QUARANTINE_INFIX = ".quarantine-"
"""Quarantine files are named ``<session_id>.log`` + this + a UTC time stamp."""

_PREFIX = struct.Struct("<IQIIQ")
_xxh32 = xxhash.xxh32_intdigest
_MAX_SEQ = (1 << 63) - 1


class Salvage(NamedTuple):
    """What :func:`assess_log` found: the readable prefix and what lies after it."""

    kept_end: int
    kept_head: int
    header_ok: bool
    lost: tuple[tuple[int, int | None], ...]
    detail: str

    @property
    def healthy(self) -> bool:
        """Nothing to repair."""
        return self.header_ok and not self.detail


def survey(data: bytes, head: int) -> tuple[int, bool]:
    """Return ``(the highest seq the intact frame headers at the start of data claim (at least
    head), whether some bytes are explained by no frame)``. It stops at the first such byte:
    from there on how far the log went is unknown whatever follows (a scan of every later
    offset took a second per megabyte of garbage for nothing)."""
    pos, last, n = 0, head, len(data)
    while pos < n:
        if n - pos >= FRAME_HEAD_SIZE:
            length, first, count, hcrc, _ = _PREFIX.unpack_from(data, pos)
            if count and hcrc == _xxh32(data[pos : pos + 16]):
                last = max(last, min(first + count - 1, _MAX_SEQ))
                pos += FRAME_OVERHEAD + length
                continue
        return last, True
    return last, False


def _lost(head: int, data: bytes) -> tuple[tuple[int, int | None], ...]:
    if not data:
        return ()
    last, unexplained = survey(data, head)
    # Bytes no frame explains, or frames that only repeat kept seqs (a tail overwritten by a
    # copy), hide how far the log went.
    return ((head + 1, None if unexplained or last == head else last),)


def assess_log(fd: int, size: int, codec: Codec | None = None, session_id: str = "") -> Salvage:
    """Find the readable prefix of the log open as ``fd`` (``size`` bytes) and what was lost
    after it; a frame whose header count disagrees with the records in its payload (after
    ``codec``), or whose events do not decode after frames that did, ends the prefix like any
    damage. Raises :class:`SchemaVersionError` for a log of a newer format and
    :class:`CodecError` when the first frame does not decode (a wrong codec: nothing to cut)."""
    if size == 0:
        return Salvage(0, 0, True, (), "")
    hdr = parse_header(os.pread(fd, FILE_HEADER_SIZE, 0)) if size >= FILE_HEADER_SIZE else None
    if hdr is not None and hdr.version > FORMAT_VERSION:
        raise SchemaVersionError(
            f"the log was written in format {hdr.version}; this liteagent reads up to "
            f"{FORMAT_VERSION} and does not repair it: upgrade liteagent"
        )
    odd = hdr is not None and hdr.version < FORMAT_VERSION  # none wrote it: damage, as reads say
    if hdr is None or odd:
        rest = b""
        if size > FILE_HEADER_SIZE:
            rest = os.pread(fd, size - FILE_HEADER_SIZE, FILE_HEADER_SIZE)
        lost = _lost(0, rest) if rest else ((1, None),)
        what = (
            "the file is shorter than its header"
            if size < FILE_HEADER_SIZE
            else "the file header is damaged"
            if hdr is None
            else f"the file header names log format {hdr.version}, which none wrote"
        )
        return Salvage(0, 0, False, lost, f"{what}: the whole file was quarantined")
    try:
        end, head, damage = verify_frames(
            fd, FILE_HEADER_SIZE, 0, size, counts=True, codec=codec, decodes=session_id
        )
    except CodecError as e:
        raise wrong_codec(session_id, e) from e
    if damage is None:
        return Salvage(end, head, True, (), "")
    what = "an unfinished last write" if damage.torn else damage.reason
    detail = f"{what} at byte {end}: bytes {end}..{size} were quarantined"
    return Salvage(end, head, True, _lost(head, os.pread(fd, size - end, end)), detail)


def _quarantine(fd: int, start: int, size: int, log_path: str) -> str:
    """Copy bytes ``start..size`` of ``fd`` to a new quarantine file; fsync it and its folder."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = log_path + QUARANTINE_INFIX + stamp
    for n in range(1, 10_000):
        path = base if n == 1 else f"{base}-{n}"
        try:
            qfd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            continue
        try:
            pos = start
            while pos < size:
                chunk = os.pread(fd, min(1 << 20, size - pos), pos)
                if not chunk:
                    break
                write_all(qfd, chunk)
                pos += len(chunk)
            os.fsync(qfd)
        finally:
            os.close(qfd)
        fsync_dir(os.path.dirname(path) or ".")
        return path
    raise FileExistsError(f"too many quarantine files named {base}*")


def salvage_log(
    fd: int,
    size: int,
    found: Salvage,
    *,
    paths: tuple[str, str, str],
    session_id: str,
    codec: Codec | None,
) -> tuple[int, int, int, str]:
    """Quarantine what ``found`` cannot keep and rewrite the log from the kept frames under a
    new generation. ``paths`` are the log, its temp file and their folder. Returns the new
    log's fd (read-write, append), its size, its generation and the quarantine file's path.
    The caller holds the log's exclusive lock."""
    start = found.kept_end if found.header_ok else 0
    quarantine = _quarantine(fd, start, size, paths[0])
    generation = new_generation()
    kept_end = found.kept_end if found.header_ok else FILE_HEADER_SIZE
    new_fd, new_size = rewrite_log(
        fd,
        kept_end,
        found.kept_head,
        generation,
        paths=paths,
        session_id=session_id,
        codec=codec,
    )
    return new_fd, new_size, generation, quarantine
