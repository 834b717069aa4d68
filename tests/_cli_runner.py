"""Running ``lite-agent`` in real OS processes from the tests.

Importing liteagent takes seconds (the ``anthropic`` SDK alone takes most of it), so most CLI
tests go through a fork server: one helper process imports ``liteagent.sdk._cli`` once, then
forks a fresh child per command, which gets its own working folder, environment, stdin, stdout
and stderr files, runs ``main(argv)`` and exits with its return code. The child is a real
process: its exit status, output and the files it writes are what the test checks. A few tests
(usage errors, the demo, the interactive mode) run the installed ``lite-agent`` script itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.tmp = tempfile.TemporaryDirectory(prefix="lite-agent-cli-")

    def run(self, *argv: str, cwd: Path | None = None, stdin: str = "",
            env: dict[str, str] | None = None, prelude: str = "") -> Result:
        """Run ``lite-agent *argv`` in a forked child (after running the Python code
        ``prelude`` there); return its exit code and output."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        folder = Path(self.tmp.name)
        paths = {name: folder / name for name in ("stdin", "stdout", "stderr")}
        paths["stdin"].write_text(stdin, encoding="utf-8")
        paths["stdout"].write_text("")
        paths["stderr"].write_text("")
        job = {"argv": list(argv), "cwd": str(cwd or folder), "env": env or clean_env(),
               "prelude": prelude,
               **{k: str(v) for k, v in paths.items()}}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server ended"
        status = json.loads(line)["status"]
        code = os.waitstatus_to_exitcode(status)
        return Result(code, paths["stdout"].read_text(encoding="utf-8"),
                      paths["stderr"].read_text(encoding="utf-8"))

    def close(self) -> None:
        """Stop the server."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.tmp.cleanup()


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI process: no API key, no lite-agent home, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "LITE_AGENT_HOME")}
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

    def __call__(self, *argv: str, provider: str | None = None, stdin: str = "",
                 env: dict[str, str] | None = None, prelude: str = "") -> Result:
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
    cli.ok("run", "write one", "--session", sid,
           provider=cli.script(write("a.txt", "one\n"), {"text": "Wrote one."}))
    cli.ok("run", "write two", "--session", sid,
           provider=cli.script(write("a.txt", "two\n"), {"text": "Wrote two."}))
