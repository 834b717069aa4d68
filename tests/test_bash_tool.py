"""The bash tool on real processes: exit codes, timeouts and cancellation that stop the whole
process group, the output cap, and background mode."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from liteagent.eventlog import CancelToken
from liteagent.tools import ToolContext, ToolOutput, bash
from liteagent.tools._bash import OUTPUT_LIMIT

pytestmark = pytest.mark.processes


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    """A context for calls in a fresh workspace."""
    return ToolContext(workdir=tmp_path, session_id="s1", tool_call_id="call-1")


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process. A zombie counts as gone: this machine's PID 1 does not
    reap orphans, so a killed grandchild can linger as a zombie that ``os.kill(pid, 0)`` finds."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def _pid_from(path: Path) -> int:
    """The pid the command wrote to ``path``."""
    return int(path.read_text().strip())


def test_output_and_exit_code_zero(ctx: ToolContext) -> None:
    """A successful command returns its output and exit code 0, not an error."""
    assert ToolOutput("hello\n[exit code 0]") == bash.run({"command": "echo hello"}, ctx)


def test_nonzero_exit_is_an_error(ctx: ToolContext) -> None:
    """A non-zero exit code is reported and makes the output an error."""
    assert ToolOutput("oops\n[exit code 3]", is_error=True) == bash.run(
        {"command": "echo oops; exit 3"}, ctx
    )


def test_stdout_and_stderr_are_interleaved(ctx: ToolContext) -> None:
    """stderr comes in the same stream, in order."""
    out = bash.run({"command": "echo one; echo two >&2; echo three"}, ctx)
    assert "one\ntwo\nthree\n[exit code 0]" == out.content


def test_runs_in_the_workspace(tmp_path: Path, ctx: ToolContext) -> None:
    """The working folder is the workspace's real path."""
    out = bash.run({"command": "pwd"}, ctx)
    assert f"{os.path.realpath(tmp_path)}\n[exit code 0]" == out.content


def test_stdin_is_empty(ctx: ToolContext) -> None:
    """A command reading stdin gets end-of-file at once instead of hanging."""
    assert ToolOutput("(no output)\n[exit code 0]") == bash.run({"command": "cat"}, ctx)


def test_killed_by_a_signal_is_reported(ctx: ToolContext) -> None:
    """A shell killed by a signal names the signal."""
    out = bash.run({"command": "kill -KILL $$"}, ctx)
    assert ToolOutput("(no output)\n[killed by signal SIGKILL]", is_error=True) == out


def test_timeout_kills_the_process_group(tmp_path: Path, ctx: ToolContext) -> None:
    """On timeout the shell and the child it started are both stopped."""
    started = time.monotonic()
    out = bash.run({"command": "sleep 30 & echo $! > child.pid; wait", "timeout": 0.5}, ctx)
    elapsed = time.monotonic() - started
    child = _pid_from(tmp_path / "child.pid")
    assert (True, True, False, True) == (
        out.is_error,
        "timed out after 0.5 s" in out.content,
        _running(child),
        elapsed < 10,  # a hang guard: the child sleeps 30 s
    )


def test_timeout_kills_a_group_that_ignores_sigterm(tmp_path: Path, ctx: ToolContext) -> None:
    """Processes that ignore SIGTERM get SIGKILL after the grace period."""
    command = "trap '' TERM; sleep 30 & echo $! > child.pid; wait"
    out = bash.run({"command": command, "timeout": 0.3}, ctx)
    child = _pid_from(tmp_path / "child.pid")
    assert (True, False) == (out.is_error, _running(child))


def test_leftover_background_processes_are_stopped(tmp_path: Path, ctx: ToolContext) -> None:
    """A process the command left running in its group is stopped when the shell exits."""
    started = time.monotonic()
    out = bash.run({"command": "sleep 30 & echo $! > child.pid; echo done"}, ctx)
    child = _pid_from(tmp_path / "child.pid")
    assert ("done\n[exit code 0]", False, True) == (
        out.content,
        _running(child),
        time.monotonic() - started < 10,  # a hang guard: the child sleeps 30 s
    )


def _in_thread(fn: Callable[[], ToolOutput]) -> tuple[threading.Thread, list[ToolOutput]]:
    """Run ``fn`` in a thread; its result lands in the returned list."""
    results: list[ToolOutput] = []
    thread = threading.Thread(target=lambda: results.append(fn()))
    thread.start()
    return thread, results


def test_cancel_stops_the_command_within_a_second(tmp_path: Path) -> None:
    """ctx.cancel stops a running command and its children within about a second."""
    token = CancelToken()
    ctx = ToolContext(workdir=tmp_path, session_id="s1", tool_call_id="c", cancel=token)
    command = "sleep 30 & echo $! > child.pid; wait"
    thread, results = _in_thread(lambda: bash.run({"command": command}, ctx))
    deadline = time.monotonic() + 5
    while not (tmp_path / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # let the shell write the pid completely
    cancelled_at = time.monotonic()
    token.cancel("user pressed stop")
    thread.join(timeout=5)
    elapsed = time.monotonic() - cancelled_at
    child = _pid_from(tmp_path / "child.pid")
    assert (True, True, False, True) == (
        results[0].is_error,
        "cancelled (user pressed stop)" in results[0].content,
        _running(child),
        elapsed < 10,  # a hang guard: the child sleeps 30 s
    )


def test_a_cancelled_token_does_not_start_the_command(tmp_path: Path) -> None:
    """A call whose token is already cancelled runs nothing."""
    token = CancelToken()
    token.cancel()
    ctx = ToolContext(workdir=tmp_path, session_id="s1", tool_call_id="c", cancel=token)
    out = bash.run({"command": "touch ran"}, ctx)
    assert (True, False) == (out.is_error, (tmp_path / "ran").exists())


def test_output_is_capped_keeping_head_and_tail(ctx: ToolContext) -> None:
    """A long output keeps its start and end, with a marker saying how much was left out."""
    command = "echo START; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END"
    out = bash.run({"command": command}, ctx)
    assert (True, True, True, True) == (
        out.content.startswith("START\nxxx"),
        out.content.endswith("xxx\nEND\n[exit code 0]"),
        "bytes of output omitted" in out.content,
        len(out.content) < OUTPUT_LIMIT + 200,
    )


def test_missing_workspace_is_an_error(tmp_path: Path) -> None:
    """A workspace that does not exist is reported, not raised."""
    ctx = ToolContext(workdir=tmp_path / "gone", session_id="s1", tool_call_id="c")
    out = bash.run({"command": "true"}, ctx)
    assert (True, True) == (out.is_error, out.content.startswith("cannot start the shell"))


def test_timeout_above_the_maximum_is_refused(ctx: ToolContext) -> None:
    """timeout is at most 600 seconds; the error names the field."""
    out = bash.run({"command": "true", "timeout": 601}, ctx)
    assert (True, True) == (out.is_error, "$.timeout" in out.content)


def test_bash_declares_no_changed_paths(ctx: ToolContext) -> None:
    """Shell commands are not snapshotted."""
    assert [] == bash.changed_paths({"command": "rm -rf src"}, ctx)


def test_background_needs_a_starter(ctx: ToolContext) -> None:
    """Without ctx.start_background, background mode is an error."""
    out = bash.run({"command": "true", "run_in_background": True}, ctx)
    assert (True, True) == (out.is_error, "background tasks are not available" in out.content)


class _Starter:
    """A start_background that records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Callable[[CancelToken], ToolOutput]]] = []

    def __call__(self, description: str, work: Callable[[CancelToken], ToolOutput]) -> str:
        self.calls.append((description, work))
        return f"task-{len(self.calls)}"


def test_background_returns_the_task_id_at_once(tmp_path: Path) -> None:
    """Background mode hands the work to start_background and returns its task id."""
    starter = _Starter()
    ctx = ToolContext(tmp_path, "s1", "c", start_background=starter)
    out = bash.run({"command": "echo hi > out.txt", "run_in_background": True}, ctx)
    assert (False, True, ["echo hi > out.txt"], False) == (
        out.is_error,
        "task-1" in out.content,
        [d for d, _ in starter.calls],
        (tmp_path / "out.txt").exists(),
    )


def test_background_work_runs_the_command(tmp_path: Path) -> None:
    """The work function runs the command to completion and returns its output."""
    starter = _Starter()
    ctx = ToolContext(tmp_path, "s1", "c", start_background=starter)
    bash.run({"command": "echo hi; exit 2", "run_in_background": True}, ctx)
    result = starter.calls[0][1](CancelToken())
    assert ToolOutput("hi\n[exit code 2]", is_error=True) == result


def test_background_work_stops_when_its_token_is_cancelled(tmp_path: Path) -> None:
    """The work function's token cancels the command and its children."""
    starter = _Starter()
    ctx = ToolContext(tmp_path, "s1", "c", start_background=starter)
    bash.run({"command": "sleep 30 & echo $! > c.pid; wait", "run_in_background": True}, ctx)
    token = CancelToken()
    thread, results = _in_thread(lambda: starter.calls[0][1](token))
    deadline = time.monotonic() + 5
    while not (tmp_path / "c.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    token.cancel()
    thread.join(timeout=5)
    assert (True, False) == (results[0].is_error, _running(_pid_from(tmp_path / "c.pid")))
