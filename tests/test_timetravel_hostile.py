"""Time travel against a hostile workspace: seeded random runs interleave agent turns (the file
tools and ``bash`` creating, moving, chmodding and deleting files) with what a real user does
to the workspace between turns and between a preview and a restore: edits of the agent's
files, new files where the agent deleted one, a file replaced by a folder, a FIFO or a symlink
(inside, or pointing outside the workspace), chmods, huge and binary files, odd names (spaces,
newlines, bytes that are not UTF-8), case-only renames, a whole folder deleted. Then restores
(files on and off, after a preview), undos, forks (shared workspace, and into a copy), and an
agent closed and opened again, on the memory, file and SQLite checkpointers.

The properties, after every step:
- a restore (an undo, a fork into a copy) either raises a ``LiteAgentError`` and changes
  nothing in the workspace or the log, or changes exactly the files its plan names, each of
  which held what the agent last left there (a regular file, no symlink on its path) and now
  holds what the checkpoint had; every other entry of the workspace is as it was;
- a restore refuses only when a file of its plan is not as the agent left it, and always does
  then; its preview, with nothing changed in between, names the same files;
- an undo right after a restore brings back the workspace and the log byte for byte;
- nothing outside the workspace is written, read through a symlink or deleted;
- no call hangs (a FIFO is never opened for a blocking read) and the session is never wedged:
  a later send works.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import random
import shlex
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from _restore_model import call, reply

from liteagent.actors._restore_plan import plan_files
from liteagent.eventlog import (
    Checkpointer,
    file_checkpointer,
    fold,
    memory_checkpointer,
    sqlite_checkpointer,
)
from liteagent.eventlog.errors import LiteAgentError
from liteagent.eventlog.types import ModelRequest
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, RestoreRefusedError, create_lite_agent
from liteagent.tools import (
    Tool,
    ToolContext,
    bash,
    delete_file,
    edit_file,
    read_file,
    resolve_in_workspace,
    tool,
    write_file,
)

T = TypeVar("T")

#: Names the agent's tools use: spaces, a newline, unicode, a leading dash, a case-only pair,
#: nested folders (``d`` is deleted whole by the user now and then).
NAMES = (
    "a.txt",
    "A.txt",
    "sp ace.md",
    "new\nline",
    "ünï.txt",
    "-dash",
    "d/x.txt",
    "d/e/y.bin",
)
#: Names only the user makes: not UTF-8 (the OS allows it), and a temp-looking one.
RAW_NAMES = (b"raw\xff\xfe.bin", b"d/\x80odd")


@tool(name="write_bytes", changes_param="path")
def write_bytes(path: str, data_hex: str, *, ctx: ToolContext) -> str:
    """Write binary content (given as hex) to a regular file of the workspace."""
    target = resolve_in_workspace(ctx.workdir, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o644)
    with os.fdopen(fd, "wb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        f.write(bytes.fromhex(data_hex))
    return "written"


TOOLS: list[Tool] = [read_file, write_file, edit_file, delete_file, write_bytes, bash]

# -- the workspace, as seen from outside ---------------------------------------------------------

Entry = tuple[Any, ...]


def tree(root: Path) -> dict[bytes, Entry]:
    """Every entry below ``root`` (bytes path -> kind, and content hash, mode or link target),
    symlinks not followed, FIFOs not opened."""
    out: dict[bytes, Entry] = {}
    base = os.fsencode(root)

    def walk(folder: bytes) -> None:
        with os.scandir(folder) as it:
            for e in it:
                rel = os.path.relpath(e.path, base)
                st = os.lstat(e.path)
                if stat.S_ISLNK(st.st_mode):
                    out[rel] = ("link", os.readlink(e.path))
                elif stat.S_ISDIR(st.st_mode):
                    out[rel] = ("dir", stat.S_IMODE(st.st_mode))
                    walk(e.path)
                elif stat.S_ISREG(st.st_mode):
                    with open(e.path, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()
                    out[rel] = ("file", digest, stat.S_IMODE(st.st_mode))
                else:
                    out[rel] = ("special", stat.S_IFMT(st.st_mode))

    walk(base)
    return out


def clean_hash(work: Path, rel: str) -> tuple[bool, str | None]:
    """Whether ``rel`` is a plain path (no symlink on it, no special file or folder at it) and
    the SHA-256 of the regular file there (None: absent)."""
    parts = rel.split("/")
    path = work
    for part in parts[:-1]:
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return True, None
        if not stat.S_ISDIR(st.st_mode):
            return False, None  # a symlink, or a file where a folder was
    path = path / parts[-1]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True, None
    if not stat.S_ISREG(st.st_mode):
        return False, None
    return True, hashlib.sha256(path.read_bytes()).hexdigest()


# -- a watchdog: a call that blocks on a FIFO is freed and reported ------------------------------


def free_fifos(fifos: list[Path]) -> None:
    """Free whatever blocks on one of ``fifos``: a reader (by opening it for writing) or a
    writer (by opening it for reading)."""
    for fifo in fifos:
        for flags in (os.O_WRONLY, os.O_RDONLY):
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, flags | os.O_NONBLOCK))


class Watchdog:
    """Runs calls with a deadline; past it, every FIFO it knows is opened for writing (which
    frees a reader blocked on it) and the call is recorded as hung."""

    def __init__(self, fifos: list[Path], seconds: float = 20.0) -> None:
        self.fifos = fifos
        self.seconds = seconds
        self.hung: list[str] = []

    def __call__(self, what: str, fn: Callable[[], T]) -> T:
        done = threading.Event()

        def free() -> None:
            while not done.wait(self.seconds):
                self.hung.append(what)
                free_fifos(self.fifos)

        t = threading.Thread(target=free, daemon=True)
        t.start()
        try:
            return fn()
        finally:
            done.set()
            t.join()
            assert not self.hung, f"hung: {self.hung}"


# -- the run ---------------------------------------------------------------------------------------


def open_cp(kind: str, home: Path) -> Checkpointer:
    if kind == "memory":
        return memory_checkpointer()
    if kind == "file":
        return file_checkpointer(home=home / "home")
    return sqlite_checkpointer(file=home / "store.db")


class Run:
    """One seeded run: the workspace, a folder outside it, the agent and what is checked."""

    def __init__(self, seed: int, kind: str, tmp: Path) -> None:
        self.rng = random.Random(seed)
        self.kind = kind
        self.tmp = tmp
        self.work = tmp / "work"
        self.outside = tmp / "outside"
        self.work.mkdir()
        self.outside.mkdir()
        (self.outside / "secret.txt").write_bytes(b"not yours\n")
        (self.outside / "dir").mkdir()
        (self.outside / "dir" / "x.txt").write_bytes(b"outside x\n")
        (self.outside / "dir" / "a.txt").write_bytes(b"outside a\n")
        os.mkfifo(self.outside / "pipe")
        self.outside_tree = tree(self.outside)
        self.fifos = [self.outside / "pipe"]
        self.watch = Watchdog(self.fifos)
        self.queue: collections.deque[Any] = collections.deque()
        self.cp = open_cp(kind, tmp)
        self.sessions = ["s0"]
        self.sid = "s0"
        self.agent = self._agent()
        self.prompts = 0
        self.stats: collections.Counter[str] = collections.Counter()

    def _agent(self) -> LiteAgent:
        def answer(_request: ModelRequest) -> Any:
            return self.queue.popleft()

        return create_lite_agent(
            model=scripted([answer] * 2000),
            model_name="m",
            workdir=self.work,
            checkpointer=self.cp,
            tools=TOOLS,
        )

    def close(self) -> None:
        self.agent.close()
        self.cp.close()

    def reopen(self) -> None:
        """Close the agent (and a persistent store) and open them again."""
        self.agent.close()
        if self.kind != "memory":
            self.cp.close()
            self.cp = open_cp(self.kind, self.tmp)
        self.agent = self._agent()
        self.stats["reopen"] += 1

    def check_outside(self) -> None:
        assert tree(self.outside) == self.outside_tree

    def log(self, sid: str | None = None) -> list[tuple[int, str, Any]]:
        return [(e.seq, e.kind, e.body) for e in self.cp.read(sid or self.sid)]

    # -- the agent ---------------------------------------------------------------------------

    def agent_call(self) -> Any:
        r, name = self.rng, self.rng.choice(NAMES)
        op = r.choice(["write", "write", "bytes", "edit", "delete", "bash"])
        if op == "write":
            return call("write_file", {"path": name, "content": f"v{r.randrange(4)}\n" * 3})
        if op == "bytes":
            return call("write_bytes", {"path": name, "data_hex": r.randbytes(24).hex()})
        if op == "edit":
            return call("edit_file", {"path": name, "old_string": "v", "new_string": "w"})
        if op == "delete":
            return call("delete_file", {"path": name})
        # A shell follows symlinks (out of the workspace too): not what is tested here.
        inside = [n for n in NAMES if self._resolves_inside(n)]
        if name not in inside:
            return call("read_file", {"path": name})
        other = shlex.quote(r.choice(inside))
        q = shlex.quote(name)
        command = r.choice(
            [
                f"mv -f {q} {other}",
                f"chmod {r.choice(['600', '755', '444'])} {q}",
                f"rm -f {q}",
                f"mkdir -p {shlex.quote(os.path.dirname(name) or '.')} && printf 'b' > {q}",
                f"mv -f {q} {q.upper()}",
            ]
        )
        # A FIFO the user put at a name blocks ``printf > fifo``, as in any shell: the tool's
        # timeout ends it (what is tested is that nothing of the library's own blocks).
        return call("bash", {"command": command + " 2>/dev/null; true", "timeout": 2})

    def send(self) -> None:
        for _ in range(self.rng.randint(0, 3)):
            self.queue.append(self.agent_call())
        self.queue.append(reply("done"))
        self.prompts += 1
        self.watch("send", lambda: self.agent.send(f"p{self.prompts}", session_id=self.sid))
        assert not self.queue
        self.stats["send"] += 1

    # -- the user ----------------------------------------------------------------------------

    def user(self) -> None:  # noqa: PLR0915 -- one branch per mischief
        """One thing a user does to the workspace."""
        r, work = self.rng, self.work
        rel = r.choice(NAMES)
        path = work / rel
        op = r.choice(
            [
                "edit",
                "edit",
                "create",
                "delete",
                "folder",
                "symlink_in",
                "symlink_out",
                "symlink_dir_out",
                "fifo",
                "chmod",
                "huge",
                "binary",
                "raw_name",
                "case_rename",
                "rmtree",
            ]
        )
        if self._through_link(rel):
            return  # the user's own writes never go outside through a symlinked folder
        self.stats[f"user {op}"] += 1
        with contextlib.suppress(OSError):
            if op in ("create", "folder", "symlink_in", "symlink_out", "fifo", "huge", "binary"):
                self._clear(path)
                path.parent.mkdir(parents=True, exist_ok=True)
            regular = path.is_file() and not path.is_symlink()
            if op == "edit" and regular:
                with open(path, "ab") as f:
                    f.write(b"user's line\n")
            elif op == "create":
                path.write_bytes(b"the user's own file\n")
            elif op == "delete":
                path.unlink()
            elif op == "folder":
                path.mkdir()
                (path / "inside").write_bytes(b"user's\n")
            elif op == "symlink_in":
                path.symlink_to(os.path.relpath(work / r.choice(NAMES), path.parent))
            elif op == "symlink_out":
                path.symlink_to(self.outside / r.choice(["secret.txt", "pipe", "missing"]))
            elif op == "symlink_dir_out":
                self._clear(work / "d")
                (work / "d").symlink_to(self.outside / "dir", target_is_directory=True)
            elif op == "fifo":
                os.mkfifo(path)
                self.fifos.append(path)
            elif op == "chmod" and (regular or (path.is_dir() and not path.is_symlink())):
                os.chmod(path, r.choice([0o000, 0o444, 0o755]))
            elif op == "huge":
                path.write_bytes(b"h" * (9 * 1024 * 1024))  # over the 8 MiB snapshot cap
            elif op == "binary":
                path.write_bytes(r.randbytes(64) + b"\x00")
            elif op == "raw_name" and not self._through_link("d/x"):
                raw = os.path.join(os.fsencode(work), r.choice(RAW_NAMES))
                os.makedirs(os.path.dirname(raw), exist_ok=True)
                with open(raw, "wb") as f:
                    f.write(b"a name that is not UTF-8\n")
            elif op in ("edit", "chmod", "raw_name"):
                pass
            elif op == "case_rename":
                a, b = work / "a.txt", work / "A.txt"
                src, dst = (a, b) if r.random() < 0.5 else (b, a)
                os.rename(src, dst)
            else:
                self._clear(work / "d")

    def _resolves_inside(self, rel: str) -> bool:
        root = os.path.realpath(self.work)
        return os.path.realpath(self.work / rel).startswith(root + os.sep)

    def _through_link(self, rel: str) -> bool:
        path = self.work
        for part in rel.split("/")[:-1]:
            path = path / part
            if path.is_symlink():
                return True
        return False

    @staticmethod
    def _clear(path: Path) -> None:
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)

    # -- time travel -------------------------------------------------------------------------

    def _plan(self, sid: str, seq: int) -> list[Any]:
        return plan_files(fold(list(self.cp.read(sid))), seq, self.cp.blobs)

    def _blob_hash(self, ref: str | None) -> str | None:
        return None if ref is None else hashlib.sha256(self.cp.blobs.get(ref)).hexdigest()

    def _must_refuse(self, plans: list[Any], root: Path | None = None) -> set[str]:
        """The files of the plan that are not as the agent last left them (by the model)."""
        out = set()
        for p in plans:
            clean, now = clean_hash(root or self.work, p.path)
            if p.unavailable or not clean or now != p.last_hash:
                out.add(p.path)
        return out

    def restore(self) -> None:
        cps = self.agent.list_checkpoints(self.sid)
        if not cps:
            return
        seq = self.rng.choice(cps).seq
        files = self.rng.random() < 0.8
        conversation = files is False or self.rng.random() < 0.8
        plans = self._plan(self.sid, seq) if files else []
        if self.rng.random() < 0.5:
            seen, log = tree(self.work), self.log()
            preview = self.watch(
                "preview",
                lambda: self.agent.restore(
                    self.sid, seq, files=files, conversation=conversation, dry_run=True
                ),
            )
            assert {p for p, _ in preview.refused if p} == self._must_refuse(plans)
            assert (tree(self.work), self.log()) == (seen, log)
            if self.rng.random() < 0.5:
                self.user()  # between the preview and the restore
        before, log = tree(self.work), self.log()
        must_refuse = self._must_refuse(plans)
        try:
            result = self.watch(
                "restore",
                lambda: self.agent.restore(self.sid, seq, files=files, conversation=conversation),
            )
        except RestoreRefusedError as e:
            self.stats["restore refused"] += 1
            assert tree(self.work) == before
            assert self.log() == log
            assert {p for p, _ in e.problems if p} == must_refuse, e  # noqa: PT017 -- the outcome decides what to check
            return
        self.stats["restore"] += 1
        assert not must_refuse, (must_refuse, result)
        after = tree(self.work)
        self._check_changed(before, after, {p.path: p.target for p in plans})
        assert result.restored_files == tuple(p.path for p in plans)
        if conversation:
            assert self.log() == log[: seq - 1]
        if result.branch is not None and self.rng.random() < 0.7:
            if self.rng.random() < 0.3:
                self.user()  # between the restore and its undo
            self._undo(before, log, after, result.restored_files, conversation)

    def _check_changed(
        self, before: dict[bytes, Entry], after: dict[bytes, Entry], targets: dict[str, Any]
    ) -> None:
        """Only the planned files changed, each to its target; folders may appear for them."""
        for rel, ref in targets.items():
            want = self._blob_hash(ref)
            got = after.get(os.fsencode(rel))
            if want is None:
                assert got is None, rel
            else:
                assert got is not None, rel
                assert got[:2] == ("file", want), rel
        planned = {os.fsencode(rel) for rel in targets}
        for key in set(before) | set(after):
            if key in planned:
                continue
            if key not in before and after[key][0] == "dir":
                continue  # a folder made for a file put back
            assert before.get(key) == after.get(key), key

    def _undo(
        self,
        before: dict[bytes, Entry],
        log: list[tuple[int, str, Any]],
        after: dict[bytes, Entry],
        restored: tuple[str, ...],
        conversation: bool,
    ) -> None:
        """Undo the restore that turned ``before`` into ``after``: refused (changing nothing)
        exactly when a file it put back is no longer as it left it, else everything back."""
        now, log_now = tree(self.work), self.log()
        must_refuse = set()
        for rel in restored:
            entry = after.get(os.fsencode(rel))
            clean, h = clean_hash(self.work, rel)
            if not clean or h != (None if entry is None else entry[1]):
                must_refuse.add(rel)
        try:
            self.watch("undo", lambda: self.agent.undo_restore(self.sid))
        except RestoreRefusedError as e:
            self.stats["undo refused"] += 1
            assert (tree(self.work), self.log()) == (now, log_now)
            assert {p for p, _ in e.problems if p} == must_refuse, e  # noqa: PT017 -- the outcome decides what to check
            return
        self.stats["undo"] += 1
        assert not must_refuse
        got = tree(self.work)
        keys = {os.fsencode(p) for p in restored}
        want = {k: v for k, v in now.items() if k not in keys}
        want.update({k: v for k, v in before.items() if k in keys})
        for key in set(want) | set(got):
            if key not in want and got[key][0] == "dir":
                continue  # a folder made for a file put back
            assert got.get(key) == want.get(key), key
        if conversation:
            assert self.log() == log
        else:  # a files-only restore's undo records both operations
            assert self.log()[: len(log_now)] == log_now

    def fork(self) -> None:
        cps = self.agent.list_checkpoints(self.sid)
        if not cps or len(self.sessions) >= 4:
            return
        seq = self.rng.choice(cps).seq
        if self.rng.random() < 0.5:
            self.sessions.append(self.agent.fork(self.sid, seq))
            self.stats["fork"] += 1
            return
        copy = self.tmp / f"copy{self.stats['fork to a copy'] + self.stats['fork refused']}"
        copy_tree(self.work, copy)
        plans = self._plan(self.sid, seq)
        before = tree(copy)
        must_refuse = self._must_refuse(plans, copy)
        sessions = {s.id for s in self.agent.list_sessions()}
        try:
            self.watch("fork", lambda: self.agent.fork(self.sid, seq, workdir=copy))
        except RestoreRefusedError as e:
            self.stats["fork refused"] += 1
            assert tree(copy) == before
            assert {p for p, _ in e.problems if p} == must_refuse, e  # noqa: PT017 -- the outcome decides what to check
            assert {s.id for s in self.agent.list_sessions()} == sessions
            return
        self.stats["fork to a copy"] += 1
        assert not must_refuse
        self._check_changed(before, tree(copy), {p.path: p.target for p in plans})

    def step(self) -> None:
        op = self.rng.choice(
            [
                "send",
                "send",
                "send",
                "user",
                "user",
                "user",
                "restore",
                "restore",
                "undo",
                "fork",
                "switch",
                "reopen",
            ]
        )
        if op == "send":
            self.send()
        elif op == "user":
            self.user()
        elif op == "restore":
            self.restore()
        elif op == "undo":
            before, log = tree(self.work), self.log()
            try:
                self.watch("undo", lambda: self.agent.undo_restore(self.sid))
                self.stats["plain undo"] += 1
            except LiteAgentError:
                assert tree(self.work) == before
                assert self.log() == log
        elif op == "fork":
            self.fork()
        elif op == "switch":
            self.sid = self.rng.choice(self.sessions)
        elif self.rng.random() < 0.3:
            self.reopen()
        assert tree(self.outside) == self.outside_tree, op


def copy_tree(src: Path, dst: Path) -> None:
    """A copy of the workspace as ``cp -a`` makes it, with FIFOs made anew (never read)."""
    dst.mkdir()
    for folder, dirs, files in os.walk(os.fsencode(src)):
        rel = os.path.relpath(folder, os.fsencode(src))
        target = os.path.join(os.fsencode(dst), rel)
        for name in [*dirs, *files]:
            s, d = os.path.join(folder, name), os.path.join(target, name)
            st = os.lstat(s)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
                with contextlib.suppress(ValueError):
                    dirs.remove(name)  # not followed
            elif stat.S_ISDIR(st.st_mode):
                os.mkdir(d)
            elif stat.S_ISFIFO(st.st_mode):
                os.mkfifo(d)
            elif stat.S_ISREG(st.st_mode):
                shutil.copyfile(s, d)
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(d, stat.S_IMODE(st.st_mode))


def hunt(seed: int, kind: str, tmp: Path, steps: int) -> collections.Counter[str]:
    """One seeded run of ``steps`` random steps, then a send that must work."""
    run = Run(seed, kind, tmp)
    try:
        for _ in range(steps):
            run.step()
        run.sid = run.rng.choice(run.sessions)
        run.send()  # never wedged
        run.check_outside()
    finally:
        free_fifos(run.fifos)  # nothing may be left blocked on one
        run.close()
    return run.stats


@pytest.mark.parametrize("kind", ["memory", "file", "sqlite"])
@pytest.mark.parametrize("seed", range(6))
def test_hostile_workspace_time_travel(seed: int, kind: str, tmp_path: Path) -> None:
    """Seeded random agent turns, user mischief, restores, undos and forks keep every
    property of the module docstring."""
    hunt(seed, kind, tmp_path, 80)


@pytest.mark.soak
@pytest.mark.parametrize("kind", ["memory", "file", "sqlite"])
@pytest.mark.parametrize("seed", range(40))
def test_hostile_workspace_time_travel_soak(seed: int, kind: str, tmp_path: Path) -> None:
    """The same, longer and with more seeds (``pytest -m soak``)."""
    hunt(10_000 + seed, kind, tmp_path, 200)


# -- regressions: the smallest deterministic cases the hunt found ---------------------------------


def _one_write(tmp: Path) -> tuple[LiteAgent, Path, int]:
    """An agent whose session wrote ``a.txt`` in its first prompt (its checkpoint ``seq``)."""
    work = tmp / "work"
    work.mkdir()
    agent = create_lite_agent(
        model=scripted(
            [
                call("write_file", {"path": "a.txt", "content": "agent\n"}),
                reply("ok"),
                call("write_file", {"path": "b.txt", "content": "b\n"}),
                reply("ok"),
                reply("still works"),
            ]
        ),
        model_name="m",
        workdir=work,
        checkpointer=memory_checkpointer(),
        tools=TOOLS,
    )
    agent.resume("s")
    agent.send("write a")
    return agent, work, agent.list_checkpoints("s")[0].seq


def test_a_fifo_at_an_agent_file_is_refused_without_hanging(tmp_path: Path) -> None:
    """A FIFO the user put where the agent wrote a file: the preview and the restore used to
    block for ever opening it (a blocking read of a FIFO without a writer); now both refuse,
    naming it, and change nothing."""
    agent, work, seq = _one_write(tmp_path)
    (work / "a.txt").unlink()
    os.mkfifo(work / "a.txt")
    watch = Watchdog([work / "a.txt"], seconds=5)
    reason = "the path is now a FIFO, socket or device, not a regular file"
    with agent:
        preview = watch("preview", lambda: agent.restore("s", seq, dry_run=True))
        assert preview.refused == (("a.txt", reason),)
        with pytest.raises(RestoreRefusedError) as info:
            watch("restore", lambda: agent.restore("s", seq))
        assert info.value.problems == [("a.txt", reason)]
        assert stat.S_ISFIFO(os.lstat(work / "a.txt").st_mode)


def test_a_preview_never_reads_through_a_symlink_to_outside(tmp_path: Path) -> None:
    """An agent's file replaced by a symlink to a FIFO outside the workspace: the preview used
    to read what the symlink points to (blocking on the FIFO; a symlink to /dev/zero or a huge
    file read it whole), only to report its size. Now it refuses without opening it."""
    agent, work, seq = _one_write(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    (work / "a.txt").unlink()
    (work / "a.txt").symlink_to(tmp_path / "pipe")
    with agent:
        preview = Watchdog([tmp_path / "pipe"], seconds=5)(
            "preview", lambda: agent.restore("s", seq, dry_run=True)
        )
        (change,) = preview.changes
        assert change.size_now is None
        assert [path for path, _ in preview.refused] == ["a.txt"]


def test_a_tool_call_on_a_fifo_does_not_hang_the_workspace(tmp_path: Path) -> None:
    """``write_file`` on a FIFO the user made: the tool refuses (it opens without blocking) but
    the snapshot of the file before it used to block for ever in the workspace's snapshot
    actor, hanging the send and every later tool call of every session there."""
    agent, work, _ = _one_write(tmp_path)
    os.mkfifo(work / "b.txt")
    with agent:
        result = Watchdog([work / "b.txt"], seconds=5)("send", lambda: agent.send("write b"))
        assert result.text == "ok"
        assert agent.send("again").text == "still works"


def test_an_unreadable_file_is_a_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the user made unreadable (``chmod 000`` as a non-root user): the restore, its
    preview and an undo used to raise a bare ``PermissionError`` (not a ``LiteAgentError``);
    now they refuse naming the file. (Simulated: root reads any file.)"""
    agent, work, seq = _one_write(tmp_path)
    real_open = os.open

    def denied(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).endswith("a.txt"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    with agent:
        monkeypatch.setattr(os, "open", denied)
        reason = "it cannot be read: Permission denied"
        assert agent.restore("s", seq, dry_run=True).refused == (("a.txt", reason),)
        with pytest.raises(RestoreRefusedError) as info:
            agent.restore("s", seq)
        assert info.value.problems == [("a.txt", reason)]
        monkeypatch.undo()
        agent.restore("s", seq)
        assert not (work / "a.txt").exists()
        (work / "a.txt").write_bytes(b"the user's\n")  # the undo would delete it: refused
        monkeypatch.setattr(os, "open", denied)
        with pytest.raises(RestoreRefusedError) as info:
            agent.undo_restore("s")
        assert info.value.problems == [("a.txt", reason)]
        monkeypatch.undo()
        assert (work / "a.txt").read_bytes() == b"the user's\n"


def test_undo_keeps_the_mode_of_a_file_it_recreates(tmp_path: Path) -> None:
    """A file the agent created and the user made executable: the restore deletes it, and its
    undo brings it back with its content and its mode (it used to come back 0644: the restore
    records kept no mode)."""
    agent, work, seq = _one_write(tmp_path)
    os.chmod(work / "a.txt", 0o755)  # noqa: S103 -- an executable file is the case
    with agent:
        agent.restore("s", seq)
        assert not (work / "a.txt").exists()
        agent.undo_restore("s")
        assert stat.S_IMODE(os.stat(work / "a.txt").st_mode) == 0o755
        assert (work / "a.txt").read_bytes() == b"agent\n"


@pytest.mark.parametrize("mode", [0o755, 0o600, 0o444])
def test_a_restore_recreates_a_deleted_file_with_its_mode(tmp_path: Path, mode: int) -> None:
    """A script the user had (executable, private, read-only) that the agent deleted: the
    restore brings it back with the mode it had, as its snapshot recorded it, and an undo of
    that restore deletes it again."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(work / "run.sh", mode)
    agent = create_lite_agent(
        model=scripted([call("delete_file", {"path": "run.sh"}), reply("deleted")]),
        model_name="m",
        workdir=work,
        checkpointer=memory_checkpointer(),
        tools=TOOLS,
    )
    with agent:
        agent.resume("s")
        agent.send("delete run.sh")
        assert not (work / "run.sh").exists()
        agent.restore("s", agent.list_checkpoints("s")[0].seq)
        assert stat.S_IMODE(os.stat(work / "run.sh").st_mode) == mode
        assert (work / "run.sh").read_bytes() == b"#!/bin/sh\necho hi\n"
        agent.undo_restore("s")
        assert not (work / "run.sh").exists()
