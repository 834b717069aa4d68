"""The ``bash`` tool: run a shell command in the workspace.

Input: ``command``; ``timeout`` in seconds (default :data:`DEFAULT_TIMEOUT` in the foreground,
at most :data:`MAX_TIMEOUT`); ``run_in_background`` (default false).

In the foreground the call returns when the command ends. The output is stdout and stderr
interleaved, capped at :data:`OUTPUT_LIMIT` characters (the head and the tail are kept, with a
marker saying how much was left out), followed by a status line: ``[exit code N]``,
``[killed by signal SIGX]``, ``[timed out after T s ...]`` or ``[cancelled ...]``. Anything but
exit code 0 is an ``is_error`` output. A timeout or ``ctx.cancel`` stops the command's whole
process group (SIGTERM, then SIGKILL); cancellation takes effect within about a second. See
``_process.run_command`` for the process rules (stdin is ``/dev/null``, leftover processes in
the group are stopped when the shell exits).

With ``run_in_background`` the call needs ``ctx.start_background`` (otherwise it is an
``is_error`` output) and returns at once with the task id; the command runs in ``work(token)``,
which the runtime calls, until it ends or ``token`` is cancelled — with no timeout unless one was
given — and returns the same output a foreground call would.

``changed_paths`` is ``[]``: shell commands are not snapshotted, so a restore does not undo
what they did to files.

The environment is built by a :class:`~liteagent.tools.ToolEnv` when the command starts (a
background command gets the same one): by default the host's less every credential-like
variable. :data:`bash` uses the default; :func:`bash_tool` makes a ``bash`` tool with another
policy (an allow list, a replacement environment). A command containing a NUL byte or a
character the file system encoding cannot carry is an ``is_error`` output.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated

from msgspec import Meta

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import InvalidArgumentError

from ._contract import ToolContext, ToolOutput
from ._decorator import FunctionTool, tool
from ._env import ToolEnv
from ._paths import workspace_root
from ._process import CommandResult, run_command

__all__ = ["DEFAULT_TIMEOUT", "MAX_TIMEOUT", "OUTPUT_LIMIT", "bash", "bash_tool"]

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
OUTPUT_LIMIT = 30_000
_DESCRIPTION_CHARS = 80
_STOPPED = "the command and its processes were stopped"


def bash_tool(env: ToolEnv | None = None) -> FunctionTool[..., ToolOutput]:
    """A ``bash`` tool whose commands (foreground and background) get the environment ``env``
    builds (``None``: ``ToolEnv()``, the host's less the credential-like variables). Raises
    :class:`~liteagent.eventlog.errors.InvalidArgumentError` when ``env`` is not a ``ToolEnv``."""
    if env is None:
        env = ToolEnv()
    elif not isinstance(env, ToolEnv):
        raise InvalidArgumentError(
            f"env must be a ToolEnv (see tool_env()), got {type(env).__name__}"
        )
    policy = env

    @tool(name="bash")
    def bash(
        command: Annotated[
            str,
            Meta(min_length=1, description="The command, run with /bin/bash -c in the workspace."),
        ],
        timeout: Annotated[
            Annotated[float, Meta(gt=0, le=MAX_TIMEOUT)] | None,
            Meta(
                description=f"Seconds before the command is stopped (default "
                f"{DEFAULT_TIMEOUT:g} in the foreground, none in the background; at most "
                f"{MAX_TIMEOUT:g})."
            ),
        ] = None,
        run_in_background: Annotated[
            bool,
            Meta(
                description="Start the command as a background task and return at once; its "
                "output arrives when it finishes."
            ),
        ] = False,
        *,
        ctx: ToolContext,
    ) -> ToolOutput:
        """Run a shell command in the workspace and return its combined stdout and stderr (the
        middle of a long output is left out) and its exit code. The command runs with
        /bin/bash -c, stdin empty, in the workspace folder; it is stopped, with every process it
        started, when the timeout passes or the call is cancelled. Use run_in_background for
        servers and other long-running commands.

        Shell commands are not snapshotted: a restore does not undo their file changes.
        """
        return _bash(command, timeout, run_in_background, ctx, policy)

    return bash


def _bash(
    command: str,
    timeout: float | None,
    run_in_background: bool,
    ctx: ToolContext,
    policy: ToolEnv,
) -> ToolOutput:
    refused = _unusable(command)
    if refused is not None:
        return ToolOutput(refused, is_error=True)
    cwd = workspace_root(ctx.workdir)
    env = policy.environment()
    if not run_in_background:
        limit = DEFAULT_TIMEOUT if timeout is None else timeout
        return _run(command, cwd=cwd, timeout=limit, cancel=ctx.cancel, env=env)
    if ctx.start_background is None:
        return ToolOutput(
            "background tasks are not available in this session; run the command in the foreground",
            is_error=True,
        )

    def work(token: CancelToken) -> ToolOutput:
        return _run(command, cwd=cwd, timeout=timeout, cancel=token, env=env)

    task_id = ctx.start_background(_short(command), work)
    return ToolOutput(
        f"started background task {task_id}: {_short(command)}\n"
        "Its output and exit code will be reported when it finishes."
    )


bash = bash_tool()
"""The ``bash`` tool with the default environment policy (module docstring)."""


def _unusable(command: str) -> str | None:
    """Why ``command`` cannot be passed to a process, or ``None``."""
    if "\x00" in command:
        return "the command contains a NUL byte, which no process argument can carry; nothing ran"
    try:
        os.fsencode(command)
    except UnicodeEncodeError as e:
        return (
            f"the command contains {command[e.start : e.end]!r}, which cannot be encoded for the "
            "shell (a lone surrogate); nothing ran"
        )
    return None


def _run(
    command: str,
    *,
    cwd: Path,
    timeout: float | None,
    cancel: CancelToken,
    env: dict[str, str],
) -> ToolOutput:
    try:
        result = run_command(
            command, cwd, timeout=timeout, cancel=cancel, output_limit=OUTPUT_LIMIT, env=env
        )
    except OSError as e:
        return ToolOutput(f"cannot start the shell in {cwd}: {e.strerror or e}", is_error=True)
    return _to_output(result, timeout, cancel.reason)


def _to_output(result: CommandResult, timeout: float | None, reason: str) -> ToolOutput:
    text = result.output.rstrip("\n") or "(no output)"
    if result.cancelled:
        status = f"[cancelled ({reason or 'cancelled'}); {_STOPPED}]"
    elif result.timed_out:
        status = f"[timed out after {timeout or 0:g} s; {_STOPPED}]"
    elif result.returncode is None:
        status = "[exit status unknown]"
    elif result.returncode < 0:
        status = f"[killed by signal {_signal_name(-result.returncode)}]"
    else:
        status = f"[exit code {result.returncode}]"
    is_error = result.cancelled or result.timed_out or result.returncode != 0
    return ToolOutput(f"{text}\n{status}", is_error=is_error)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _short(command: str) -> str:
    line = " ".join(command.split())
    return line if len(line) <= _DESCRIPTION_CHARS else line[: _DESCRIPTION_CHARS - 1] + "…"
