"""The whole agent over a damaged store: seeded random runs build a store of many sessions with
real turns (the file tools writing files), restores, undos, forks and compactions, then damage
it behind the library's back, with the agent closed or (odd seeds) still running: bytes
flipped, cut or appended in a session's log or a SQLite row, a session record changed or
deleted, a snapshot blob deleted, corrupted, cut or replaced by a folder or FIFO, a log or blob
made unreadable, a folder or FIFO at a lease path, stale and junk lease rows, junk dropped into
the store (a whole database file damaged, now and then). Then every public agent API and the
``lite-agent`` commands run on damaged and undamaged sessions, on the file and SQLite
checkpointers, and ``doctor --repair`` at the end.

The properties:
- every call returns or raises a ``LiteAgentError`` with a message; never another exception,
  never a hang;
- an undamaged session (its log, its branches and every blob they reference untouched) stays
  fully usable, and nothing the calls on damaged sessions do (nor ``doctor``, with or without
  ``--repair``, nor a garbage collection) changes a byte of its stored events or loses a blob
  it references;
- damage is never silently turned into a shorter or different history: what the agent shows of
  a session (its checkpoints) is the history it had, or what the calls made of it, unless the
  damage only cut the end of a log (a torn tail, which the store cannot tell from an
  unfinished write: then a prefix); after ``doctor --repair`` a damaged session keeps exactly a
  prefix of its events, and one that doctor no longer reports takes a turn;
- a restore puts back exactly the content the log recorded (never a damaged snapshot's), and
  one that fails leaves the workspace as it was;
- each command exits 0 or 1 (``doctor`` reports with 1), and a failure is one line
  ``lite-agent: <reason>`` on stderr (with ``--json``, one ``{"error": {...}}`` document on
  stdout) in plain words, never a traceback.

``pytest -m soak tests/test_damage_mix.py`` runs 200 sessions per store and more seeds (about a
minute each).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import apsw
import msgspec
import pytest
from _cli_runner import Cli, CliServer, Result, two_prompts
from _restore_model import call, reply
from test_cli_contract import contract

from liteagent.actors import _restore_files
from liteagent.actors._restore_plan import plan_files
from liteagent.eventlog import (
    Checkpointer,
    StoredEvent,
    file_checkpointer,
    fold,
    project_dir,
    sqlite_checkpointer,
)
from liteagent.eventlog._branches import branch_prefix, is_branch_session
from liteagent.eventlog._gc import blob_refs
from liteagent.eventlog._liveness import started_self
from liteagent.eventlog.conformance import damage_file_log, prompts, texts
from liteagent.eventlog.conformance._damage_file import TAIL_LOSS
from liteagent.eventlog.conformance._damage_sqlite import _ROW_DAMAGE, _file_damage, _rows, _settle
from liteagent.eventlog.errors import LiteAgentError, StorageIOError
from liteagent.eventlog.types import ModelRequest
from liteagent.providers import scripted
from liteagent.sdk import (
    LiteAgent,
    NoBranchError,
    RestoreFailedError,
    RestoreRefusedError,
    create_lite_agent,
)
from liteagent.tools import delete_file, edit_file, read_file, write_file

pytestmark = pytest.mark.processes

T = TypeVar("T")
GUARD = 60.0  # seconds: a hang guard, never a performance bound
NAMES = ("a.txt", "b.txt", "c/d.txt", "c/e f.md")
#: What an undamaged session may refuse: the workspace moved on (a fork shares it), or nothing
#: to undo. Never a storage error.
USABLE_REFUSALS = (RestoreRefusedError, NoBranchError)


#: How a call ended: whether it returned, its result or error, and what an undamaged session
#: may refuse with.
Outcome = tuple[bool, Any, tuple[type[BaseException], ...]]
_SESSION_COLUMNS = ("id", "head", "generation", "mtime", "crc")
_EVENT_COLUMNS = ("session_id", "seq", "ts", "kind", "body", "crc")


def _finishes(what: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a thread; fail if it is still running after :data:`GUARD` (a hang),
    else return its result or raise what it raised."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["r"] = fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            out["e"] = e

    t = threading.Thread(target=run, daemon=True, name=f"damage-mix {what}")
    t.start()
    t.join(GUARD)
    assert not t.is_alive(), f"hung: {what}"
    if "e" in out:
        raise out["e"]
    return out["r"]  # type: ignore[no-any-return]


def _events(events: Iterator[StoredEvent]) -> list[tuple[int, float, str, bytes]]:
    """Events as comparable tuples (the body in its stored msgpack form)."""
    enc = msgspec.msgpack.encode
    return [(e.seq, e.ts, e.kind, enc(e.body)) for e in events]


@dataclass
class Damage:
    """What was done to the store."""

    what: str
    sessions: set[str] = field(default_factory=set)  # main sessions it damaged
    tail_loss: bool = False  # only the end of a log was cut: a prefix may be read
    whole_store: bool = False  # every session may be damaged


class Mix:
    """One seeded run (see the module docstring)."""

    def __init__(self, seed: int, kind: str, tmp: Path, sessions: int) -> None:
        self.seed = seed
        self.live = seed % 2 == 1  # damage behind the back of the agent that built the store
        self.rng = random.Random(seed)
        self.kind = kind
        self.tmp = tmp
        self.work = tmp / "work"
        self.home = tmp / "home"
        self.work.mkdir()
        self.db = tmp / "store" / "sessions.db"
        self.n_sessions = sessions
        self.queue: collections.deque[Any] = collections.deque()
        self.prompts = 0
        self.denied: set[str] = set()  # file names whose open is refused (a simulated chmod 000)
        self.unexpected: list[str] = []
        self.damages: list[Damage] = []
        self.stats: collections.Counter[str] = collections.Counter()
        # the model of what the agent shows of each main session: its checkpoint lists so far
        self.known: dict[str, list[list[tuple[int, str]]]] = {}
        self.deleted: set[str] = set()
        self.written: set[str] = set()  # sessions a call of phase 3 changed
        self.observed: set[str] = set()  # sessions whose checkpoints phase 3 has read
        self.tried: set[str] = set()  # sessions a call of phase 3 tried to change
        self.maybe_prompt: dict[str, str] = {}  # the prompt of a send that failed
        self.maybe_gone: set[str] = set()  # sessions whose deletion failed part way
        self.unmodeled: set[str] = set()  # sessions changed where no read could follow
        self.trace: list[str] = []  # every call of phase 3 and how it ended

    # -- the store -------------------------------------------------------------------------

    @property
    def sessions_dir(self) -> Path:
        return project_dir(self.work, self.home) / "sessions"

    def open_cp(self) -> Checkpointer:
        if self.kind == "file":
            return file_checkpointer(workdir=self.work, home=self.home)
        self.db.parent.mkdir(exist_ok=True)
        return sqlite_checkpointer(self.db)

    def cli_options(self) -> list[str]:
        return ["--backend", "sqlite", "--db", str(self.db)] if self.kind == "sqlite" else []

    def agent(self, cp: Checkpointer) -> LiteAgent:
        def answer(_request: ModelRequest) -> Any:
            return self.queue.popleft() if self.queue else reply("done")

        return create_lite_agent(
            model=scripted([answer] * 100_000),
            model_name="m",
            workdir=self.work,
            checkpointer=cp,
            tools=[read_file, write_file, edit_file, delete_file],
        )

    def raw(self) -> dict[str, Any]:
        """Every session's stored form, as bytes (file) or rows (SQLite), branches included."""
        if self.kind == "file":
            return {
                p.name[: -len(".log")]: p.read_bytes()
                for p in self.sessions_dir.glob("*.log")
                if p.is_file() and not p.is_symlink()
            }
        out: dict[str, Any] = {}
        try:
            conn = apsw.Connection(str(self.db), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                for table, columns in (("sessions", _SESSION_COLUMNS), ("events", _EVENT_COLUMNS)):
                    exact = ", ".join(f"typeof({c}), hex({c})" for c in columns)
                    q = f"SELECT CAST({columns[0]} AS BLOB), {exact} FROM {table}"  # noqa: S608
                    for key, *row in conn.execute(q):
                        sid = bytes(key).decode(errors="surrogateescape")
                        out.setdefault(sid, []).append(tuple(row))
            finally:
                conn.close()
        except apsw.Error as e:  # a damaged database file: its bytes, then
            return {"": (f"unreadable: {e}", self.db.read_bytes())}
        return {sid: sorted(rows) for sid, rows in out.items()}

    def blob_exists(self, ref: str) -> bool:
        if self.kind == "file":
            return (self.sessions_dir / "blobs" / ref[7:9] / ref[9:]).is_file()
        conn = apsw.Connection(str(self.db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return bool(list(conn.execute("SELECT 1 FROM blobs WHERE ref = ?", (ref,))))
        finally:
            conn.close()

    # -- phase 1: build --------------------------------------------------------------------

    def turn(self, sid: str) -> str:
        """Queue the model's answers for one prompt of ``sid``; return the prompt."""
        r = self.rng
        self.queue.clear()
        for _ in range(r.randint(0, 3)):
            path = f"{sid}/{r.choice(NAMES)}"
            op = r.choice(["write", "write", "write", "edit", "delete", "read"])
            if op == "write":
                body = f"{sid} {self.prompts} {r.randbytes(r.randint(1, 48)).hex()}\n"
                self.queue.append(call("write_file", {"path": path, "content": body * 3}))
            elif op == "edit":
                edit = {"path": path, "old_string": sid, "new_string": sid + "!"}
                self.queue.append(call("edit_file", edit))
            elif op == "delete":
                self.queue.append(call("delete_file", {"path": path}))
            else:
                self.queue.append(call("read_file", {"path": path}))
        self.queue.append(reply("done"))
        self.prompts += 1
        return f"p{self.prompts} of {sid}"

    def build(self) -> None:
        """Sessions with turns, restores, undos, forks and compactions. With ``self.live`` the
        agent stays open: the damage then happens behind a running agent's back."""
        r = self.rng
        cp = self.cp = self.open_cp()
        agent = self.live_agent = self.agent(cp)
        with contextlib.ExitStack() as stack:
            if not self.live:
                stack.enter_context(cp)
                stack.enter_context(agent)
            mains: list[str] = []
            for i in range(self.n_sessions):
                sid = f"s{i:03d}"
                mains.append(sid)
                for _ in range(r.randint(1, 3)):
                    agent.send(self.turn(sid), session_id=sid)
                roll = r.random()
                cps = agent.list_checkpoints(sid)
                self.known[sid] = [[(c.seq, c.prompt) for c in cps]]
                if roll < 0.2 and cps:
                    agent.restore(sid, r.choice(cps).seq)
                    self.stats["build restore"] += 1
                    now = [(c.seq, c.prompt) for c in agent.list_checkpoints(sid)]
                    self.known[sid].append(now)  # what an undo of its undo brings back
                    if r.random() < 0.4:
                        agent.undo_restore(sid)
                        self.stats["build undo"] += 1
                elif roll < 0.3 and cps:
                    mains.append(agent.fork(sid, r.choice(cps).seq))
                    self.stats["build fork"] += 1
                elif roll < 0.45:
                    agent.compact(session_id=sid)
                    self.stats["build compact"] += 1
            for sid in mains:
                now = [(c.seq, c.prompt) for c in agent.list_checkpoints(sid)]
                self.known.setdefault(sid, []).append(now)
            self.before = {s: _events(cp.read(s)) for s in [i.id for i in cp.list()]}
            self.refs = {s: blob_refs(e.body for e in cp.read(s)) for s in self.before}
        self.raw_before = self.raw()
        missing = {ref for refs in self.refs.values() for ref in refs if not self.blob_exists(ref)}
        assert not missing, missing  # the build itself left every reference whole

    def owner(self, sid: str) -> str:
        """The main session a session (a branch, or a main one) belongs to."""
        if not is_branch_session(sid):
            return sid
        for main in self.known:
            if sid.startswith(branch_prefix(main)):
                return main
        return sid  # a branch of a session deleted in the build: no owner to damage

    def referrers(self, ref: str) -> set[str]:
        return {self.owner(s) for s, refs in self.refs.items() if ref in refs}

    # -- phase 2: damage -------------------------------------------------------------------

    def damage(self, count: int) -> None:
        all_ids = sorted(self.before)
        for _ in range(count):
            if any(d.whole_store for d in self.damages):
                break
            sid = self.rng.choice(all_ids)
            d = self._damage_file(sid) if self.kind == "file" else self._damage_sqlite(sid)
            self.damages.append(d)
            self.stats[f"damage {d.what.split(':')[0]}"] += 1

    def damaged(self) -> set[str]:
        out: set[str] = set()
        for d in self.damages:
            if d.whole_store:
                return set(self.known)
            out |= d.sessions
        return out

    def _pick_blob(self, sid: str) -> str | None:
        refs = sorted(self.refs.get(sid, ()))
        return self.rng.choice(refs) if refs else None

    def _damage_file(self, sid: str) -> Damage:
        r = self.rng
        op = r.choice(["log", "log", "log", "blob", "blob", "unreadable", "junk", "lease"])
        ref = self._pick_blob(sid)
        if op == "lease":
            lease = self.sessions_dir / f".{sid}.lease"
            lease.unlink(missing_ok=True)
            if r.random() < 0.5:  # the record a holder leaves is only a hint: the flock counts
                lease.write_bytes(r.randbytes(r.randint(0, 64)))
                return Damage(f"lease garbage: {sid}")
            if r.random() < 0.5:
                lease.mkdir()
            else:
                os.mkfifo(lease)
            return Damage(f"lease not a file: {sid}", {self.owner(sid)})
        if op == "blob" and ref is not None:
            path = self.sessions_dir / "blobs" / ref[7:9] / ref[9:]
            style = r.choice(["delete", "flip", "cut", "folder", "empty", "fifo"])
            data = path.read_bytes() if path.is_file() else b""
            if path.is_file():
                path.unlink()
            if style == "flip" and data:
                b = bytearray(data)
                b[r.randrange(len(b))] ^= 1 << r.randrange(8)
                path.write_bytes(bytes(b))
            elif style == "cut" and data:
                path.write_bytes(data[: r.randrange(len(data))])
            elif style == "folder":
                path.mkdir()
            elif style == "empty":
                path.write_bytes(b"")
            elif style == "fifo":
                os.mkfifo(path)
            return Damage(f"blob {style}: {ref} of {sid}", self.referrers(ref))
        if op == "unreadable":
            if ref is not None and r.random() < 0.5:
                self.denied.add(ref[9:])
                return Damage(f"unreadable blob: {ref} of {sid}", self.referrers(ref))
            self.denied.add(f"{sid}.log")
            return Damage(f"unreadable log: {sid}", {self.owner(sid)})
        if op == "junk":
            return Damage(f"junk: {self._junk_file()}")
        what = damage_file_log(self.sessions_dir, sid, r)
        return Damage(f"log: {what}", {self.owner(sid)}, tail_loss=what.startswith(TAIL_LOSS))

    def _junk_file(self) -> str:
        r, root = self.rng, self.sessions_dir
        style = r.choice(
            [
                "text",
                "log of garbage",
                "empty log",
                "folder log",
                "fifo log",
                "blob junk",
                "tmp",
                "quarantine",
            ]
        )
        if style == "text":
            (root / "README.txt").write_text("my notes\n")
        elif style == "log of garbage":
            (root / "garbage.log").write_bytes(r.randbytes(r.randint(1, 200)))
        elif style == "empty log":
            (root / "empty.log").write_bytes(b"")
        elif style == "folder log":
            (root / "folder.log").mkdir(exist_ok=True)
        elif style == "fifo log":
            if not (root / "fifo.log").exists():
                os.mkfifo(root / "fifo.log")
        elif style == "blob junk":
            (root / "blobs" / "zz").mkdir(parents=True, exist_ok=True)
            (root / "blobs" / "zz" / "not-a-blob").write_bytes(b"junk")
            (root / "blobs" / "junk.txt").write_bytes(b"junk")
        elif style == "tmp":
            (root / ".s000.tmp").write_bytes(r.randbytes(40))
        else:
            (root / "s000.log.quarantine-junk").write_bytes(r.randbytes(40))
        return style

    def _damage_sqlite(self, sid: str) -> Damage:
        r = self.rng
        _settle(self.db)
        ops = ["rows", "rows", "rows", "session", "blob", "blob", "junk", "file"]
        op = r.choice(ops[:-1] if self.live else ops)  # not under a live page cache
        if op == "file":
            return Damage(f"database file: {_file_damage(self.db, r)}", whole_store=True)
        conn = apsw.Connection(str(self.db))
        try:
            ref = self._pick_blob(sid)
            with conn:
                if op == "blob" and ref is not None:
                    style = r.choice(["delete", "flip", "cut", "retype"])
                    if style == "delete":
                        conn.execute("DELETE FROM blobs WHERE ref = ?", (ref,))
                    elif style == "flip":
                        conn.execute(
                            "UPDATE blobs SET data = CAST(data || x'00' AS BLOB) WHERE ref = ?",
                            (ref,),
                        )
                    elif style == "cut":
                        conn.execute(
                            "UPDATE blobs SET data = substr(data, 1, length(data) / 2) "
                            "WHERE ref = ?",
                            (ref,),
                        )
                    else:
                        conn.execute("UPDATE blobs SET data = 7 WHERE ref = ?", (ref,))
                    return Damage(f"blob {style}: {ref} of {sid}", self.referrers(ref))
                if op == "session":
                    column = r.choice(["head", "generation", "crc", "record"])
                    if column == "record":  # its rows stay: orphans, never a new session
                        conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
                        return Damage(f"session record deleted: {sid}", {self.owner(sid)})
                    conn.execute(
                        f"UPDATE sessions SET {column} = {column} + 1 WHERE id = ?",  # noqa: S608
                        (sid,),
                    )
                    return Damage(f"session record: {column} of {sid}", {self.owner(sid)})
                if op == "junk":
                    style = r.choice(
                        [
                            "orphan row",
                            "bad blob",
                            "file",
                            "stale lease",
                            "junk lease",
                            "quarantine",
                        ]
                    )
                    if style == "stale lease":  # its holder is dead: the next call takes it
                        conn.execute(
                            "INSERT OR REPLACE INTO leases VALUES (?, 'gone', ?, ?, ?, 1, ?)",
                            (sid, _dead_pid(), socket.gethostname(), _started_dead(), 4e9),
                        )
                        return Damage(f"junk: a lease of {sid} held by a dead process")
                    if style == "junk lease":  # columns of the wrong types: a free lease
                        conn.execute(
                            "INSERT OR REPLACE INTO leases VALUES (?, 7, 'x', 8, 9, 'y', 'z')",
                            (sid,),
                        )
                        return Damage(f"junk: a lease row of {sid} of the wrong types")
                    if style == "quarantine":
                        conn.execute(
                            "INSERT INTO quarantine VALUES (?, 1, 'x', 7, x'00', 'crc', 'junk', "
                            "'gen', 0.5)",
                            (sid,),
                        )
                    elif style == "orphan row":
                        conn.execute(
                            "INSERT INTO events(session_id, seq, ts, kind, body, crc) "
                            "VALUES ('orphan', 1, 1.0, 'user_prompt', x'00', 0)"
                        )
                    elif style == "bad blob":
                        conn.execute("INSERT INTO blobs(ref, data) VALUES ('sha256:zz', x'00')")
                    else:
                        (self.db.parent / "notes.txt").write_text("mine\n")
                    return Damage(f"junk: {style}")
                rows = _rows(conn, sid)
                if not rows:
                    return Damage(f"nothing: {sid} has no rows")
                what = r.choice(_ROW_DAMAGE)(conn, sid, rows, r)
                return Damage(f"rows: {what} ({sid})", {self.owner(sid)})
        finally:
            conn.close()

    # -- phase 3: the agent ----------------------------------------------------------------

    def attempt(self, what: str, fn: Callable[[], T]) -> tuple[bool, T | LiteAgentError | None]:
        """Run one call: (True, result), or (False, the LiteAgentError it raised). Anything
        else it raises is recorded as a finding."""
        try:
            result = _finishes(what, fn)
        except LiteAgentError as e:
            self.trace.append(f"{what}: {type(e).__name__}: {e}")
            if not str(e).strip():
                self.unexpected.append(f"{what}: {type(e).__name__} without a message")
            self.stats[f"{what.split(maxsplit=1)[0]}: {type(e).__name__}"] += 1
            return False, e
        except AssertionError:
            raise
        except BaseException as e:  # noqa: BLE001 -- every other error is the finding
            self.unexpected.append(f"{what}: {type(e).__name__}: {e}")
            return False, None
        self.trace.append(f"{what}: ok")
        return True, result

    def observe(self, agent: LiteAgent, sid: str, tail_loss: bool) -> None:
        """The session's checkpoints, if it can be read, are the last known ones (a prefix of
        them after a tail loss nobody has seen yet)."""
        ok, got = self.attempt(f"list_checkpoints {sid}", lambda: agent.list_checkpoints(sid))
        if not ok or sid in self.deleted or sid in self.unmodeled:
            return
        now = [(c.seq, c.prompt) for c in got]  # type: ignore[union-attr]
        last = self.known[sid][-1]
        first = sid not in self.observed
        self.observed.add(sid)
        if now == [] and sid in self.maybe_gone:
            self.deleted.add(sid)
            return
        prompt = self.maybe_prompt.pop(sid, None)
        if now[:-1] == last and now[-1:] and now[-1][1] == prompt:
            self.known[sid].append(now)
            return
        if now != last:
            if tail_loss and first and now == last[: len(now)]:
                self.known[sid].append(now)
                return
            self.unexpected.append(f"{sid}: checkpoints {now} where {last} were")

    def ops(self, agent: LiteAgent, sid: str, damaged: bool, tail_loss: bool) -> None:
        """Every public call on ``sid``, in a random order, with a model of its checkpoints."""
        r = self.rng
        names = ["send", "preview", "restore", "undo", "fork", "compact", "list", "gc", "branches"]
        r.shuffle(names)
        if r.random() < 0.3:
            names.append("delete")
        self.observe(agent, sid, tail_loss)
        for op in names:
            if sid in self.deleted:
                return
            self._op(agent, sid, op, damaged)
            self.observe(agent, sid, tail_loss)

    def _op(self, agent: LiteAgent, sid: str, op: str, damaged: bool) -> None:
        """One call on ``sid``; on an undamaged session it may only refuse as a usable one
        does (a seq that is no checkpoint aside)."""
        last = self.known[sid][-1]
        seq = last[0][0] if last else 1
        if last and self.rng.random() < 0.9:
            seq = self.rng.choice(last)[0]
        elif self.rng.random() < 0.5:
            seq = self.rng.randint(1, 40)
        if op in ("send", "restore", "undo", "compact", "delete"):
            self.tried.add(sid)  # a failed write may still leave records (a prompt, an intent)
        ok, result, allowed = getattr(self, f"_{op}")(agent, sid, last, seq)
        if seq not in {c[0] for c in last} and op in ("preview", "restore", "fork"):
            allowed = (LiteAgentError,)  # not a checkpoint
        if not ok and not damaged and result is not None and not isinstance(result, allowed):
            self.unexpected.append(f"{op} on undamaged {sid}: {type(result).__name__}: {result}")

    def _checkpoints(self, agent: LiteAgent, sid: str) -> list[tuple[int, str]] | None:
        ok, got = self.attempt(f"list_checkpoints {sid}", lambda: agent.list_checkpoints(sid))
        return [(c.seq, c.prompt) for c in got] if ok else None  # type: ignore[union-attr]

    def _send(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        prompt = self.turn(sid)
        ok, result = self.attempt(f"send {sid}", lambda: agent.send(prompt, session_id=sid))
        if not ok:  # a turn that stopped early may have recorded its prompt
            self.maybe_prompt[sid] = prompt
            return ok, result, ()
        self.written.add(sid)
        now = self._checkpoints(agent, sid)
        if now is None:  # a live agent wrote through a file it had open; no read can see it
            self.unmodeled.add(sid)
        elif now[:-1] != last or now[-1][1] != prompt:
            self.unexpected.append(f"{sid}: after a send {now}, before {last}")
        else:
            self.known[sid].append(now)
        return ok, result, ()

    def _preview(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        ok, result = self.attempt(
            f"preview {sid} {seq}", lambda: agent.restore(sid, seq, dry_run=True)
        )
        return ok, result, ()

    def _restore(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        try:  # what each file must hold after it: the hashes the log recorded
            plans = plan_files(fold(list(self.cp.read(sid))), seq)
        except LiteAgentError:
            plans = None
        files = _workspace(self.work)
        ok, result = self.attempt(f"restore {sid} {seq}", lambda: agent.restore(sid, seq))
        self.check_failed_kept_files(agent, sid, "restore", ok, files)
        if ok:
            self.written.add(sid)
            self.known[sid].append([c for c in last if c[0] < seq])
            for plan in plans or ():
                path = self.work / plan.path
                now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
                if now != plan.target_hash:
                    self.unexpected.append(f"restore {sid} {seq} put back {plan.path} wrong")
        return ok, result, USABLE_REFUSALS

    def _undo(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        files = _workspace(self.work)
        ok, result = self.attempt(f"undo {sid}", lambda: agent.undo_restore(sid))
        self.check_failed_kept_files(agent, sid, "undo", ok, files)
        if ok:
            self.written.add(sid)
            now = self._checkpoints(agent, sid)
            if now is None:
                self.unmodeled.add(sid)
            elif now not in self.known[sid]:
                self.unexpected.append(f"{sid}: an undo made {now}, never seen")
            else:
                self.known[sid].append(now)
        return ok, result, USABLE_REFUSALS

    def check_failed_kept_files(
        self, agent: LiteAgent, sid: str, what: str, ok: bool, before: dict[str, str]
    ) -> None:
        """A restore or undo that failed left the workspace as it was (it puts back what it
        changed, even when the store cannot record that and an interrupted restore stays)."""
        if not ok and _workspace(self.work) != before:
            self.unexpected.append(f"{sid}: a failed {what} left files changed")

    def _fork(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        ok, result = self.attempt(f"fork {sid} {seq}", lambda: agent.fork(sid, seq))
        if ok:
            new = str(result)
            got = self._checkpoints(agent, new)
            if got != [c for c in last if c[0] < seq]:
                self.unexpected.append(f"fork {new} of {sid} at {seq}: {got}, had {last}")
            self.known[new] = [got or []]
        return ok, result, ()

    def _compact(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        ok, result = self.attempt(f"compact {sid}", lambda: agent.compact(session_id=sid))
        if ok:
            self.written.add(sid)
        return ok, result, ()

    def _list(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        ok, result = self.attempt("list_sessions", agent.list_sessions)
        if ok:
            listed = {s.id for s in result}  # type: ignore[union-attr]
            lost = {s for s in self.known if s not in self.deleted} - self.damaged() - listed
            if lost:
                self.unexpected.append(f"list_sessions leaves out undamaged {sorted(lost)}")
        return ok, result, ()

    def _branches(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        ok, result = self.attempt(f"list_branches {sid}", lambda: agent.list_branches(sid))
        if ok:
            ok, result = self.attempt(f"pending {sid}", lambda: agent.pending_restore(sid))
        return ok, result, ()

    def _gc(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        dry = self.rng.random() < 0.5
        ok, result = self.attempt(
            "collect_garbage", lambda: agent.collect_garbage(grace=0, dry_run=dry)
        )
        return ok, result, (LiteAgentError,)  # damage anywhere stops a collection

    def _delete(self, agent: LiteAgent, sid: str, last: list[Any], seq: int) -> Outcome:
        ok, result = self.attempt(f"delete {sid}", lambda: agent.delete_session(sid))
        if ok:
            self.deleted.add(sid)
            self.written.add(sid)
        else:  # the session goes first, then its branches: one of them failed?
            self.maybe_gone.add(sid)
        return ok, result, ()

    def agent_phase(self) -> None:
        damaged = self.damaged()
        tail = {s for d in self.damages if d.tail_loss for s in d.sessions}
        mains = sorted(self.known)
        if not self.live:
            with _denying(self.denied):
                opened, cp = self.attempt("open", self.open_cp)
            if not opened:
                assert self.damaged() == set(self.known), cp  # only a damaged database refuses
                return
            assert isinstance(cp, Checkpointer)
            self.cp, self.live_agent = cp, self.agent(cp)
        with _denying(self.denied), self.cp, self.live_agent as agent:
            for sid in self.rng.sample(mains, len(mains)):
                if sid in damaged:
                    self.ops(agent, sid, True, sid in tail)
            self.check_undamaged_kept("the calls on damaged sessions")
            for sid in self.rng.sample(mains, len(mains)):
                if sid not in damaged:
                    self.ops(agent, sid, False, False)

    # -- the checks ------------------------------------------------------------------------

    def check_undamaged_kept(self, after: str) -> None:
        """No undamaged session (nor a branch of one) changed, none of their blobs is gone."""
        if not self.known or (self.kind == "sqlite" and any(d.whole_store for d in self.damages)):
            return
        damaged = self.damaged() | self.written | self.deleted
        now = self.raw()
        for sid, before in self.raw_before.items():
            owner = self.owner(sid)
            if owner in damaged or owner not in self.known:
                continue
            if now.get(sid) != before and not (is_branch_session(sid) and sid not in now):
                self.unexpected.append(f"{after} changed the stored events of {sid}")
            if sid in now:
                gone = [ref for ref in self.refs.get(sid, ()) if not self.blob_exists(ref)]
                if gone:
                    self.unexpected.append(f"{after} lost blobs of {sid}: {gone}")

    def check_prefixes(self) -> None:
        """Each session no call changed is, read afresh, its history or a prefix of it (after a
        repair); an undamaged one its whole history."""
        damaged = self.damaged()
        with _denying(self.denied):
            opened, cp = self.attempt("open", self.open_cp)
        if not opened:
            assert damaged == set(self.known), cp  # only a damaged database refuses
            return
        assert isinstance(cp, Checkpointer)
        with _denying(self.denied), cp:
            for sid, before in self.before.items():
                owner = self.owner(sid)
                if owner in self.written or owner in self.deleted:
                    continue
                try:
                    got = _events(cp.read(sid))
                except LiteAgentError as e:
                    if owner not in damaged:
                        self.unexpected.append(f"undamaged {sid} unreadable: {e}")
                    continue
                if owner in self.tried and got[: len(before)] == before:
                    continue  # a failed call left records (a prompt, a restore's intent)
                if got != before[: len(got)] or (owner not in damaged and got != before):
                    self.unexpected.append(
                        f"{sid} reads {len(got)} events, not a prefix of its {len(before)}"
                    )

    # -- phase 4: the commands ---------------------------------------------------------------

    def cli_phase(self, cli: Cli) -> None:
        """The commands that only read on some sessions (damaged ones among them), which change
        nothing stored; then the ones that write; then ``doctor --repair``."""
        mains = [s for s in sorted(self.known) if s not in self.deleted]
        damaged = self.damaged()
        picks = self.rng.sample(mains, min(len(mains), 4)) + sorted(damaged - self.deleted)[:3]
        commands: list[tuple[list[str], bool]] = [
            (["sessions"], False),
            (["doctor"], True),
            (["gc", "--dry-run"], False),
        ]
        for sid in picks:
            commands += [([c, sid], False) for c in ("export", "checkpoints", "replay")]
            commands += [(["branches", sid], False), (["replay", sid, "--verify"], True)]
            cps = self.known.get(sid, [[]])[-1]
            if cps:
                seq = str(self.rng.choice(cps)[0])
                commands.append((["restore", sid, seq, "--dry-run"], False))
        before = self.raw()
        for argv, reports in commands:
            for as_json in (False, True):
                self.cli_run(cli, argv, as_json, reports, must_pass=argv[0] != "restore")
        if self.raw() != before:
            self.unexpected.append("a command without --repair changed the store")
        self.check_undamaged_kept("the commands that read")
        self.cli_writes(cli, picks[:2] + picks[4:])
        self.check_undamaged_kept("the commands that write")
        self.cli_run(cli, ["doctor", "--repair"], True, True, must_pass=False)
        self.check_undamaged_kept("doctor --repair")

    def after_repair(self) -> None:
        """Every session ``doctor --repair`` left without a finding takes a turn again (a
        damaged database file aside, which no repair of sessions mends)."""
        if any(d.whole_store for d in self.damages):
            return
        with _denying(self.denied), self.open_cp() as cp:
            report = cp.check_integrity()
            left = {p.session_id for p in report.problems} | {None}
            self.queue.clear()
            with self.agent(cp) as agent:
                for sid in sorted(self.damaged() - self.deleted - left):
                    ok, error = self.attempt(
                        f"send after repair {sid}", lambda s=sid: agent.send("again", session_id=s)
                    )
                    if not ok:
                        self.unexpected.append(f"{sid} repaired, but a turn fails: {error}")

    def cli_writes(self, cli: Cli, picks: list[str]) -> None:
        """A turn, a compaction, a fork, a restore and its undo by command on each of
        ``picks``, and a garbage collection."""
        for sid in picks:
            provider = cli.script({"text": "ok"})
            self.tried.add(sid)
            for argv in (
                ["--provider", provider, "run", "go on", "--session", sid],
                ["compact", sid],
            ):
                if self.cli_run(cli, argv, self.rng.random() < 0.5, False, must_pass=True) == 0:
                    self.written.add(sid)
            listed = cli(*self.cli_options(), "checkpoints", sid, "--json")
            cps = [c["seq"] for c in listed.json()] if listed.code == 0 else []
            seq = str(self.rng.choice(cps)) if cps else "1"
            for argv, usable in (
                (["fork", sid, seq], bool(cps)),
                (["restore", sid, seq], False),
                (["restore", "--undo", sid], False),
            ):
                code = self.cli_run(
                    cli, argv, self.rng.random() < 0.5, False, must_pass=usable, usage=not cps
                )
                if code == 0 and argv[0] != "fork":
                    self.written.add(sid)
        self.cli_run(cli, ["gc", "--grace", "0"], self.rng.random() < 0.5, False, must_pass=False)

    def cli_run(
        self,
        cli: Cli,
        argv: list[str],
        as_json: bool,
        reports: bool,
        *,
        must_pass: bool,
        usage: bool = False,
    ) -> int:
        """Run one command and check it keeps the contract (module docstring); with
        ``must_pass``, exit 0 on an undamaged session; ``usage``: a usage error is fine (a seq
        that may be no checkpoint). Returns the exit code."""
        full = [*self.cli_options(), *argv] + (["--json"] if as_json else [])
        prelude = _DENY_PRELUDE.format(names=sorted(self.denied)) if self.denied else ""
        result = _without_logs(_finishes(" ".join(full), lambda: cli(*full, prelude=prelude)))
        self.stats[f"cli {argv[0]} exit {result.code}"] += 1
        problems = contract(result, full, as_json=as_json, reports=reports)
        if result.code == 2 and not usage:
            problems.append(f"{full}: a usage error: {result.err or result.out}")
        sids = [a for a in argv if a in self.known]
        if must_pass and sids and sids[0] not in self.damaged() | self.deleted and result.code:
            problems.append(f"{full} on undamaged {sids[0]}: {result.err or result.out}")
        if not as_json and result.code and not reports and len(result.err.splitlines()) != 1:
            problems.append(f"{full}: stderr is not one line: {result.err!r}")
        if problems:
            problems.append(f"  out: {result.out[-600:]!r}\n  err: {result.err[-600:]!r}")
        self.unexpected += problems
        return result.code

    def report(self) -> str:
        named = {w.split()[0].rstrip(":") for w in self.unexpected if w.startswith("s")}
        trace = [t for t in self.trace if any(f" {s}" in t for s in named)]
        return "\n".join(
            [
                f"seed {self.seed} {self.kind} live={self.live}: {[d.what for d in self.damages]}",
                *self.unexpected,
                "-- the calls on the sessions named:",
                *trace[-40:],
            ]
        )


def _workspace(root: Path) -> dict[str, str]:
    """Every file below ``root`` with the SHA-256 of its content."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    child = subprocess.Popen(["true"])  # noqa: S607 -- any short-lived process
    child.wait()
    return child.pid


def _started_dead() -> str:
    """A lease row's ``started`` for a process of this machine that has ended."""
    return started_self().rpartition("|")[0] + "|1"


def _without_logs(result: Result) -> Result:
    """``result`` without the log records on its stderr (the CLI logs warnings there, as JSON
    lines when not on a terminal: a repair says what it did), which the checks leave aside."""
    kept = []
    for line in result.err.splitlines(keepends=True):
        try:
            record = json.loads(line)
        except ValueError:
            kept.append(line)
            continue
        if not (isinstance(record, dict) and {"event", "level"} <= record.keys()):
            kept.append(line)
    return Result(result.code, result.out, "".join(kept))


_DENY_PRELUDE = """
import errno, os
_names = {names!r}
_open = os.open
def _denied(path, flags, *args, **kwargs):
    if os.path.basename(os.fsdecode(path)) in _names:
        raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))
    return _open(path, flags, *args, **kwargs)
os.open = _denied
"""


class _denying:  # noqa: N801 -- used as a context manager
    """While active, ``os.open`` of a file whose name is in ``names`` fails as it does for a
    non-root user after ``chmod 000`` (the tests run as root, who reads any file)."""

    def __init__(self, names: set[str]) -> None:
        self.names = set(names)
        self.real = os.open

    def __enter__(self) -> None:
        if not self.names:
            return
        real, names = self.real, self.names

        def denied(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if os.path.basename(os.fsdecode(path)) in names:
                raise PermissionError(13, "Permission denied", os.fsdecode(path))
            return real(path, flags, *args, **kwargs)

        os.open = denied  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        os.open = self.real


def hunt(seed: int, kind: str, tmp: Path, server: CliServer, sessions: int) -> Mix:
    """One seeded run: build, damage, the agent's calls, the commands, the repair."""
    mix = Mix(seed, kind, tmp, sessions)
    mix.build()
    mix.damage(max(1, sessions // 8))
    mix.agent_phase()
    assert not mix.unexpected, mix.report()
    mix.check_undamaged_kept("the agent's calls")
    (tmp / "cli").mkdir()
    cli = Cli(server, tmp / "cli")
    cli.work, cli.home = mix.work, mix.home
    mix.cli_phase(cli)
    mix.check_prefixes()
    mix.after_repair()
    assert not mix.unexpected, mix.report()
    return mix


@pytest.mark.parametrize("kind", ["file", "sqlite"])
@pytest.mark.parametrize("seed", range(2))
def test_damaged_store_mix(seed: int, kind: str, tmp_path: Path, server: CliServer) -> None:
    """Seeded random damage to a store of 30 sessions keeps every property of the module
    docstring."""
    hunt(seed, kind, tmp_path, server, 30)


@pytest.mark.soak
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["file", "sqlite"])
@pytest.mark.parametrize("seed", range(100, 120))
def test_damaged_store_mix_soak(seed: int, kind: str, tmp_path: Path, server: CliServer) -> None:
    """The same with a few hundred sessions and more seeds (``pytest -m soak``)."""
    hunt(seed, kind, tmp_path, server, 200)


# -- regressions: the smallest deterministic cases the hunt found ---------------------------------


def _deny(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """``os.open`` of a file called ``name`` fails as after ``chmod 000`` for a non-root user
    (the tests run as root)."""
    real = os.open

    def denied(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.path.basename(os.fsdecode(path)) == name:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)


def test_a_folder_at_a_session_log_is_listed_in_plain_words(cli: Cli) -> None:
    """A folder named like a session's log: ``sessions`` lists it as damaged saying why in
    plain words (it used to say ``[Errno 21] cannot read session 'folder': ...``)."""
    two_prompts(cli)
    (project_dir(cli.work, cli.home) / "sessions" / "folder.log").mkdir()
    text = cli.ok("sessions")
    assert "damaged: cannot read session 'folder': Is a directory" in text.out
    (row,) = [r for r in cli.ok("sessions", "--json").json() if r["id"] == "folder"]
    assert row["damaged"] == "cannot read session 'folder': Is a directory"
    assert "Errno" not in text.out + str(row)


def test_an_unreadable_log_is_an_error_in_plain_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session log that cannot be opened: reading it raises a StorageIOError whose message
    names the session and the reason, and check_integrity reports it so (both used to start
    with ``[Errno 13]``); the other session reads on."""
    with file_checkpointer(tmp_path) as cp:
        cp.append("s1", prompts("one"))
        cp.append("s2", prompts("two"))
    _deny(monkeypatch, "s1.log")
    with file_checkpointer(tmp_path) as cp:
        with pytest.raises(StorageIOError) as info:
            list(cp.read("s1"))
        assert str(info.value) == "cannot read session 's1': Permission denied"
        (problem,) = cp.check_integrity().problems
        assert (problem.kind, problem.session_id) == ("corrupt", "s1")
        assert problem.detail == "cannot read the log: Permission denied"
        assert texts(cp.read("s2")) == ["two"]


def test_a_damaged_database_file_is_reported_in_plain_words(tmp_path: Path) -> None:
    """A database file whose last page was zeroed: SQLite's integrity check cannot finish, and
    check_integrity says so without Python's class names (it said ``PRAGMA integrity_check:
    CorruptError: database disk image is malformed``, which ``doctor`` and ``gc`` printed)."""
    db = tmp_path / "store.db"
    with sqlite_checkpointer(db) as cp:
        for i in range(12):
            cp.append(f"s{i % 3}", prompts(*[f"p{i}.{j}" * 50 for j in range(5)]))
    _settle(db)
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[-page:] = bytes(page)
    db.write_bytes(bytes(data))
    with sqlite_checkpointer(db) as cp:
        report = cp.check_integrity()
    details = [p.detail for p in report.problems if p.kind == "database"]
    assert details == ["PRAGMA integrity_check: database disk image is malformed"]


def _two_writes(tmp: Path, cp: Checkpointer) -> tuple[LiteAgent, int, str]:
    """An agent whose session "s" wrote a.txt twice (two prompts); the second prompt's seq and
    the blob of a.txt's first content, which a restore to it puts back."""
    work = tmp / "work"
    work.mkdir()
    agent = create_lite_agent(
        model=scripted(
            [
                call("write_file", {"path": "a.txt", "content": "first\n"}),
                reply("ok"),
                call("write_file", {"path": "a.txt", "content": "second\n"}),
                reply("ok"),
                reply("done"),
            ]
        ),
        model_name="m",
        workdir=work,
        checkpointer=cp,
        tools=[write_file],
    )
    agent.send("one", session_id="s")
    agent.send("two", session_id="s")
    seq = agent.list_checkpoints("s")[1].seq
    return agent, seq, "sha256:" + hashlib.sha256(b"first\n").hexdigest()


def test_a_damaged_snapshot_is_a_refusal_in_plain_words(tmp_path: Path) -> None:
    """A snapshot blob whose bytes changed: the preview and the restore refuse, naming the
    blob and the damage, without Python's class names (the reason said ``(CorruptBlobError:
    ...)``, which ``restore --dry-run`` printed); the file stays as it is."""
    cp = file_checkpointer(tmp_path / "store")
    agent, seq, ref = _two_writes(tmp_path, cp)
    (tmp_path / "store" / "blobs" / ref[7:9] / ref[9:]).write_bytes(b"changed\n")
    reason = (
        f"its snapshot cannot be read back intact: blob {ref} is damaged: its content no "
        "longer matches its hash; restore with files=False to restore the conversation alone"
    )
    with cp, agent:
        assert agent.restore("s", seq, dry_run=True).refused == (("a.txt", reason),)
        with pytest.raises(RestoreRefusedError) as info:
            agent.restore("s", seq)
        assert info.value.problems == [("a.txt", reason)]
    assert (tmp_path / "work" / "a.txt").read_text() == "second\n"


def test_an_unreadable_snapshot_is_a_refusal_in_plain_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot blob that cannot be opened: the preview refuses with the reason in plain
    words (it said ``(StorageIOError: [Errno 13] cannot read blob ...)``)."""
    cp = file_checkpointer(tmp_path / "store")
    agent, seq, ref = _two_writes(tmp_path, cp)
    with cp, agent:
        _deny(monkeypatch, ref[9:])
        ((path, reason),) = agent.restore("s", seq, dry_run=True).refused
    assert (path, reason) == (
        "a.txt",
        f"its snapshot cannot be read back intact: cannot read blob {ref}: Permission denied; "
        "restore with files=False to restore the conversation alone",
    )


@pytest.mark.parametrize("thing", ["folder", "fifo", "symlink"])
def test_a_lease_path_that_is_no_file_is_reported(cli: Cli, thing: str) -> None:
    """A folder, FIFO or symbolic link at a session's lease path: every turn, restore and
    compaction of it is refused (as before), and ``doctor`` now says why (it reported no
    problem, leaving the session unusable without a word); the log is untouched."""
    two_prompts(cli)
    sessions = project_dir(cli.work, cli.home) / "sessions"
    lease = sessions / ".s1.lease"
    lease.unlink(missing_ok=True)
    if thing == "folder":
        lease.mkdir()
    elif thing == "fifo":
        os.mkfifo(lease)
    else:
        lease.symlink_to("s1.log")
    log = (sessions / "s1.log").read_bytes()
    with file_checkpointer(sessions) as cp:
        (problem,) = cp.check_integrity().problems
        assert (problem.kind, problem.session_id) == ("corrupt", "s1")
        assert problem.detail.startswith(f"its lease file {lease} is a ")
        assert problem.detail.endswith(
            ", not a regular file: the session takes no turn, restore or compaction until it "
            "is removed"
        )
    found = cli("doctor", "--json")
    assert found.code == 1
    assert [(f["session_id"], f["kind"]) for f in found.json()["findings"]] == [("s1", "corrupt")]
    refused = cli("run", "more", "--session", "s1", provider=cli.script({"text": "x"}))
    assert refused.code == 1
    assert (sessions / "s1.log").read_bytes() == log


def test_a_restore_whose_log_cannot_be_cut_puts_the_files_back(tmp_path: Path) -> None:
    """A folder where a truncate writes its temp file (``.s.tmp``): the restore cannot cut the
    log, raises StorageIOError, and puts the files back as they were, recording the rollback
    (it left them restored, with the session stuck on an interrupted restore); the session
    takes a turn again."""
    cp = file_checkpointer(tmp_path / "store")
    agent, seq, _ = _two_writes(tmp_path, cp)
    (tmp_path / "store" / ".s.tmp").mkdir()
    with cp, agent:
        with pytest.raises(StorageIOError, match="cannot truncate session 's'"):
            agent.restore("s", seq)
        assert (tmp_path / "work" / "a.txt").read_text() == "second\n"
        assert agent.pending_restore("s") is None
        assert [b.id for b in agent.list_branches("s")] == []
        assert agent.send("three", session_id="s").text == "done"


def test_a_folder_at_a_truncate_temp_path_is_reported(tmp_path: Path) -> None:
    """A folder at ``.s.tmp`` keeps every truncate of the session from writing its temp file:
    check_integrity reports it (it called it a leftover "removed by the next write")."""
    with file_checkpointer(tmp_path) as cp:
        cp.append("s", prompts("one", "two"))
    (tmp_path / ".s.tmp").mkdir()
    with file_checkpointer(tmp_path) as cp:
        with pytest.raises(StorageIOError, match="cannot truncate session 's'"):
            cp.truncate("s", 1)
        report = cp.check_integrity()
    assert not report.ok
    assert [(p.kind, p.session_id, p.detail) for p in report.problems] == [
        (
            "corrupt",
            "s",
            f"{tmp_path / '.s.tmp'} is a folder where a truncate writes its temp file: the "
            "session cannot be restored or repaired until it is removed",
        )
    ]


def _fork_refused_by_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Checkpointer, LiteAgent, int, Path]:
    """A file store, an agent whose session "s" wrote a.txt twice, the seq to fork it at, and a
    copy of its workspace to fork into; the fork's new session is "forked", whose log path is
    a folder (so the store refuses to write it)."""
    cp = file_checkpointer(tmp_path / "store")
    agent, seq, _ = _two_writes(tmp_path, cp)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "work", copy)
    monkeypatch.setattr("liteagent.sdk._core.new_session_id", lambda: "forked")
    (tmp_path / "store" / "forked.log").mkdir()
    return cp, agent, seq, copy


def test_a_fork_into_a_folder_the_store_refuses_leaves_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork into another workspace whose new session the store cannot write (a folder where
    its log goes): the fork raises StorageIOError and the files it had put back in that
    workspace are as they were (they were left changed, with no session to show for it)."""
    cp, agent, seq, copy = _fork_refused_by_the_store(tmp_path, monkeypatch)
    with cp, agent:
        with pytest.raises(StorageIOError, match="forked"):
            agent.fork("s", seq, workdir=copy)
        assert (copy / "a.txt").read_text() == "second\n"


def test_a_fork_whose_store_and_rollback_both_fail_says_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, and the disk also refuses to put the workspace's file back: the fork raises a
    RestoreFailedError that names the new session, why the store refused it, and the file left
    changed (not a raw OSError, and not the store's error alone, which would hide the file)."""
    cp, agent, seq, copy = _fork_refused_by_the_store(tmp_path, monkeypatch)
    real = _restore_files.put_file
    writes: list[str] = []

    def full_after_one(
        workdir: Path, rel: str, content: bytes | None, mode: int | None = None
    ) -> None:
        writes.append(rel)
        if len(writes) > 1:
            raise OSError(28, "No space left on device")
        real(workdir, rel, content, mode)

    monkeypatch.setattr(_restore_files, "put_file", full_after_one)
    with cp, agent:
        with pytest.raises(RestoreFailedError) as info:
            agent.fork("s", seq, workdir=copy)
        message = str(info.value)
        assert "forked" in message
        assert "a.txt (No space left on device)" in message
        assert isinstance(info.value.__cause__, StorageIOError)
        assert (copy / "a.txt").read_text() == "first\n"  # left as the fork put it
