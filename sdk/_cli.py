"""The ``lite-agent`` command: the entry point, its options and the exit codes.

``lite-agent`` alone is an interactive session on the current folder (see :mod:`._cli_repl`);
``lite-agent demo`` runs offline; the other subcommands are scriptable, each with ``--json``.

Exit codes: 0 ok, 1 refused or failed, 2 usage error (see :mod:`._cli_errors`). A failure is
one line on stderr (``lite-agent: <reason>``), or with ``--json`` one JSON document on stdout,
``{"error": {"type": ..., "message": ...}}``; either way nothing else is printed for it. When
the reader of stdout goes away (``lite-agent export ID | head -1``) the command stops quietly
with exit code 0: the reader had what it wanted; an output that cannot be written (a full disk)
fails the command with exit code 1, saying so on stderr. What the output's encoding cannot
carry (a non-UTF-8 locale) is written as a backslash escape; JSON is UTF-8 whatever the locale.
Logs go to stderr, as readable lines on an interactive terminal and as JSON lines elsewhere (so
no escape codes reach a file or a pipe).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from liteagent.eventlog.errors import InvalidArgumentError

from ._cli_commands import cmd_checkpoints, cmd_compact, cmd_restore, cmd_run, cmd_sessions
from ._cli_demo import cmd_demo
from ._cli_doctor import cmd_doctor
from ._cli_env import CliEnv
from ._cli_errors import Failure, OutputClosedError, UsageError, failure, one_line, shown_arg
from ._cli_output import emit_json, make_console, printable
from ._cli_repl import cmd_interactive
from ._cli_replay import cmd_replay
from ._cli_script import SCRIPT_FORMAT
from ._cli_transcript import cmd_export, cmd_import
from ._cli_travel import cmd_branches, cmd_fork, cmd_gc
from ._logging import configure_logging

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["build_parser", "main"]

Command = Callable[[CliEnv, argparse.Namespace], int]

_EPILOG = f"""\
Without a subcommand, lite-agent is an interactive session on --workdir (needs
ANTHROPIC_API_KEY unless --provider says otherwise). `lite-agent demo` needs nothing.

Exit codes: 0 ok, 1 refused or failed (reason on stderr; with --json the JSON document
{{"error": {{"type": ..., "message": ...}}}} on stdout), 2 usage error. A closed stdout
(`lite-agent export ID | head -1`) ends the command quietly with 0.
Logs go to stderr at $LITE_AGENT_LOG_LEVEL (default WARNING). Colour and progress bars appear
only on an interactive terminal; NO_COLOR turns colour off.

{SCRIPT_FORMAT}
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors raise :class:`UsageError` (with the usage line)
    instead of printing and exiting, so the entry point reports them like any failure."""

    def error(self, message: str) -> NoReturn:
        """Raise the usage error."""
        raise UsageError(message, usage=self.format_usage().strip())

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """Print ``--help``; a failure to write it is the entry point's to report (argparse's
        own ignores it, so ``--help`` on a full disk exited 0 with nothing written)."""
        if message:
            (file or sys.stderr).write(message)


def _path(text: str) -> str:
    """A path argument: an empty one is a usage error (it would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (name a folder or a file)")
    return text


_SEQ = re.compile(r"-?[0-9]+")
_SEQ_DIGITS = 30  # far beyond any log; int() itself refuses more than 4,300 digits


def _seq(text: str) -> int:
    """A seq argument: a whole number in ASCII digits. ``int`` would also take ``1_1``,
    ``' 2'`` and digits of other scripts (a typo restoring to another checkpoint); a seq
    outside the log is refused by the command, which knows the log."""
    if _SEQ.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f"{shown_arg(text)} is not a seq (a whole number, such as 12)"
        )
    if len(text.lstrip("-")) > _SEQ_DIGITS:
        raise argparse.ArgumentTypeError(f"a number of {len(text)} digits is no seq of a log")
    return int(text)


def _global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The global options; on subcommands they default to "not given" (SUPPRESS) so that one
    given before the subcommand is kept."""

    def d(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument("--workdir", type=_path, default=d("."), help="the workspace (default: .)")
    group.add_argument(
        "--home",
        type=_path,
        default=d(None),
        help="the lite-agent home (default: $LITE_AGENT_HOME or ~/.lite-agent)",
    )
    group.add_argument(
        "--backend",
        choices=("file", "sqlite"),
        default=d("file"),
        help="the session store (default: file)",
    )
    group.add_argument(
        "--db",
        type=_path,
        default=d(None),
        help="the SQLite file for --backend sqlite (default: <home>/projects/<hash>/sessions.db)",
    )
    group.add_argument(
        "--provider",
        default=d("anthropic"),
        metavar="PROVIDER",
        help="anthropic (default), scripted:FILE or replay:SESSION",
    )
    group.add_argument(
        "--model", default=d(None), help="the model name (default: claude-sonnet-4-5 for anthropic)"
    )


def _sub(
    subs: argparse._SubParsersAction[_Parser],
    name: str,
    command: Command,
    help_text: str,
    *,
    json: bool = True,
    creates: bool = False,
) -> _Parser:
    """A subcommand; one that only reads (not ``creates``) never creates a session store."""
    parser = subs.add_parser(
        name,
        help=help_text,
        description=help_text,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    if json:
        parser.add_argument("--json", action="store_true", help="print JSON for machines")
    _global_options(parser, defaults=False)
    parser.set_defaults(command=command, creates=creates)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lite-agent``."""
    parser = _Parser(
        prog="lite-agent",
        description="A coding agent whose sessions are event-sourced: time travel, "
        "compaction, replay.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    _global_options(parser, defaults=True)
    parser.set_defaults(command=cmd_interactive, json=False, creates=True)
    subs = parser.add_subparsers(title="commands", metavar="COMMAND")

    demo = _sub(
        subs,
        "demo",
        cmd_demo,
        "an offline tour: a scripted model edits a project with the real tools, then "
        "checkpoints, a restore, a compaction and the log",
        json=False,
        creates=True,
    )
    demo.add_argument(
        "--dir", type=_path, help="where to create the demo (default: a new temp folder)"
    )

    run = _sub(subs, "run", cmd_run, "run one prompt to the end of the model's turn", creates=True)
    run.add_argument("prompt", metavar="PROMPT")
    run.add_argument(
        "--session", help="continue this session, or start one with this id (default: a new one)"
    )
    run.set_defaults(usage=run.format_usage().strip())

    _sub(subs, "sessions", cmd_sessions, "list the sessions, most recently active first")

    cps = _sub(subs, "checkpoints", cmd_checkpoints, "list a session's checkpoints")
    cps.add_argument("session_id", metavar="ID")

    restore = _sub(
        subs,
        "restore",
        cmd_restore,
        "restore a session to a checkpoint: the conversation and the files (undoable: "
        "--undo brings back what it took away)",
    )
    restore.add_argument("session_id", metavar="ID")
    restore.add_argument("seq", type=_seq, metavar="SEQ", nargs="?")
    restore.add_argument(
        "--conversation-only", action="store_true", help="leave the files as they are"
    )
    restore.add_argument(
        "--dry-run",
        action="store_true",
        help="show what it would do: files, refusals, and the side effects it cannot undo",
    )
    restore.add_argument(
        "--undo",
        action="store_true",
        help="undo the last restore of ID (no SEQ): its events and files come back",
    )
    restore.add_argument(
        "--branch", metavar="BRANCH", help="with --undo: the branch to bring back (`branches`)"
    )
    restore.set_defaults(usage=restore.format_usage().strip())

    branches = _sub(
        subs, "branches", cmd_branches, "what `restore --undo` can bring back into a session"
    )
    branches.add_argument("session_id", metavar="ID")

    fork = _sub(
        subs,
        "fork",
        cmd_fork,
        "a new session from a session's events before a checkpoint (the original stays)",
    )
    fork.add_argument("session_id", metavar="ID")
    fork.add_argument("seq", type=_seq, metavar="SEQ")
    fork.add_argument(
        "--into",
        type=_path,
        metavar="DIR",
        help="a copy of the workspace where the files are put back as they were at SEQ "
        "(default: the fork shares the workspace)",
    )

    gc = _sub(
        subs,
        "gc",
        cmd_gc,
        "remove blobs no session or branch references, and old branches",
        creates=True,
    )
    gc.add_argument(
        "--grace",
        default="1h",
        metavar="DURATION",
        help="keep blobs written this recently, e.g. 30s, 10m, 1h (default), 2d; 0 only when "
        "nothing else writes to the store",
    )
    gc.add_argument(
        "--branch-retention",
        metavar="DURATION",
        help="also delete branches older than this (default: keep them)",
    )
    gc.add_argument("--dry-run", action="store_true", help="report, remove nothing")

    compact = _sub(subs, "compact", cmd_compact, "compact a session's context now")
    compact.add_argument("session_id", metavar="ID")
    compact.add_argument("instructions", nargs="?", help="what a summary should keep")

    rep = _sub(
        subs,
        "replay",
        cmd_replay,
        "a session's events; --view: what the model saw; --verify: recompute every "
        "recorded request from the log",
    )
    rep.add_argument("session_id", metavar="ID")
    rep.add_argument(
        "--at",
        type=_seq,
        metavar="SEQ",
        help="stop at this seq (with --verify: check the requests up to it)",
    )
    rep.add_argument(
        "--view", action="store_true", help="the request the model saw at --at (default: the end)"
    )
    rep.add_argument(
        "--verify",
        action="store_true",
        help="recompute each recorded request's view hash from the log",
    )

    doctor = _sub(
        subs,
        "doctor",
        cmd_doctor,
        "check every session of the project: torn tails, interrupted restores, unknown kinds",
    )
    doctor.add_argument("--repair", action="store_true", help="repair what can be repaired")
    doctor.add_argument(
        "--finish-restores",
        action="store_true",
        help="with --repair: finish interrupted restores instead of rolling them back",
    )

    export = _sub(
        subs,
        "export",
        cmd_export,
        "a session's conversation as JSON Lines (Anthropic Messages shape)",
    )
    export.add_argument("session_id", metavar="ID")

    imp = _sub(
        subs,
        "import",
        cmd_import,
        "a JSON Lines transcript (Anthropic Messages shape) becomes a session",
        creates=True,
    )
    imp.add_argument("file", metavar="FILE", type=_path, help="the transcript ('-' for stdin)")
    imp.add_argument("--session", help="the new session's id (default: a new one)")
    return parser


def _report(problem: Failure, as_json: bool) -> int:
    """Print ``problem`` (see the module docstring); return its exit code."""
    if as_json:
        emit_json(problem.to_json())
    else:
        err = make_console(sys.stderr)
        if problem.usage:
            err.print(problem.usage, style="dim")
        err.print(f"lite-agent: {printable(problem.message)}", style="red")
    return problem.code


def _stdout_gone() -> int:
    """The reader of stdout went away: send what is left to /dev/null (so the interpreter's
    last flush cannot fail either) and end quietly."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def _streams(json_out: bool) -> None:
    """Make stdout and stderr carry any text: what their encoding cannot (a character outside
    a non-UTF-8 locale's, a lone surrogate) is written as a backslash escape instead of failing
    the command; JSON (``json_out``: ``--json``, ``export``) is written in UTF-8 whatever the
    locale, as JSON is exchanged."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:  # not a text file of the standard library's
            continue
        with contextlib.suppress(OSError, ValueError):
            if json_out and stream is sys.stdout:
                reconfigure(encoding="utf-8", errors="backslashreplace")
            else:
                reconfigure(errors="backslashreplace")


def _logging(as_json: bool) -> None:
    level = os.environ.get("LITE_AGENT_LOG_LEVEL", "WARNING").upper()
    console = make_console(sys.stderr)
    try:
        configure_logging(
            json=as_json or not console.is_interactive or console.no_color, level=level
        )
    except InvalidArgumentError as e:
        raise UsageError(f"LITE_AGENT_LOG_LEVEL={level}: not a log level") from e


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lite-agent`` with ``argv`` (default: the process arguments); return the exit
    code (see the module docstring)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    # before the arguments are parsed (a usage error): --json as an option, not an argument
    # after "--"
    as_json = "--json" in args_list[: args_list.index("--") if "--" in args_list else None]
    # Started with stdout or stderr closed: nobody reads what would go there.
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- lives as long as the process
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- lives as long as the process
    if sys.stdin is None:  # started with stdin closed: there is nothing to read
        sys.stdin = open(os.devnull)  # noqa: SIM115 -- lives as long as the process
    _streams(as_json)
    env: CliEnv | None = None
    try:
        try:
            args = build_parser().parse_args(args_list)
        except SystemExit as e:  # --help
            sys.stdout.flush()
            return e.code if isinstance(e.code, int) else 0
        as_json = bool(args.json)
        _streams(as_json or args.command is cmd_export)
        _logging(as_json)
        env = CliEnv(
            workdir=args.workdir,
            home=args.home,
            backend=args.backend,
            db=args.db,
            provider_spec=args.provider,
            model=args.model,
            create_store=bool(args.creates),
        )
        command: Command = args.command
        code = command(env, args)
        sys.stdout.flush()
    except (BrokenPipeError, OutputClosedError):
        return _stdout_gone()
    except KeyboardInterrupt:
        return _finish(Failure("cancelled", "interrupted (Ctrl-C)"), as_json)
    except Exception as e:  # noqa: BLE001 -- every failure is reported, never a traceback
        return _finish(failure(e), as_json)
    else:
        return code
    finally:
        if env is not None:
            _close(env)


def _close(env: CliEnv) -> None:
    """Close what the command opened; a Ctrl-C meanwhile is ignored (a close interrupted half
    way would leave the agent's threads running)."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        with contextlib.suppress(Exception):
            env.close()
    finally:
        if main:
            signal.signal(signal.SIGINT, old)


def _finish(problem: Failure, as_json: bool) -> int:
    try:
        code = _report(problem, as_json)
        sys.stdout.flush()
    except (BrokenPipeError, OutputClosedError):
        _stdout_gone()
        return problem.code
    except (OSError, ValueError) as e:  # stdout cannot be written (a full disk): say so where
        _stdout_gone()  # it can be read
        why = e.strerror if isinstance(e, OSError) and e.strerror else one_line(e)
        with contextlib.suppress(OSError, ValueError):
            print(f"lite-agent: {printable(problem.message)}", file=sys.stderr)
            if problem.type != "io":
                print(f"lite-agent: cannot write the output: {why}", file=sys.stderr)
        return problem.code
    return code


if __name__ == "__main__":
    sys.exit(main())
