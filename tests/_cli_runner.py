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
            env: dict[str, str] | None = None) -> Result:
        """Run ``lite-agent *argv`` in a forked child; return its exit code and output."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        folder = Path(self.tmp.name)
        paths = {name: folder / name for name in ("stdin", "stdout", "stderr")}
        paths["stdin"].write_text(stdin, encoding="utf-8")
        paths["stdout"].write_text("")
        paths["stderr"].write_text("")
        job = {"argv": list(argv), "cwd": str(cwd or folder), "env": env or clean_env(),
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
