"""Real OS processes for the session-lease tests.

Importing liteagent takes seconds, so one long-lived fork server imports it once and forks a
fresh child per job (this file run as a script is that server). A child opens its own
checkpointer on the shared store, creates an agent whose scripted model follows the job's steps,
sends one prompt to the shared session, and reports through files in the job's coordination
folder; it never writes to the server's stdout. Files are the only synchronisation: a child
*signals* by creating a file (atomically) and *waits* by polling for one, so a test makes an
overlap certain by making one side wait for the other's file, never by sleeping.

A step of the scripted model is a dict:

- ``enter``: a file to signal when the model is called; it holds the session's log as this
  process then reads it (``[seq, kind, repr(body)]`` per event: everything its appends have
  acknowledged so far, since no append is in flight during a model call);
- ``record``: a file to write the request's messages to (as :func:`describe_messages` gives);
- ``block``: a file to wait for before answering (``"forever"``: until killed);
- ``tools``: the calls to answer with (``{"name": ..., "input": ...}``); without it, ``text``
  is the final answer.

The ``mark`` tool (``label``, optional ``enter`` and ``block`` as above) appends its label to
``tool-<label>`` in the folder, so a test sees which process's tools ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from liteagent.eventlog import Checkpointer, file_checkpointer, sqlite_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import LiteAgent, create_lite_agent
from liteagent.tools import ToolContext, bash, tool

WAIT = 60.0  # seconds any wait for another process's file may take before the test fails
_POLL = 0.001


# -- files as signals (both sides) ----------------------------------------------------------------


def signal_file(folder: Path, name: str, content: str = "") -> None:
    """Create ``folder/name`` holding ``content``, atomically."""
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(content, encoding="utf-8")
    os.replace(tmp, folder / name)


def wait_file(folder: Path, name: str, timeout: float = WAIT) -> str:
    """Wait until ``folder/name`` exists; return its content (AssertionError on timeout)."""
    path = folder / name
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not appear within {timeout} s")
        time.sleep(_POLL)
    return path.read_text(encoding="utf-8")


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` until it holds (AssertionError naming ``what`` on timeout)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(_POLL)


def describe_messages(messages: Any) -> list[list[Any]]:
    """A request's messages as JSON: ``[role, [[block type, text or tool ids], ...]]``."""
    out: list[list[Any]] = []
    for m in messages:
        blocks: list[list[Any]] = []
        for b in m.content:
            kind = type(b).__name__
            if kind == "TextBlock":
                blocks.append([kind, b.text])
            elif kind == "ToolUseBlock":
                blocks.append([kind, b.id])
            elif kind == "ToolResultBlock":
                blocks.append([kind, b.tool_use_id, str(b.content)])
            else:
                blocks.append([kind, ""])
        out.append([m.role, blocks])
    return out


# -- the test's side ------------------------------------------------------------------------------


class ForkServer:
    """The fork server (module docstring): ``start(job)`` forks a child, ``wait(pid)`` reaps
    it and returns its exit code (negative: killed by that signal)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children: set[int] = set()

    def _ask(self, request: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server ended"
        return json.loads(line)

    def start(self, **job: Any) -> int:
        """Fork a child running ``job`` (see :func:`run_job`); return its pid."""
        pid: int = self._ask({"op": "start", "job": job})["pid"]
        self.children.add(pid)
        return pid

    def wait(self, pid: int, timeout: float = WAIT) -> int | None:
        """Reap child ``pid``; its exit code, or None when it did not end within ``timeout``
        (it is then killed)."""
        code: int | None = self._ask({"op": "wait", "pid": pid, "timeout": timeout})["code"]
        self.children.discard(pid)
        return code

    def kill(self, pid: int) -> int | None:
        """SIGKILL child ``pid`` and reap it; its exit code."""
        os.kill(pid, signal.SIGKILL)
        return self.wait(pid)

    def kill_all(self) -> None:
        """SIGKILL and reap every child not reaped yet (a failed test's leftovers)."""
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.wait(pid)

    def close(self) -> None:
        """Stop the server."""
        self.kill_all()
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def result(folder: Path, name: str, timeout: float = WAIT) -> dict[str, Any]:
    """The result a child reported (``out-<name>.json``), waiting for it."""
    report: dict[str, Any] = json.loads(wait_file(folder, f"out-{name}.json", timeout))
    return report


# -- the child's side -----------------------------------------------------------------------------


def open_store(backend: str, store: str | Path) -> Checkpointer:
    """A checkpointer on the shared store (``backend`` is "file" or "sqlite")."""
    if backend == "sqlite":
        return sqlite_checkpointer(store)
    return file_checkpointer(store)


def _checkpointer(job: dict[str, Any]) -> Checkpointer:
    return open_store(job["backend"], job["store"])


def _log_rows(cp: Checkpointer, session_id: str) -> str:
    return json.dumps([[e.seq, e.kind, repr(e.body)] for e in cp.read(session_id)])


def _block(folder: Path, name: str | None) -> None:
    if not name:
        return
    if name == "forever":
        while True:
            time.sleep(3600)
    wait_file(folder, name)


def _agent(job: dict[str, Any], cp: Checkpointer) -> LiteAgent:
    folder, session, name = Path(job["dir"]), job["session"], job["name"]

    @tool
    def mark(label: str, enter: str = "", block: str = "", *, ctx: ToolContext) -> str:
        """Leave a mark in the test's folder."""
        with open(folder / f"tool-{label}", "a", encoding="utf-8") as f:
            f.write(f"{ctx.tool_call_id}\n")
        if enter:
            signal_file(folder, enter, _log_rows(cp, session))
        _block(folder, block)
        return f"marked {label}"

    def step(index: int, spec: dict[str, Any]) -> Any:
        def answer(request: ModelRequest) -> AssistantMessage:
            if spec.get("record"):
                signal_file(folder, spec["record"], json.dumps(describe_messages(request.messages)))
            if spec.get("enter"):
                signal_file(folder, spec["enter"], _log_rows(cp, session))
            _block(folder, spec.get("block"))
            calls = spec.get("tools")
            if calls:
                return AssistantMessage(
                    content=tuple(
                        ToolUseBlock(f"toolu_{name}_{index}_{j}", c["name"], c["input"])
                        for j, c in enumerate(calls)
                    ),
                    stop_reason="tool_use",
                )
            return AssistantMessage(
                content=(TextBlock(spec.get("text", f"{name} done")),), stop_reason="end_turn"
            )

        return answer

    return create_lite_agent(
        model=scripted([step(i, s) for i, s in enumerate(job["steps"])]),
        model_name="m",
        workdir=job["work"],
        checkpointer=cp,
        tools=[mark, bash],
        context=bool(job.get("context", False)),
    )


def _short_leases(cp: Checkpointer, ttl: float) -> None:
    """Make the leases the agent takes on ``cp`` expire after ``ttl`` seconds unrenewed (the
    agent takes them with the default ttl)."""
    acquire = cp.acquire_lease

    def acquire_lease(session_id: str, *, owner: str | None = None, ttl: float = ttl) -> Any:
        return acquire(session_id, owner=owner, ttl=ttl)

    cp.acquire_lease = acquire_lease  # type: ignore[method-assign]


def _pause_in(job: dict[str, Any], cp: Checkpointer) -> None:
    """``pause``: ``[module, function, n, when]``: the ``n``-th call of ``module.function``
    (module ``"checkpointer"``: of the child's checkpointer's method) signals ``paused`` and
    waits for ``resume`` (a test stops the process there) ``"before"`` it runs or ``"after"``
    it returned."""
    if not job.get("pause"):
        return
    module_name, function, n, when = job["pause"]
    module: Any = cp if module_name == "checkpointer" else sys.modules[module_name]
    original = getattr(module, function)
    calls = [0]
    folder = Path(job["dir"])

    def pause() -> None:
        signal_file(folder, "paused")
        wait_file(folder, "resume")

    def paused(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == n and when == "before":
            pause()
        value = original(*args, **kwargs)
        if calls[0] == n and when == "after":
            pause()
        return value

    setattr(module, function, paused)


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one child's job: open the store, make the agent, optionally meet the others at the
    barrier (signal ``ready-<name>``, wait for ``go``), then do the job's ``op``: ``send``
    the prompt (the default), ``delete`` the session, or ``restore`` it to its first
    checkpoint; report the outcome. ``lease_ttl`` shortens the leases the agent takes;
    ``pause`` (see :func:`_pause_in`) stops the child at a chosen call."""
    folder, name = Path(job["dir"]), job["name"]
    cp = _checkpointer(job)
    if job.get("lease_ttl"):
        _short_leases(cp, job["lease_ttl"])
    _pause_in(job, cp)
    try:
        with _agent(job, cp) as agent:
            agent.resume(job["session"])
            if job.get("barrier"):
                signal_file(folder, f"ready-{name}")
                wait_file(folder, "go")
            op = job.get("op", "send")
            try:
                if op == "delete":
                    agent.delete_session(job["session"])
                    return {"outcome": "ok", "text": "deleted"}
                if op == "restore":
                    seq = agent.list_checkpoints()[0].seq
                    done = agent.restore(job["session"], seq)
                    return {"outcome": "ok", "text": ",".join(done.restored_files)}
                answer = agent.send(job["prompt"])
            except Exception as e:  # noqa: BLE001 -- reported to the test, which judges it
                return {"outcome": "error", "type": type(e).__name__, "message": str(e)}
            return {"outcome": "ok", "text": answer.text}
    finally:
        cp.close()


def _child(job: dict[str, Any]) -> None:
    folder, name = Path(job["dir"]), job["name"]
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # the server's stdout is its protocol
        err = os.open(folder / f"stderr-{name}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(err, 2)
        report = run_job(job)
    except BaseException:  # noqa: BLE001 -- reported to the test
        report = {"outcome": "crash", "type": "", "message": traceback.format_exc()}
        code = 1
    try:
        report["pid"] = os.getpid()
        signal_file(folder, f"out-{name}.json", json.dumps(report))
    finally:
        os._exit(code)


def _wait(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(_POLL)


def serve() -> None:
    """The fork server's loop (liteagent is imported once, above): one JSON request per line
    on stdin, one reply per line."""
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "start":
            pid = os.fork()
            if pid == 0:
                _child(request["job"])
            reply: dict[str, Any] = {"pid": pid}
        else:
            reply = {"code": _wait(request["pid"], request["timeout"])}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


@contextmanager
def fork_server() -> Iterator[ForkServer]:
    """A fork server for a block."""
    server = ForkServer()
    try:
        yield server
    finally:
        server.close()


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    serve()
