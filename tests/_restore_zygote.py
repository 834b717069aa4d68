"""What the SIGKILL tests of restore and undo share: a long-lived helper process that forks one
worker per job, the session each worker builds, and the states to expect after a kill."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from _restore_tools import workspace

from liteagent.eventlog import Checkpointer, StoredEvent, file_checkpointer, sqlite_checkpointer

__all__ = [
    "SID",
    "ZYGOTE",
    "Round",
    "Zygote",
    "content_digest",
    "digest",
    "files_of",
    "open_checkpointer",
    "run_round",
    "session_job",
    "simulate",
]

SID = "restore-faults"

# A long-lived helper process imports liteagent once (the anthropic client alone takes seconds)
# and forks one worker per job. A worker builds the session, says "restoring" and restores; it
# then waits to be killed. In the modes "undo" and "undo_die_in_write" it restores first, and
# what it announces and then does is the undo of that restore. Workers of the modes ending in
# "die_in_write" kill themselves at the first rename of a file into the workspace.

ZYGOTE = textwrap.dedent(
    """
    import hashlib, json, os, signal, sys, time
    import msgspec
    from liteagent.eventlog import file_checkpointer, sqlite_checkpointer
    from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
    from liteagent.providers import scripted
    from liteagent.sdk import create_lite_agent

    def say(*words):
        sys.stdout.write(" ".join(str(w) for w in words) + "\\n")
        sys.stdout.flush()

    def digest(events):
        return hashlib.sha256(msgspec.json.encode(events)).hexdigest()

    def content(events):
        return hashlib.sha256(
            msgspec.json.encode([(e.seq, e.kind, e.body) for e in events])
        ).hexdigest()

    def run(job):
        ids = iter(range(10**6))
        script = []
        for p, calls in enumerate(job["prompts"]):
            script += [AssistantMessage(content=(ToolUseBlock(f"toolu_{next(ids)}", n, i),),
                                        stop_reason="tool_use") for n, i in calls]
            script.append(AssistantMessage(content=(TextBlock(f"p{p}"),), stop_reason="end_turn"))
        if job["backend"] == "file":
            cp = file_checkpointer(job["store"])
        else:
            cp = sqlite_checkpointer(job["store"])
        agent = create_lite_agent(model=scripted(script), model_name="m",
                                  workdir=job["work"], checkpointer=cp)
        agent.resume(job["session"])
        for p in range(len(job["prompts"])):
            agent.send(f"p{p}")
        seq = agent.list_checkpoints()[0].seq
        events = list(cp.read(job["session"]))
        undo = job["mode"].startswith("undo")
        if undo:  # restore first; the undo is what gets killed
            agent.restore(job["session"], seq)
            restored = list(cp.read(job["session"]))
        if job["mode"].endswith("die_in_write"):
            real = os.replace
            def dying(src, dst, *args, **kwargs):
                if os.fspath(dst).startswith(job["work"]):
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(src, dst, *args, **kwargs)
            os.replace = dying
        if undo:
            say("restoring", seq, content(restored), content(events))
        else:
            say("restoring", seq, digest(events), digest(events[: seq - 1]))
        start = time.monotonic()
        if undo:
            agent.undo_restore(job["session"])
        else:
            agent.restore(job["session"], seq)
        say("restored", time.monotonic() - start)
        time.sleep(300)

    while line := sys.stdin.readline():
        pid = os.fork()
        if pid == 0:
            try:
                run(json.loads(line))
            except BaseException as e:
                say("error", repr(e).replace("\\n", " "))
            finally:
                os._exit(1)
        say("pid", pid)
        say("exit", os.waitpid(pid, 0)[1])
    """
)


class Zygote:
    """The parent's side of the helper process: run one job, killing its worker when told."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def _line(self) -> list[str]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the helper process ended"
        words = line.split()
        assert "error" != words[0], line
        return words

    def run(self, job: dict[str, Any], kill_after: float | None) -> dict[str, list[str]]:
        """Start ``job``; SIGKILL its worker ``kill_after`` seconds after it says "restoring"
        (``None``: after it says "restored"; a "die_in_write" worker kills itself). Returns the
        worker's messages by their first word."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        said: dict[str, list[str]] = {}
        try:
            while not ("pid" in said and "restoring" in said):
                words = self._line()
                said[words[0]] = words[1:]
            if not job["mode"].endswith("die_in_write"):
                if kill_after is None:
                    while "restored" not in said:
                        words = self._line()
                        said[words[0]] = words[1:]
                else:
                    time.sleep(kill_after)
                os.kill(int(said["pid"][0]), signal.SIGKILL)
            while "exit" not in said:
                words = self._line()
                said[words[0]] = words[1:]
        except BaseException:
            if "pid" in said and "exit" not in said:
                os.kill(int(said["pid"][0]), signal.SIGKILL)
                while self._line()[0] != "exit":
                    pass
            raise
        status = int(said["exit"][0])
        assert os.WIFSIGNALED(status)
        assert signal.SIGKILL == os.WTERMSIG(status)
        return said


def digest(events: list[StoredEvent]) -> str:
    """What the worker prints for a log."""
    return hashlib.sha256(msgspec.json.encode(events)).hexdigest()


def content_digest(events: list[StoredEvent]) -> str:
    """What the worker prints for a log in the undo modes (without the times: events an undo
    brings back carry the time of the undo)."""
    return hashlib.sha256(
        msgspec.json.encode([(e.seq, e.kind, e.body) for e in events])
    ).hexdigest()


def _content(rng: random.Random, label: str) -> str:
    return f"{label}\nmarker {label}\n" + "".join(rng.choices("abcdefgh\n", k=30_000))


def session_job(rng: random.Random) -> tuple[dict[str, str], list[list[Any]]]:
    """The user's files (30), and three prompts that change 55 files: overwrite, create, edit,
    delete."""
    initial = {f"user/{i:02} ü.txt": _content(rng, f"user {i}") for i in range(30)}
    p1: list[Any] = [
        ("write_file", {"path": f"user/{i:02} ü.txt", "content": _content(rng, f"v2 {i}")})
        for i in range(15)
    ]
    p1 += [
        ("write_file", {"path": f"new/-{i:02}.txt", "content": _content(rng, f"new {i}")})
        for i in range(15)
    ]
    p2: list[Any] = [("delete_file", {"path": f"user/{i:02} ü.txt"}) for i in range(15, 25)]
    p2 += [
        (
            "edit_file",
            {
                "path": f"user/{i:02} ü.txt",
                "old_string": f"marker user {i}\n",
                "new_string": "edited\n",
            },
        )
        for i in range(25, 30)
    ]
    p2 += [
        ("write_file", {"path": f"new/-{i:02}.txt", "content": _content(rng, f"new {i}")})
        for i in range(15, 25)
    ]
    p3: list[Any] = [
        ("write_file", {"path": f"new/-{i:02}.txt", "content": _content(rng, f"v3 {i}")})
        for i in range(10)
    ]
    p3 += [("delete_file", {"path": f"new/-{i:02}.txt"}) for i in range(10, 15)]
    return initial, [p1, p2, p3]


def simulate(files: dict[str, bytes], prompts: list[list[Any]]) -> dict[str, bytes]:
    """The workspace after the prompts' tool calls."""
    out = dict(files)
    for name, input in (c for calls in prompts for c in calls):
        if name == "write_file":
            out[input["path"]] = input["content"].encode()
        elif name == "delete_file":
            del out[input["path"]]
        else:
            text = out[input["path"]].decode()
            assert 1 == text.count(input["old_string"])
            out[input["path"]] = text.replace(input["old_string"], input["new_string"]).encode()
    return out


_TEMP = ".liteagent-put-"  # put_file's temp names: .liteagent-put-<16 hex of the name>-<8 hex>


def files_of(work: Path) -> dict[str, bytes]:
    """Every file of the workspace, temp files of an interrupted write included (finishing or
    rolling back a restore removes them)."""
    return workspace(work)


@dataclass
class Round:
    """One killed worker: what it said, its workspace and store, the states to expect."""

    said: dict[str, list[str]]
    work: Path
    store: Path
    initial: dict[str, bytes]  # the workspace before the first prompt (a completed restore)
    before: dict[str, bytes]  # the workspace before the restore

    @property
    def seq(self) -> int:
        return int(self.said["restoring"][0])

    @property
    def before_digest(self) -> str:
        return self.said["restoring"][1]

    @property
    def done_digest(self) -> str:
        return self.said["restoring"][2]


def run_round(
    zygote: Zygote,
    root: Path,
    backend: str,
    rng: random.Random,
    *,
    kill_after: float | None,
    mode: str = "restore",
) -> Round:
    """Lay out a fresh workspace and run one job in a worker."""
    work = root / "work"
    initial, prompts = session_job(rng)
    for path, text in initial.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    store = root / ("store" if backend == "file" else "log.db")
    job = {
        "backend": backend,
        "store": str(store),
        "work": str(work),
        "session": SID,
        "prompts": prompts,
        "mode": mode,
    }
    said = zygote.run(job, kill_after)
    files = {p: t.encode() for p, t in initial.items()}
    return Round(said, work, store, files, simulate(files, prompts))


def open_checkpointer(backend: str, store: Path) -> Checkpointer:
    """The backend's checkpointer on ``store``."""
    return file_checkpointer(store) if backend == "file" else sqlite_checkpointer(store)
