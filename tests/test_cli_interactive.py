"""The installed ``lite-agent`` script: the offline demo from start to end, and the interactive
mode driven in a pseudo-terminal (slash commands, Ctrl-C during a slow scripted turn, two
Ctrl-C at the prompt to quit)."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from _cli_runner import LITE_AGENT, clean_env, write, write_script

from liteagent.eventlog import UserPrompt, file_checkpointer, project_dir

pytestmark = pytest.mark.processes


def test_the_demo_runs_offline_and_its_restore_changed_the_files_back(tmp_path: Path) -> None:
    """The demo ends with exit 0; the files are as the restore and the later prompt left them,
    and the replay command it prints works and verifies every request."""
    demo = tmp_path / "demo"
    run = subprocess.run([str(LITE_AGENT), "demo", "--dir", str(demo)], capture_output=True,
                         text=True, env=clean_env(), timeout=120, check=False)
    assert 0 == run.returncode, run.stderr
    out = run.stdout
    for step in ("checkpoints (one per prompt)", "restore to seq", "compaction (the log keeps",
                 "the log"):
        assert step in out
    assert "calc.py has subtract(): False" in out
    assert "compacting [" in out
    project = demo / "project"
    calc = (project / "calc.py").read_text()
    assert "def multiply" in calc
    assert "def subtract" not in calc  # the restore undid the edit
    assert (project / "NOTES.md").exists()  # the restore brought the deleted file back
    assert not (project / "README.md").exists()  # and removed the one created after
    assert "from calc import add\n" in (project / "check.py").read_text()
    [command] = [line.strip() for line in out.splitlines()
                 if line.strip().startswith("lite-agent ") and line.strip().endswith(
                     tuple("0123456789abcdef"))]
    argv = shlex.split(command)
    verify = subprocess.run([str(LITE_AGENT), *argv[1:], "--verify"], capture_output=True,
                            text=True, env=clean_env(), timeout=120, check=False)
    assert 0 == verify.returncode, verify.stderr
    assert re.search(r"(\d+) of \1 recorded requests recomputed from the log exactly",
                     verify.stdout)


class Terminal:
    """A process on a pseudo-terminal: type into it, wait for its output."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        with warnings.catch_warnings():
            # Python 3.12+ warns about fork() in a process with threads; the child only execs.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal
            os.execve(argv[0], argv, env)  # noqa: S606 -- the installed script, no shell
        self.seen = ""
        self.pos = 0

    def type(self, text: str) -> None:
        """Type ``text`` (``\\r`` is Enter, ``\\x03`` Ctrl-C)."""
        os.write(self.fd, text.encode())

    def expect(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """Wait for ``pattern`` in the output after the previous match; return the match."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.compile(pattern).search(self.seen, self.pos)
            if match:
                self.pos = match.end()
                return match
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in:\n{self.seen[self.pos:]}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # the child closed the terminal
                    data = b""
                assert data, f"the process ended before {pattern!r}:\n{self.seen[self.pos:]}"
                self.seen += data.decode(errors="replace").replace("\r\n", "\n")

    def wait(self, timeout: float = 30) -> int:
        """Read to the end and return the exit code."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            if select.select([self.fd], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):  # the child closed the terminal
                    self.seen += os.read(self.fd, 65536).decode(errors="replace")
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        raise AssertionError(f"the process did not exit:\n{self.seen[self.pos:]}")

    def close(self) -> None:
        """Kill the process if it still runs; close the terminal."""
        try:
            if not os.waitpid(self.pid, os.WNOHANG)[0]:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.fd)


def start(tmp_path: Path, responses: list[dict[str, Any]]) -> tuple[Terminal, Path, Path]:
    """``lite-agent`` on an empty workspace with a scripted model, in a terminal."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    provider = write_script(tmp_path / "script.json", responses)
    term = Terminal([str(LITE_AGENT), "--workdir", str(work), "--home", str(home),
                     "--provider", provider], clean_env())
    return term, work, home


def test_turns_ctrl_c_and_restore_in_a_terminal(tmp_path: Path) -> None:
    """A streamed turn with a tool call; Ctrl-C cancels a slow turn (the log records it and the
    session continues); a restore with its progress and a readable refusal; two Ctrl-C at the
    prompt quit with exit code 0."""
    term, work, home = start(tmp_path, [
        write("a.txt", "one\n", say="Writing."), {"text": "Wrote a.txt."},
        {"text": "too late", "delay": 60},
        write("b.txt", "two\n"), {"text": "Back."},
    ])
    try:
        sid = term.expect(r"session (\S+)\n").group(1)
        term.expect("> ")
        term.type("hello\r")
        term.expect(r"Writing\.\n  → write_file a\.txt\nWrote a\.txt\.")
        term.expect("> ")
        term.type("take your time\r")
        time.sleep(0.5)
        started = time.monotonic()
        term.type("\x03")
        term.expect("cancelled: the log records the aborted turn")
        assert time.monotonic() - started < 10
        term.type("after\r")
        term.expect(r"→ write_file b\.txt\nBack\.")
        term.type("/checkpoints\r")
        seq = term.expect(r"\n\s*(\d+)\s+\S+ \S+\s+after").group(1)
        term.type(f"/restore {seq}\r")
        term.expect(r"restoring \[#+\] 1/1 files")
        term.expect(f"restored to before seq {seq}: b.txt put back")
        term.type("/restore 999\r")
        term.expect("InvalidCheckpointError: seq 999 is not a checkpoint")
        term.expect("> ")
        term.type("\x03")
        term.expect("Ctrl-C again to quit")
        term.type("\x03")
        assert 0 == term.wait()
    finally:
        term.close()
    assert (work / "a.txt").exists()
    assert not (work / "b.txt").exists()
    with file_checkpointer(workdir=work, home=home) as cp:
        kinds = [e.kind for e in cp.read(sid)]
        prompts = [e.body.text for e in cp.read(sid) if isinstance(e.body, UserPrompt)]
    assert "turn_aborted" in kinds
    assert ["hello", "take your time"] == prompts


def test_slash_commands_in_a_terminal(tmp_path: Path) -> None:
    """/help, /compact with progress, /clear, /sessions, /resume, an unknown command, /exit."""
    term, _, _ = start(tmp_path, [{"text": f"Answer {i}."} for i in range(3)])
    try:
        sid = term.expect(r"session (\S+)\n").group(1)
        term.type("/help\r")
        term.expect(r"/restore <seq> \[--conversation-only\]")
        for i in range(3):
            term.type(f"question {i}\r")
            term.expect(f"Answer {i}.")
        term.type("/compact keep the answers\r")
        term.expect(r"compaction start")
        term.expect(r"compacted: |nothing to reduce")
        term.type("/clear\r")
        other = term.expect(r"new session (\S+)").group(1)
        assert sid != other
        term.type("/sessions\r")
        term.expect(sid)
        term.type(f"/resume {sid}\r")
        term.expect(f"resumed {sid}")
        term.type("/nope\r")
        term.expect("unknown command /nope")
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()


_HELP_THEN_PROMPT = r"/restore <seq> \[--conversation-only\][\s\S]*?compaction cancels it\.\n> "


def test_the_prompt_edits_lines_and_keeps_history_across_runs(tmp_path: Path) -> None:
    """A line fixed with the arrow keys runs as edited; the next run of lite-agent on the same
    project recalls it with the up arrow; the history file holds the edited line."""
    term, work, home = start(tmp_path, [])
    try:
        term.expect("> ")
        term.type("/hep\x1b[Dl\r")  # "/hep", left arrow, "l": "/help"
        term.expect(_HELP_THEN_PROMPT)
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()
    history = project_dir(work, home) / "prompt_history"
    assert ["/help", "/exit"] == history.read_text().splitlines()[-2:]
    again = Terminal([str(LITE_AGENT), "--workdir", str(work), "--home", str(home),
                      "--provider", write_script(tmp_path / "again.json", [])], clean_env())
    try:
        again.expect("> ")
        again.type("\x1b[A\x1b[A\r")  # up twice: "/help" from the first run
        again.expect(_HELP_THEN_PROMPT)
        again.type("\x04")  # Ctrl-D at the empty prompt
        assert 0 == again.wait()
    finally:
        again.close()


def test_an_unusable_history_file_leaves_the_prompt_working(tmp_path: Path) -> None:
    """A folder where the history file goes can be neither read nor written: the prompt still
    works and the CLI exits with 0 (history is a convenience, never a reason to fail)."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    history = project_dir(work, home) / "prompt_history"
    history.mkdir(parents=True)
    term = Terminal([str(LITE_AGENT), "--workdir", str(work), "--home", str(home),
                     "--provider", write_script(tmp_path / "script.json", [])], clean_env())
    try:
        term.expect("> ")
        term.type("/help\r")
        term.expect(_HELP_THEN_PROMPT)
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()
    assert history.is_dir()
    assert "Traceback" not in term.seen


# The CLI with a compactor that takes two seconds (patched in before main runs).
_SLOW_COMPACTOR = """
import sys, time
import liteagent.sdk._cli_env as env_module
from liteagent.context import CompactResult, Compactor

class Slow(Compactor):
    def maybe_compact(self, messages, usage=None, instructions=None):
        time.sleep(2)
        return CompactResult(messages=tuple(messages[-1:]), changed=True, tokens_before=10,
                             tokens_after=1)

env_module.default_compactor = lambda **kwargs: Slow()
from liteagent.sdk._cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_cancels_a_manual_compaction(tmp_path: Path) -> None:
    """Ctrl-C during /compact: it is cancelled, nothing is recorded, and the prompt is back."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    provider = write_script(tmp_path / "script.json", [{"text": "Hi."}])
    term = Terminal([sys.executable, "-c", _SLOW_COMPACTOR, "--workdir", str(work), "--home",
                     str(home), "--provider", provider], clean_env())
    try:
        sid = term.expect(r"session (\S+)\n").group(1)
        term.type("hello\r")
        term.expect("Hi.")
        term.type("/compact\r")
        term.expect("compaction start")
        term.type("\x03")
        term.expect("cancelling")
        term.expect("cancelled: ")
        term.expect("> ")
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()
    with file_checkpointer(workdir=work, home=home) as cp:
        assert "compaction" not in [e.kind for e in cp.read(sid)]
