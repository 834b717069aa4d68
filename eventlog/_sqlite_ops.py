"""The writes of the SQLite checkpointer, as run by its writer (see ``_sqlite_writer``).

Each checks, inside the write transaction, the session's record (its checksum) and the caller's
expectations, and makes sure every row it builds on was verified by this process: nothing is
ever acknowledged onto a log that a read cannot pass.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import apsw
import xxhash

from ._contract import EncodedEvent, check_position
from ._errors import CheckpointerError, TruncateRangeError
from ._sqlite_batch import Batch, WriteOp
from ._sqlite_rows import (
    Seeds,
    Verified,
    check_rows,
    corrupt,
    fetch_page,
    fetch_session_row,
    next_generation,
    pack_head_gen,
    session_crc,
    session_row_problem,
)

__all__ = [
    "Append",
    "Fence",
    "NeedsScan",
    "delete_op",
    "session_position",
    "truncate_op",
    "verify_tail",
]

_INLINE_VERIFY = 2000  # rows an append verifies inside its transaction; more: before it
_CRC_MASK = (1 << 63) - 1
_xxh = xxhash.xxh3_64_intdigest
_pack = struct.Struct("<qd").pack
_INSERT = "INSERT INTO events(session_id, seq, ts, kind, body, crc) VALUES (?, ?, ?, ?, ?, ?)"


Fence = Callable[[apsw.Cursor], None]
"""A check run first inside a write: raises (nothing written) when the write's lease is no
longer held (see ``_sqlite_lease``)."""


class NeedsScan(CheckpointerError):  # noqa: N818 -- a signal, not an error
    """Raised inside a write (and caught by the checkpointer, never seen by callers) when
    more rows than this process has verified would have to be checked inside the write
    transaction: the checkpointer verifies them first, outside it, and tries again."""


def session_position(conn: apsw.Connection, session_id: str) -> tuple[int, int, bool]:
    """``(head, generation, exists)`` from the sessions row, checked."""
    row = fetch_session_row(conn, session_id)
    if row is None:
        return 0, 0, False
    problem = session_row_problem(session_id, row)
    if problem is not None:
        raise corrupt(session_id, None, problem)
    return int(row[0]), int(row[1]), True


def verify_tail(
    conn: apsw.Connection,
    session_id: str,
    verified: Verified,
    generation: int,
    head: int,
    *,
    limit: int | None,
) -> None:
    """Check, inside a write, the rows this process has not verified yet: the session's rows
    must be the valid events ``1..head`` and nothing after ``head``."""
    known = verified.get(session_id)
    if known == (generation, head):
        return  # the common case: this process wrote or read up to the head
    after = known[1] if known is not None and known[0] == generation and known[1] <= head else 0
    if limit is not None and head - after > limit:
        raise NeedsScan
    rows = fetch_page(conn, session_id, after, head - after + 1)
    check_rows(session_id, Seeds(session_id), rows, after + 1, head, complete=True)


class Append:
    """The write of one append (see :class:`Writer`): batch-aware, it reads and records its
    session's position through the :class:`Batch` (one INSERT statement per append)."""

    __slots__ = ("batch", "batched_session", "expected", "fence", "limit", "ts", "verified")

    def __init__(
        self,
        session_id: str,
        batch: list[EncodedEvent],
        ts: float,
        expected: tuple[int | None, int | None],
        verified: Verified,
        *,
        fence: Fence | None = None,
    ) -> None:
        self.batched_session = session_id
        self.batch = batch
        self.ts = ts
        self.expected = expected
        self.verified = verified
        self.fence = fence
        self.limit: int | None = _INLINE_VERIFY

    def __call__(self, conn: apsw.Connection, tx: Batch) -> int:
        # The hot path of every append: written out flat (each call here costs).
        sid = self.batched_session
        if self.fence is not None:
            self.fence(tx.cur)
        verified = self.verified
        pending = tx.pending.get(sid)
        if pending is not None:  # an earlier append of this batch: checked, not yet stored
            head, gen = pending[0], pending[1]
            exists = checked = True
        else:
            rows = tx.rows
            if sid in rows:
                row = rows[sid]
            else:
                row = rows[sid] = fetch_session_row(tx.cur, sid)
            if row is None:
                head = gen = 0
                exists = False
            else:
                if row != verified.rows.get(sid):  # not the row this process wrote last
                    problem = session_row_problem(sid, row)
                    if problem is not None:
                        raise corrupt(sid, None, problem)
                head, gen = row[0], row[1]
                exists = True
            checked = verified.heads.get(sid) == (gen, head)
        expected_head, expected_generation = self.expected
        if (expected_head is not None and expected_head != head) or (
            expected_generation is not None and expected_generation != gen
        ):
            check_position(sid, head, gen, expected_head, expected_generation)
        if not checked:
            verify_tail(conn, sid, verified, gen, head, limit=self.limit)
        batch = self.batch
        if not batch:
            return head
        ts = self.ts
        seeds = verified.seeds(sid)
        if tx.defer:  # written by the batch's flush, with the other appends' rows
            tx.inserts += [
                (
                    sid,
                    seq,
                    ts,
                    kind,
                    body,
                    _xxh(body, _xxh(_pack(seq, ts), seeds[kind])) & _CRC_MASK,
                )
                for seq, (kind, body) in enumerate(batch, start=head + 1)
            ]
        else:
            self._insert(tx.cur, head, seeds)
        new_head = head + len(batch)
        if not exists:
            gen = next_generation(conn)
        crc = _xxh(pack_head_gen(new_head, gen), seeds.session_seed) & _CRC_MASK
        tx.pending[sid] = (new_head, gen, ts, crc, exists if pending is None else pending[4])
        tx.hooks.append(lambda: verified.replace(sid, gen, new_head, crc))
        return new_head

    def _insert(self, conn: apsw.Cursor, head: int, seeds: Seeds) -> None:
        sid, batch, ts = self.batched_session, self.batch, self.ts
        try:
            if len(batch) == 1:
                kind, body = batch[0]
                conn.execute(
                    _INSERT,
                    (
                        sid,
                        head + 1,
                        ts,
                        kind,
                        body,
                        _xxh(body, _xxh(_pack(head + 1, ts), seeds[kind])) & _CRC_MASK,
                    ),
                )
            else:
                conn.executemany(
                    _INSERT,
                    [
                        (
                            sid,
                            seq,
                            ts,
                            kind,
                            body,
                            _xxh(body, _xxh(_pack(seq, ts), seeds[kind])) & _CRC_MASK,
                        )
                        for seq, (kind, body) in enumerate(batch, start=head + 1)
                    ],
                )
        except apsw.ConstraintError as e:
            raise corrupt(
                sid, head + 1, f"rows are stored after the session's recorded head {head} ({e})"
            ) from e


def truncate_op(
    session_id: str,
    to_seq: int,
    expected: tuple[int | None, int | None],
    verified: Verified,
    *,
    fence: Fence | None = None,
) -> WriteOp:
    def op(conn: apsw.Connection, tx: Batch) -> int:
        if fence is not None:
            fence(tx.cur)
        head, gen, exists = session_position(conn, session_id)
        check_position(session_id, head, gen, *expected)
        if not 0 <= to_seq <= head:
            raise TruncateRangeError(session_id, to_seq, head)
        if not exists:
            return 0
        # The rows kept must read back; the ones dropped may be damaged (truncating them
        # away is a way out of damage).
        known = verified.get(session_id)
        after = known[1] if known is not None and known[0] == gen and known[1] <= head else 0
        if after < to_seq:
            rows = fetch_page(conn, session_id, after, to_seq - after)
            check_rows(session_id, Seeds(session_id), rows, after + 1, to_seq, complete=False)
        conn.execute("DELETE FROM events WHERE session_id = ? AND seq > ?", (session_id, to_seq))
        new_gen = next_generation(conn)
        conn.execute(
            "UPDATE sessions SET head = ?, generation = ?, mtime = ?, crc = ? WHERE id = ?",
            (to_seq, new_gen, time.time(), session_crc(session_id, to_seq, new_gen), session_id),
        )
        tx.after_commit(lambda: verified.replace(session_id, new_gen, to_seq))
        return to_seq

    return op


def delete_op(session_id: str, verified: Verified, *, fence: Fence | None = None) -> WriteOp:
    def op(conn: apsw.Connection, tx: Batch) -> None:
        if fence is not None:
            fence(tx.cur)
        conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        tx.after_commit(lambda: verified.forget(session_id))

    return op
