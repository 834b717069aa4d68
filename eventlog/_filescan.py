"""Reading the file backend's logs: the read loop, the tail search and the integrity scan.

Readers never hold a lock while their caller iterates: :func:`snapshot_size` takes a shared
``flock`` only for the instant it measures the file (a writer holds an exclusive one while it
writes a frame, so the measured size ends on a whole frame unless a crash tore the tail).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

from ._checkread import unknown_kinds
from ._codec import Codec
from ._contract import IntegrityProblem, decode_stored
from ._decodecheck import undecodable
from ._errors import CheckpointConflictError, CodecError, CorruptLogError, SchemaVersionError
from ._events import OpaqueEvent, StoredEvent
from ._frames import (
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    Damage,
    Frame,
    FrameScanner,
    HeaderInfo,
    decode_payload,
    parse_header,
    record_count,
)
from ._fsutil import open_regular

__all__ = ["Tail", "check_log", "read_header", "read_log", "snapshot_size", "verify_frames"]

_CHECK_EVERY = 1 << 20  # while reading, look for a replaced file after each MiB


def _count_damage(item: Frame, n: int | None) -> Damage | None:
    """Damage when the frame's header count disagrees with the records in its payload."""
    if n is None or n == item.n_events:
        return None
    return Damage(
        item.offset,
        False,
        f"a frame whose header counts {item.n_events} events but holds {n}",
    )


def read_header(fd: int, session_id: str) -> HeaderInfo:
    """Return the log's header; raise CorruptLogError or SchemaVersionError when it is not
    one this version can read."""
    hdr = parse_header(os.pread(fd, FILE_HEADER_SIZE, 0))
    if hdr is None:
        raise CorruptLogError(session_id, None, "the file header is damaged")
    if hdr.version > FORMAT_VERSION:
        raise SchemaVersionError(
            f"session {session_id!r} was written in log format {hdr.version}; this "
            f"liteagent reads up to {FORMAT_VERSION}: upgrade liteagent"
        )
    if hdr.version < FORMAT_VERSION:  # no release ever wrote another one: not ours
        raise CorruptLogError(
            session_id, None, f"the file header names log format {hdr.version}, which none wrote"
        )
    return hdr


def snapshot_size(fd: int, path: str, ino: int) -> int | None:
    """Return the committed size of the file under a brief shared lock, or None when the
    path no longer names this file (truncated or deleted since)."""
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        try:
            if os.stat(path).st_ino != ino:
                return None
        except FileNotFoundError:
            return None
        return os.fstat(fd).st_size
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def read_log(
    fd: int,
    path: str,
    session_id: str,
    since: int,
    *,
    codec: Codec | None,
    check_open: Callable[[], None],
    replaced: Callable[[int], CheckpointConflictError],
    tail: Tail | None = None,
    read_to: Callable[[Tail], None] | None = None,
) -> Iterator[StoredEvent] | None:
    """Return an iterator over the events of the open log ``fd`` after ``since``, or None when
    ``path`` no longer names that file (the caller opens the current one and retries).

    ``check_open`` raises when the checkpointer was closed; ``replaced(generation)`` builds the
    conflict raised when the file is truncated or deleted while the caller iterates.

    ``tail`` is where an earlier read of this file found a whole frame to end (see
    :class:`Tail`): a read after its seq starts there instead of walking every frame header
    from the start (a live tail reads each new event so). ``read_to`` is told where each
    frame read ends.
    """
    ino = os.fstat(fd).st_ino
    end = snapshot_size(fd, path, ino)
    if end is None:
        return None
    return _events(
        fd, path, ino, end, session_id, since, codec, check_open, replaced, tail, read_to
    )


class Tail(NamedTuple):
    """Where a whole frame of a log file ends: the file (inode, generation), the frame's last
    seq, and the offset just after it. A log is never changed in place before its end (a
    truncate or a repair writes a new file, with a new generation), so a later read of the
    same file may start there."""

    ino: int
    generation: int
    seq: int
    offset: int


def _events(  # noqa: PLR0917 -- the private body of read_log
    fd: int,
    path: str,
    ino: int,
    end: int,
    session_id: str,
    since: int,
    codec: Codec | None,
    check_open: Callable[[], None],
    replaced: Callable[[int], CheckpointConflictError],
    tail: Tail | None,
    read_to: Callable[[Tail], None] | None,
) -> Iterator[StoredEvent]:
    if end == 0:
        return
    if end < FILE_HEADER_SIZE:
        raise CorruptLogError(
            session_id, None, f"the file is shorter than its header ({end} bytes)"
        )
    generation = read_header(fd, session_id).generation
    expected, offset, checked = 1, FILE_HEADER_SIZE, FILE_HEADER_SIZE
    if (
        tail is not None
        and (tail.ino, tail.generation) == (ino, generation)
        and tail.seq <= since
        and FILE_HEADER_SIZE <= tail.offset <= end
    ):
        expected, offset, checked = tail.seq + 1, tail.offset, tail.offset
    while True:
        torn = False
        for item in FrameScanner(fd, offset, end, skip_through=since):
            if isinstance(item, Damage):
                if not item.torn:
                    raise CorruptLogError(session_id, expected, item.reason)
                torn = True
                break
            if item.first_seq != expected:
                raise CorruptLogError(
                    session_id, expected, f"a frame starts at seq {item.first_seq}"
                )
            expected = item.last_seq + 1
            offset = item.end
            if item.last_seq <= since:
                if read_to is not None:
                    read_to(Tail(ino, generation, item.last_seq, offset))
                continue
            if offset - checked >= _CHECK_EVERY:
                checked = offset
                check_open()
                if snapshot_size(fd, path, ino) is None:
                    raise replaced(generation)
            first = item.first_seq
            records = decode_payload(item.payload, codec, session_id, first)
            bad = _count_damage(item, len(records))
            if bad is not None:
                raise CorruptLogError(session_id, first, bad.reason)
            if read_to is not None:
                read_to(Tail(ino, generation, item.last_seq, offset))
            if first <= since:
                records = records[since - first + 1 :]
                first = since + 1
            yield from [
                decode_stored(session_id, first + i, rec.ts, rec.kind, rec.body)
                for i, rec in enumerate(records)
            ]
        check_open()
        new_end = snapshot_size(fd, path, ino)
        if new_end is None:
            raise replaced(generation)
        if new_end == end or (torn and new_end < offset):
            return
        end = new_end


def verify_frames(
    fd: int,
    start: int,
    head: int,
    size: int,
    *,
    counts: bool = False,
    codec: Codec | None = None,
    decodes: str | None = None,
) -> tuple[int, int, Damage | None]:
    """Verify the frames from ``start`` (where seq ``head + 1`` must begin) to ``size``: each
    whole, checksummed and continuing the seqs. Return ``(end of the last good frame, its last
    seq, the damage after it or None)``; a frame that does not continue the seqs (a repeated,
    swapped or dropped frame) is damage that is never torn.

    With ``counts`` each frame's header count is also checked against the records its payload
    (after ``codec``) holds; a mismatch is damage that is never torn.

    With ``decodes`` (the session id) each frame's events are also decoded: a frame whose
    events do not decode is damage when frames before it decoded with the same codec; in the
    first frame it raises :class:`CodecError` (a wrong codec, not damage)."""
    end = start
    for item in FrameScanner(fd, start, size):
        if isinstance(item, Damage):
            return end, head, item
        if item.first_seq != head + 1:
            return (
                end,
                head,
                Damage(
                    item.offset, False, f"a frame starts at seq {item.first_seq}, not {head + 1}"
                ),
            )
        if counts:
            bad = _count_damage(item, record_count(item.payload, codec))
            if bad is not None:
                return end, head, bad
        if decodes is not None:
            error = _frame_undecodable(item, codec, decodes)
            if error is not None:
                if item.first_seq == 1:
                    raise error
                reason = f"a frame whose events do not decode: {error}"
                return end, head, Damage(item.offset, False, reason)
        end, head = item.end, item.last_seq
    return end, head, None


def _frame_undecodable(item: Frame, codec: Codec | None, session_id: str) -> CodecError | None:
    """The error decoding the frame's events gives, or None when they all decode."""
    try:
        records = decode_payload(item.payload, codec, session_id, item.first_seq)
    except CodecError as e:
        return e
    for i, rec in enumerate(records):
        error = undecodable(None, session_id, (item.first_seq + i, rec.ts, rec.kind, rec.body))
        if error is not None:
            return error
    return None


def check_log(
    path: str, session_id: str, codec: Codec | None, problems: list[IntegrityProblem]
) -> int:
    """Verify one log's header, frames and events; append what is wrong to ``problems`` and
    return the number of events checked."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        end = snapshot_size(fd, path, os.fstat(fd).st_ino)
        if end is None or end < FILE_HEADER_SIZE:
            return 0
        try:
            read_header(fd, session_id)
        except CorruptLogError as e:
            problems.append(IntegrityProblem("corrupt", f"{e.detail} (needs repair)", session_id))
            return 0
        except SchemaVersionError as e:
            problems.append(IntegrityProblem("newer_format", str(e), session_id))
            return 0
        return _check_frames(fd, session_id, end, codec, problems)
    finally:
        os.close(fd)


def _check_frames(
    fd: int, session_id: str, end: int, codec: Codec | None, problems: list[IntegrityProblem]
) -> int:
    expected = 1
    unknown: set[str] = set()
    for item in FrameScanner(fd, FILE_HEADER_SIZE, end):
        if isinstance(item, Damage):
            kind = "torn_tail" if item.torn else "corrupt"
            what = "cut on the next write" if item.torn else "needs repair"
            problems.append(
                IntegrityProblem(
                    kind, f"{item.reason} at byte {item.offset} ({what})", session_id, expected
                )
            )
            break
        if item.first_seq != expected:
            problems.append(
                IntegrityProblem(
                    "gap", f"expected seq {expected}, found {item.first_seq}", session_id, expected
                )
            )
            break
        try:
            records = decode_payload(item.payload, codec, session_id, item.first_seq)
            bad = _count_damage(item, len(records))
            if bad is not None:
                problems.append(
                    IntegrityProblem(
                        "corrupt",
                        f"{bad.reason} at byte {bad.offset} (needs repair)",
                        session_id,
                        expected,
                    )
                )
                break
            for i, rec in enumerate(records):
                ev = decode_stored(session_id, item.first_seq + i, rec.ts, rec.kind, rec.body)
                if isinstance(ev.body, OpaqueEvent):
                    unknown.add(ev.kind)
        except CodecError as e:
            problems.append(IntegrityProblem("codec", str(e), session_id, e.seq))
            break
        expected = item.last_seq + 1
    if unknown:
        problems.append(unknown_kinds(session_id, unknown))
    return expected - 1
