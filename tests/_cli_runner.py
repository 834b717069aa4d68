"""Running ``lite-agent`` in real OS processes from the tests.

Importing liteagent takes seconds (the ``anthropic`` SDK alone takes most of it), so most CLI
tests go through a fork server: one helper process imports ``liteagent.sdk._cli`` once, then
forks a fresh child per command, which gets its own working folder, environment, stdin, stdout
and stderr files, runs ``main(argv)`` and exits with its return code. The child is a real
process: its exit status, output and the files it writes are what the test checks. A few tests
(usage errors, the demo, the interactive mode) run the installed ``lite-agent`` script itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from liteagent.eventlog import StoredEvent, file_checkpointer

LITE_AGENT = Path(sys.executable).parent / "lite-agent"

_SERVER = r"""
import io, json, os, sys, traceback
from liteagent.sdk._cli import main
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            for fd, path, flags in ((0, job["stdin"], os.O_RDONLY),
                                    (1, job["stdout"], os.O_WRONLY | os.O_TRUNC),
                                    (2, job["stderr"], os.O_WRONLY | os.O_TRUNC)):
                new = os.open(path, flags)
                os.dup2(new, fd)
                os.close(new)
            sys.stdin = io.TextIOWrapper(io.FileIO(0, closefd=False), encoding="utf-8")
            exec(job["prelude"])  # a test's patch, e.g. to crash at a chosen point
            code = main(job["argv"])
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": status}), flush=True)
"""


@dataclass
class Result:
    """A finished command: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """stdout as JSON."""
        return json.loads(self.out)


class CliServer:
    """The fork server (see the module docstring)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.tmp = tempfile.TemporaryDirectory(prefix="lite-agent-cli-")

    def run(
        self,
        *argv: str,
        cwd: Path | None = None,
        stdin: str = "",
        env: dict[str, str] | None = None,
        prelude: str = "",
    ) -> Result:
        """Run ``lite-agent *argv`` in a forked child (after running the Python code
        ``prelude`` there); return its exit code and output."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        folder = Path(self.tmp.name)
        paths = {name: folder / name for name in ("stdin", "stdout", "stderr")}
        paths["stdin"].write_text(stdin, encoding="utf-8")
        paths["stdout"].write_text("")
        paths["stderr"].write_text("")
        job = {
            "argv": list(argv),
            "cwd": str(cwd or folder),
            "env": env or clean_env(),
            "prelude": prelude,
            **{k: str(v) for k, v in paths.items()},
        }
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server ended"
        status = json.loads(line)["status"]
        code = os.waitstatus_to_exitcode(status)
        return Result(
            code,
            paths["stdout"].read_text(encoding="utf-8"),
            paths["stderr"].read_text(encoding="utf-8"),
        )

    def close(self) -> None:
        """Stop the server."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.tmp.cleanup()


_NOT_PASSED = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "LITE_AGENT_HOME",
        "LITE_AGENT_LOG_LEVEL",
        # what changes how output looks: each test sets what it needs
        "NO_COLOR",
        "FORCE_COLOR",
        "TTY_COMPATIBLE",
        "TTY_INTERACTIVE",
        "COLUMNS",
        "LINES",
        "PROMPT_TOOLKIT_NO_CPR",
    }
)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI process: no API key, no lite-agent home, none of the variables
    that change how output looks, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_PASSED}
    env.update(extra)
    return env


def write_script(path: Path, responses: list[dict[str, Any]]) -> str:
    """Write a ``scripted:FILE`` script; return the ``--provider`` value."""
    path.write_text(json.dumps(responses), encoding="utf-8")
    return f"scripted:{path}"


class Cli:
    """``lite-agent --workdir W --home H ...`` in a temp folder."""

    def __init__(self, server: CliServer, root: Path) -> None:
        self.server = server
        self.root = root
        self.work = root / "work"
        self.home = root / "home"
        self.work.mkdir()
        self._scripts = 0

    def __call__(
        self,
        *argv: str,
        provider: str | None = None,
        stdin: str = "",
        env: dict[str, str] | None = None,
        prelude: str = "",
    ) -> Result:
        args = ["--workdir", str(self.work), "--home", str(self.home)]
        if provider:
            args += ["--provider", provider]
        return self.server.run(*args, *argv, stdin=stdin, env=env, prelude=prelude)

    def script(self, *responses: dict[str, Any]) -> str:
        """A new script file; its ``--provider`` value."""
        self._scripts += 1
        return write_script(self.root / f"script{self._scripts}.json", list(responses))

    def ok(self, *argv: str, provider: str | None = None, stdin: str = "") -> Result:
        """Run and require exit code 0."""
        result = self(*argv, provider=provider, stdin=stdin)
        assert 0 == result.code, result
        return result

    def events(self, session_id: str) -> list[StoredEvent]:
        """The session's stored events."""
        with file_checkpointer(workdir=self.work, home=self.home) as cp:
            return list(cp.read(session_id))


def write(path: str, content: str, say: str = "") -> dict[str, Any]:
    """A scripted write_file call."""
    item: dict[str, Any] = {"tool": "write_file", "input": {"path": path, "content": content}}
    if say:
        item["text"] = say
    return item


def two_prompts(cli: Cli, sid: str = "s1") -> None:
    """Session ``sid``: prompt 1 writes a.txt "one", prompt 2 rewrites it "two"."""
    cli.ok(
        "run",
        "write one",
        "--session",
        sid,
        provider=cli.script(write("a.txt", "one\n"), {"text": "Wrote one."}),
    )
    cli.ok(
        "run",
        "write two",
        "--session",
        sid,
        provider=cli.script(write("a.txt", "two\n"), {"text": "Wrote two."}),
    )


_ESCAPE = re.compile(
    r"\x1b(?:\[([0-?]*)[ -/]*([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|[()][0-9A-Za-z]|[@-Z\\-_=>78])"
)
_INCOMPLETE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*|\x1b?|[()])?\Z")


class Screen:
    """What a terminal shows of a program's output, as text: every row written since the start
    (nothing scrolls away). It follows what a line-editing prompt and a live progress bar use
    (carriage return, backspace, cursor left/right/up/down and column, erase in line and below);
    colours and other modes are dropped, so tests match the text a person sees."""

    def __init__(self) -> None:
        self.rows: list[str] = [""]
        self.row = 0
        self.col = 0
        self._rest = ""

    @property
    def text(self) -> str:
        """The rows joined by newlines (the cursor's row padded to the cursor)."""
        rows = list(self.rows)
        rows[self.row] = rows[self.row].ljust(self.col)
        return "\n".join(rows)

    def _put(self, char: str) -> None:
        line = self.rows[self.row].ljust(self.col)
        self.rows[self.row] = line[: self.col] + char + line[self.col + 1 :]
        self.col += 1

    def _down(self, n: int) -> None:
        self.row += n
        while len(self.rows) <= self.row:
            self.rows.append("")

    def _csi(self, params: str, final: str) -> None:
        numbers = [int(p) if p.isdigit() else 0 for p in params.split(";")] if params else [0]
        n = max(1, numbers[0])
        line = self.rows[self.row]
        if final == "A":
            self.row = max(0, self.row - n)
        elif final == "B":
            self._down(n)
        elif final == "C":
            self.col += n
        elif final == "D":
            self.col = max(0, self.col - n)
        elif final == "G":
            self.col = n - 1
        elif final == "K":
            mode = numbers[0]
            self.rows[self.row] = (
                line[: self.col]
                if mode == 0
                else " " * self.col + line[self.col :]
                if mode == 1
                else ""
            )
        elif final == "J" and numbers[0] == 0:
            self.rows[self.row] = line[: self.col]
            del self.rows[self.row + 1 :]

    def feed(self, data: str) -> None:
        """Take more output."""
        data, self._rest = self._rest + data, ""
        i = 0
        while i < len(data):
            char = data[i]
            if char == "\x1b":
                match = _ESCAPE.match(data, i)
                if match is None:
                    if _INCOMPLETE.match(data, i):
                        self._rest = data[i:]  # the rest of it comes with the next read
                        return
                    i += 1
                    continue
                if match.group(2):
                    self._csi(match.group(1) or "", match.group(2))
                i = match.end()
                continue
            if char == "\r":
                self.col = 0
            elif char == "\n":
                self._down(1)
            elif char == "\x08":
                self.col = max(0, self.col - 1)
            elif char >= " " or char == "\t":
                self._put(char)
            i += 1


class Terminal:
    """A process on a pseudo-terminal of 24 x 100: type into it, wait for what it shows.

    It answers the prompt's cursor position requests as a terminal does. ``raw`` is every
    byte the process wrote (escape codes included); :attr:`screen` what a person sees."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        with warnings.catch_warnings():
            # Python 3.12+ warns about fork() in a process with threads; the child only execs.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal
            os.execve(argv[0], argv, env)  # noqa: S606 -- the installed script, no shell
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        self.screen = Screen()
        self.raw = ""
        self.pos = 0

    @property
    def seen(self) -> str:
        """What the terminal shows (see :class:`Screen`)."""
        return self.screen.text

    def type(self, text: str) -> None:
        """Type ``text`` (``\\r`` is Enter, ``\\x03`` Ctrl-C, ``\\x04`` Ctrl-D)."""
        os.write(self.fd, text.encode())

    def _read(self, timeout: float) -> bool:
        """Take what the process wrote within ``timeout``; False when it closed the
        terminal."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal
            data = b""
        if not data:
            return False
        text = data.decode(errors="replace")
        if "\x1b[6n" in text:  # where is the cursor? (prompt_toolkit asks)
            os.write(self.fd, f"\x1b[1;{self.screen.col + 1}R".encode())
        self.raw += text
        self.screen.feed(text)
        return True

    def expect(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """Wait for ``pattern`` on the screen after the previous match; return the match."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.compile(pattern).search(self.seen, min(self.pos, len(self.seen)))
            if match:
                self.pos = match.end()
                return match
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in:\n{self.seen[self.pos :]}"
            assert self._read(left), (
                f"the process ended before {pattern!r}:\n" + self.seen[self.pos :]
            )

    def wait(self, timeout: float = 30) -> int:
        """Read to the end and return the exit code."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self._read(0.05) and select.select([self.fd], [], [], 0)[0]:
                    pass
                return os.waitstatus_to_exitcode(status)
            self._read(0.1)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        raise AssertionError(f"the process did not exit:\n{self.seen[self.pos :]}")

    def close(self) -> None:
        """Kill the process if it still runs; close the terminal."""
        try:
            if not os.waitpid(self.pid, os.WNOHANG)[0]:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.fd)
