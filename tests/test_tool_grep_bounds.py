"""grep with a catastrophic regex: it ends with an error at its time limit, a cancel kills its
search process, and the rest of the host (threads, other sessions' turns) keeps running while it
matches; re's semantics (backreferences, lookaround) are kept."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import OperationCancelledError
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent
from liteagent.tools import ToolContext, ToolOutput, grep, read_file
from liteagent.tools._search import PATTERN_MAX_CHARS, make_grep

pytestmark = pytest.mark.processes

#: Backtracks for about 2**40 steps on the line below: it never ends in a test's lifetime.
BAD = "(a+)+$"
BAD_LINE = "a" * 40 + "!"
CANCELLED = ToolOutput("cancelled; the search was stopped", is_error=True)
_GUARD_SECONDS = 120.0


@contextlib.contextmanager
def hang_guard(seconds: float = _GUARD_SECONDS) -> Iterator[None]:
    """Ends the whole test process, printing every thread's stack, if the body has not
    finished after ``seconds``: a hang guard that fires even while a thread holds the GIL
    (faulthandler's watchdog is a C thread)."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace whose ``bad.txt`` holds the line the bad regex chokes on."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "bad.txt").write_text(BAD_LINE + "\n")
    return root


def _ctx(ws: Path, cancel: CancelToken | None = None) -> ToolContext:
    return ToolContext(ws, "s1", "call-1", cancel=cancel or CancelToken())


def _workers() -> list[int]:
    """The pids of this process's live grep worker processes."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[1] == str(os.getpid()) and fields[0] != "Z" and b"liteagent-grep" in cmdline:
            pids.append(int(entry.name))
    return pids


def _wait_for_worker() -> int:
    """The pid of the grep worker that is running now (waits until one appears)."""
    while True:
        found = _workers()
        if found:
            return found[0]
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` in a thread; its result (or exception) lands in the returned list."""
    results: list[Any] = []

    def target() -> None:
        try:
            results.append(fn())
        except Exception as e:  # noqa: BLE001 -- handed to the test to check
            results.append(e)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, results


def _stuck_grep(ws: Path, token: CancelToken) -> ToolOutput:
    """A grep on the bad regex whose time limit no test reaches: only a cancel ends it."""
    return make_grep(600.0).run({"pattern": BAD}, _ctx(ws, token))


def test_a_catastrophic_regex_is_an_error_at_the_time_limit(ws: Path) -> None:
    """A regex that would backtrack for ever ends the call with an is_error output saying it
    stopped at the time limit."""
    with hang_guard():
        out = make_grep(1.0).run({"pattern": BAD}, _ctx(ws))
    assert (True, True) == (out.is_error, "grep stopped after 1 s" in out.content)


def test_matches_found_before_the_time_limit_are_shown(ws: Path) -> None:
    """The lines matched before the search was stopped are in the error output."""
    (ws / "a.txt").write_text("hit\n")
    with hang_guard():
        out = make_grep(1.0).run({"pattern": "hit|" + BAD}, _ctx(ws))
    assert ("a.txt:1:hit", True) == (out.content.split("\n")[0], out.is_error)


def test_a_cancel_kills_the_search_process(ws: Path) -> None:
    """Cancelling a grep stuck in a bad regex returns the cancelled output and leaves no
    search process behind."""
    token = CancelToken()
    with hang_guard():
        thread, results = _in_thread(lambda: _stuck_grep(ws, token))
        pid = _wait_for_worker()
        token.cancel()
        thread.join()
    assert (CANCELLED, False) == (results[0], _alive(pid))


def test_other_threads_run_while_a_bad_regex_is_matched(ws: Path) -> None:
    """While a grep is stuck in a bad regex, another thread runs Python code and a whole
    other grep, and the stuck one is still running afterwards."""
    token = CancelToken()
    (ws / "ok.txt").write_text("needle\n")
    with hang_guard():
        thread, results = _in_thread(lambda: _stuck_grep(ws, token))
        pid = _wait_for_worker()
        counted = sum(range(1_000_000))  # needs the GIL all along
        other = grep.run({"pattern": "needle", "path": "ok.txt"}, _ctx(ws))
        still_running = (thread.is_alive(), _alive(pid))
        token.cancel()
        thread.join()
    assert (499999500000, ToolOutput("ok.txt:1:needle"), (True, True), CANCELLED) == (
        counted,
        other,
        still_running,
        results[0],
    )


def _reply(text: str) -> AssistantMessage:
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def _call(tool: str, **input: Any) -> AssistantMessage:
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{tool}_{time.monotonic_ns()}", tool, input),),
        stop_reason="tool_use",
    )


def test_a_second_session_runs_its_turn_during_a_bad_grep(ws: Path) -> None:
    """While one session's model has grep stuck in a bad regex, another session's whole turn
    (a model call, a tool call, a second model call) completes; the first is then cancelled."""
    slow_grep = make_grep(600.0)
    (ws / "notes.txt").write_text("hello\n")
    first_model = scripted([_call("grep", pattern=BAD), _reply("first done")])
    second_model = scripted([_call("read_file", path="notes.txt"), _reply("second done")])
    token = CancelToken()
    with (
        hang_guard(),
        create_lite_agent(
            model=first_model, model_name="m", workdir=ws, sessions=False, tools=[slow_grep]
        ) as first,
        create_lite_agent(
            model=second_model,
            model_name="m",
            workdir=ws,
            sessions=False,
            tools=[read_file, slow_grep],
        ) as second,
    ):
        thread, results = _in_thread(lambda: first.send("search", cancel=token))
        pid = _wait_for_worker()
        answer = second.send("read the notes").text
        first_still_running = (thread.is_alive(), _alive(pid))
        token.cancel()
        thread.join()
    assert ("second done", (True, True), OperationCancelledError) == (
        answer,
        first_still_running,
        type(results[0]),
    )


def test_a_search_process_that_dies_is_an_error(ws: Path) -> None:
    """A search process killed from outside makes the call an is_error output saying so."""
    with hang_guard():
        thread, results = _in_thread(lambda: _stuck_grep(ws, CancelToken()))
        os.kill(_wait_for_worker(), signal.SIGKILL)
        thread.join()
    out = results[0]
    assert (True, True) == (out.is_error, "ended unexpectedly (killed by signal 9)" in out.content)


def test_no_search_process_outlives_a_call(ws: Path) -> None:
    """After a grep returns, no search process of this process is left."""
    grep.run({"pattern": "a+!"}, _ctx(ws))
    assert [] == _workers()


def test_backreferences_still_work(ws: Path) -> None:
    """The regex is Python's re: backreferences match."""
    (ws / "w.txt").write_text("hello\nworld\n")
    out = grep.run({"pattern": r"(\w)\1", "path": "w.txt"}, _ctx(ws))
    assert ToolOutput("w.txt:1:hello") == out


def test_lookaround_still_works(ws: Path) -> None:
    """The regex is Python's re: lookbehind and lookahead match."""
    (ws / "w.txt").write_text("foobar\nbazbar\n")
    out = grep.run({"pattern": r"(?<=foo)bar(?!x)", "path": "w.txt"}, _ctx(ws))
    assert ToolOutput("w.txt:1:foobar") == out


def test_a_pattern_re_warns_about_still_searches(ws: Path) -> None:
    """A pattern re compiles with a FutureWarning (a possible nested set) is searched; the
    warning never reaches the host."""
    (ws / "w.txt").write_text("[x\ny\n")
    assert ToolOutput("w.txt:1:[x") == grep.run({"pattern": "[[]x", "path": "w.txt"}, _ctx(ws))


def test_a_huge_repeat_count_is_searched_without_blowing_up(ws: Path) -> None:
    """A repeat count re accepts but no line can satisfy is just no match."""
    out = grep.run({"pattern": "a{4294967294}"}, _ctx(ws))
    assert ToolOutput("no matches") == out


def test_a_regex_re_cannot_compile_is_an_error(ws: Path) -> None:
    """A repeat count beyond re's limit is an invalid-regex error, not a crash."""
    out = grep.run({"pattern": "a{99999999999}"}, _ctx(ws))
    assert (True, True) == (out.is_error, out.content.startswith("invalid regex"))


def test_an_overlong_pattern_is_refused(ws: Path) -> None:
    """A pattern over the length limit is refused as invalid input."""
    out = grep.run({"pattern": "a" * (PATTERN_MAX_CHARS + 1)}, _ctx(ws))
    assert (True, True) == (out.is_error, out.content.startswith("invalid input for grep"))
