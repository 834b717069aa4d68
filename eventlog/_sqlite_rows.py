"""Checksums and checks of the SQLite store's rows (schema 2).

An event row's checksum covers everything a reader gets from it: ``(session_id, seq, ts, kind,
body)``. A sessions row's checksum covers ``(id, head, generation)``. Both are xxh3-64 masked to
63 bits (SQLite integers are signed).

The checks run on rows exactly as apsw returns them, whatever their types: a column whose type
was changed, a text that is not valid UTF-8 (see :func:`fetch_page`) or a NULL is damage named
by its seq (:class:`CorruptLogError`), never a ``TypeError`` or ``UnicodeDecodeError``.
"""

from __future__ import annotations

import struct
import threading
from typing import Any, cast

import apsw
import xxhash

from ._errors import CorruptLogError

__all__ = [
    "MAX_VERIFIED",
    "BadText",
    "Row",
    "Seeds",
    "Verified",
    "check_rows",
    "corrupt",
    "decode_raw",
    "fetch_page",
    "fetch_session_row",
    "next_generation",
    "pack_head_gen",
    "raw_select",
    "row_crc",
    "row_problem",
    "session_crc",
    "session_row_problem",
]

_MASK = (1 << 63) - 1

_xxh = xxhash.xxh3_64_intdigest
_pack_seq_ts = struct.Struct("<qd").pack
_pack_head_gen = struct.Struct("<qq").pack
_SESSION_SEED = _xxh(b"liteagent session row")

# Row shape of every event query: (seq, ts, kind, body, crc).
Row = tuple[Any, Any, Any, Any, Any]


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class BadText:
    """A stored TEXT value that is not valid UTF-8 (so no column type check accepts it)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def __repr__(self) -> str:
        return f"<text that is not UTF-8: {self.raw[:32]!r}>"


_NO_SEED = 0


class Seeds(dict[object, int]):
    """One session's checksum seeds by kind: ``seeds[kind]`` hashes ``session_id \\0 kind``
    once per kind. A kind that is not a str (a damaged row) gets a seed of its own."""

    __slots__ = ("_prefix", "session_seed")

    def __init__(self, session_id: str) -> None:
        super().__init__()
        sid = _utf8(session_id)
        self._prefix = sid + b"\x00"
        self.session_seed = _xxh(sid, _SESSION_SEED)  # see session_crc

    def __missing__(self, kind: object) -> int:
        if type(kind) is not str:
            # A damaged row: no checksum matches it (row_problem names the wrong type).
            return _NO_SEED
        seed = self[kind] = _xxh(self._prefix + _utf8(kind))
        return seed


def row_crc(seed: int, seq: int, ts: float, body: bytes) -> int:
    """The checksum of one event row (``seed`` from :class:`Seeds` covers session and kind)."""
    return _xxh(body, _xxh(_pack_seq_ts(seq, ts), seed)) & _MASK


def session_crc(session_id: str, head: int, generation: int) -> int:
    """The checksum of a sessions row."""
    return _xxh(_pack_head_gen(head, generation), _xxh(_utf8(session_id), _SESSION_SEED)) & _MASK


pack_head_gen = _pack_head_gen
"""``struct.pack("<qq", head, generation)``: ``session_crc`` is ``xxh3(pack_head_gen(head,
generation), seed=Seeds(session_id).session_seed)`` masked to 63 bits."""


_TYPES = (
    ("seq", int, "INTEGER"),
    ("ts", float, "REAL"),
    ("kind", str, "TEXT"),
    ("body", bytes, "BLOB"),
    ("crc", int, "INTEGER"),
)


def _type_name(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, BadText):
        return "TEXT that is not valid UTF-8"
    return {int: "INTEGER", float: "REAL", str: "TEXT", bytes: "BLOB"}.get(
        type(value), type(value).__name__
    )


def row_problem(seeds: Seeds, row: Row, expected_seq: int) -> str | None:
    """Why ``row`` is not the valid event ``expected_seq`` of the session, or None if it is."""
    for value, (name, typ, sql) in zip(row, _TYPES, strict=True):
        if type(value) is not typ:
            return f"column {name} holds {_type_name(value)}, not {sql}"
    seq, ts, kind, body, crc = row
    if seq != expected_seq:
        return f"expected seq {expected_seq}, the next stored seq is {seq}"
    if row_crc(seeds[kind], seq, ts, body) != crc:
        return "the event's checksum does not match"
    return None


def session_row_problem(session_id: str, row: tuple[Any, Any, Any]) -> str | None:
    """Why the sessions row ``(head, generation, crc)`` is damaged, or None."""
    for value, name in zip(row, ("head", "generation", "crc"), strict=True):
        if type(value) is not int:
            return f"the session record's {name} holds {_type_name(value)}, not INTEGER"
    head, generation, crc = row
    if not (0 <= head < 1 << 63 and 0 <= generation < 1 << 63):
        return f"the session record holds head {head}, generation {generation}"
    if session_crc(session_id, head, generation) != crc:
        return "the session record's checksum does not match"
    return None


# -- fetching rows whatever their types ------------------------------------------------------------


def raw_select(columns: tuple[str, ...]) -> str:
    """The select list for ``columns`` such that a text that is not UTF-8 cannot raise: texts
    as blobs, each value followed by its SQLite type (see :func:`decode_raw`)."""
    return ", ".join(
        f"CASE typeof({c}) WHEN 'text' THEN CAST({c} AS BLOB) ELSE {c} END, typeof({c})"
        for c in columns
    )


def decode_raw(raw: tuple[Any, ...]) -> tuple[Any, ...]:
    """The values of a :func:`raw_select` row: texts decoded (:class:`BadText` where not UTF-8)."""
    out = []
    for i in range(0, len(raw), 2):
        value, typ = raw[i], raw[i + 1]
        if typ == "text":
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                value = BadText(bytes(value))
        out.append(value)
    return tuple(out)


_PAGE = (
    "SELECT seq, ts, kind, body, crc FROM events "
    "WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)
_PAGE_RAW = (
    f"SELECT {raw_select(('seq', 'ts', 'kind', 'body', 'crc'))} FROM events "  # noqa: S608
    "WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)
_SESSION = "SELECT head, generation, crc FROM sessions WHERE id = ?"
_SESSION_RAW = (
    f"SELECT {raw_select(('head', 'generation', 'crc'))} "  # noqa: S608
    "FROM sessions WHERE id = ?"
)


def fetch_page(conn: apsw.Connection, session_id: str, after: int, limit: int) -> list[Row]:
    """Up to ``limit`` event rows of the session with ``seq > after``, in seq order; a text
    that is not valid UTF-8 comes back as :class:`BadText` instead of raising."""
    try:
        return cast(list[Row], conn.execute(_PAGE, (session_id, after, limit)).fetchall())
    except UnicodeDecodeError:
        rows = conn.execute(_PAGE_RAW, (session_id, after, limit)).fetchall()
        return [cast(Row, decode_raw(r)) for r in rows]


def fetch_session_row(
    conn: apsw.Connection | apsw.Cursor, session_id: str
) -> tuple[Any, Any, Any] | None:
    """The session's ``(head, generation, crc)`` as stored (see :func:`fetch_page`). Every
    row is fetched, so the statement is finished: on a cursor that is used again, a statement
    left open would keep a read snapshot that the next write transaction could not upgrade."""
    try:
        rows = conn.execute(_SESSION, (session_id,)).fetchall()
    except UnicodeDecodeError:
        rows = [decode_raw(r) for r in conn.execute(_SESSION_RAW, (session_id,)).fetchall()]
    return cast("tuple[Any, Any, Any]", rows[0]) if rows else None


def check_rows(
    session_id: str, seeds: Seeds, rows: list[Row], first: int, head: int, *, complete: bool
) -> None:
    """Check that ``rows`` (fetched with ``seq >= first``, at most ``head - first + 2``) are the
    valid events ``first..head``: types, checksums, consecutive seqs, and (``complete``) no
    row after ``head``. Raise :class:`CorruptLogError` naming the first seq that is not."""
    expect = first
    for row in rows:
        if expect > head:
            if complete:
                raise corrupt(
                    session_id, expect, f"a row is stored after the session's recorded head {head}"
                )
            return
        problem = _fast_problem(seeds, row, expect)
        if problem:
            raise corrupt(
                session_id, expect, row_problem(seeds, row, expect) or "the row does not verify"
            )
        expect += 1
    if expect <= head:
        raise corrupt(
            session_id,
            expect,
            f"the session records head {head}; its stored rows end at seq {expect - 1}",
        )


def _fast_problem(seeds: Seeds, row: Row, expect: int) -> bool:
    seq, ts, kind, body, crc = row
    try:
        return not (seq == expect and crc == row_crc(seeds[kind], seq, ts, body))
    except (TypeError, struct.error, OverflowError):
        return True


def next_generation(conn: apsw.Connection) -> int:
    """Take the next generation number (never reused)."""
    rows = conn.execute(
        "UPDATE meta SET value = value + 1 WHERE key = 'next_generation' RETURNING value - 1"
    ).fetchall()
    value = rows[0][0] if rows else None
    if type(value) is not int:
        raise corrupt(None, None, f"the store's generation counter is damaged ({value!r})")
    return value


def corrupt(session_id: str | None, seq: int | None, detail: str) -> CorruptLogError:
    """A :class:`CorruptLogError` (shorthand)."""
    return CorruptLogError(session_id, seq, detail)


# -- what this process has verified ----------------------------------------------------------------


MAX_VERIFIED = 65_536
"""Sessions whose verified prefix a process remembers; beyond that the least recently written
or verified are forgotten (their next append verifies their rows again), so a daemon that goes
through millions of sessions keeps a bounded memory."""


class Verified:
    """How far this process has verified each session: ``(generation, head)`` such that rows
    ``1..head`` of that generation were read back whole (types, checksums, consecutive seqs).

    An append needs only the rows after that verified: nothing is ever acknowledged onto a log
    that a read cannot pass (damage this process has not read is found on the next append).
    Generations only grow, so a larger ``(generation, head)`` is always the newer knowledge.
    At most :data:`MAX_VERIFIED` sessions are remembered (forgetting one only costs a read).
    """

    def __init__(self) -> None:
        self._heads: dict[str, tuple[int, int]] = {}
        self.heads = self._heads  # read without the lock on the append path
        self._rows: dict[str, tuple[int, int, int]] = {}  # sessions rows this process wrote
        self.rows = self._rows
        self._seeds: dict[str, Seeds] = {}
        self._lock = threading.Lock()
        # PRAGMA data_version of the writer when a repair last found SQLite's own structures
        # of the tables whole (checked again once another process has committed)
        self.checked_version: int | None = None

    def seeds(self, session_id: str) -> Seeds:
        """The session's checksum seeds (kept for the sessions this process writes)."""
        seeds = self._seeds.get(session_id)
        if seeds is None:
            if len(self._seeds) >= 4096:
                self._seeds.clear()
            seeds = self._seeds[session_id] = Seeds(session_id)
        return seeds

    def written(self, session_id: str) -> tuple[int, int, int] | None:
        """The sessions row ``(head, generation, crc)`` this process last committed: a row
        read back equal to it needs no checksum computed."""
        return self._rows.get(session_id)

    def get(self, session_id: str) -> tuple[int, int] | None:
        """The verified ``(generation, head)`` of the session, or None."""
        return self._heads.get(session_id)

    def set(self, session_id: str, generation: int, head: int) -> None:
        """Record that rows ``1..head`` of ``generation`` verified (keeps newer knowledge)."""
        with self._lock:
            old = self._heads.get(session_id)
            if old is None or (generation, head) > old:
                self._remember(session_id, (generation, head))

    def extend(self, session_id: str, generation: int, since: int, head: int) -> None:
        """Record that rows ``since+1..head`` of ``generation`` verified: this extends the
        verified prefix when it reaches ``since``."""
        if since == 0:
            self.set(session_id, generation, head)
            return
        with self._lock:
            old = self._heads.get(session_id)
            if old is not None and old[0] == generation and old[1] >= since and head > old[1]:
                self._remember(session_id, (generation, head))

    def replace(self, session_id: str, generation: int, head: int, crc: int | None = None) -> None:
        """Record the state a write of this process just committed (``crc``: of the sessions
        row it wrote). Without the lock: only the writer calls it, and a reader's concurrent
        :meth:`set` can at worst leave older knowledge (more to verify later, never less)."""
        self._remember(session_id, (generation, head))
        if crc is None:
            self._rows.pop(session_id, None)
        else:
            self._rows[session_id] = (head, generation, crc)

    def _remember(self, session_id: str, known: tuple[int, int]) -> None:
        """Record ``known`` as the session's newest entry, forgetting the oldest sessions
        beyond :data:`MAX_VERIFIED` (pops only: safe beside the writer's lock-free calls)."""
        self._heads.pop(session_id, None)
        self._heads[session_id] = known
        while len(self._heads) > MAX_VERIFIED:
            try:
                oldest = next(iter(self._heads))
            except (StopIteration, RuntimeError):  # emptied or changed meanwhile: next time
                return
            self._heads.pop(oldest, None)
            self._rows.pop(oldest, None)

    def forget(self, session_id: str) -> None:
        """Forget the session (deleted, or found damaged)."""
        with self._lock:
            self._heads.pop(session_id, None)
            self._rows.pop(session_id, None)
