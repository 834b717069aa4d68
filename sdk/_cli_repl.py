"""``lite-agent`` without a subcommand: an interactive session on the workdir.

The model's text streams as it comes and each tool call shows as one line. The prompt (see
:mod:`._cli_prompt`) edits lines and keeps a history per project
(``<home>/projects/<hash>/prompt_history``; the up arrow recalls earlier prompts, also from
earlier runs). Slash commands (``/help`` lists them) reach the session's checkpoints, restores,
compaction and the other sessions. Ctrl-C cancels the running turn or manual compaction and
returns to the prompt (the log records the aborted turn; the next prompt continues); a second
Ctrl-C at an empty prompt exits, as do ``/exit`` and Ctrl-D. Everything runs on one asyncio
event loop (see :mod:`._cli_terminal`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import LiteAgentError, OperationCancelledError

from ._agent import LiteAgent
from ._cli_commands import compaction_outcome, say_compacted
from ._cli_env import CliEnv
from ._cli_errors import EndOfInputError, failure
from ._cli_output import (
    LiveRenderer,
    checkpoint_table,
    make_console,
    session_rows,
    session_table,
    show,
)
from ._cli_terminal import Interrupts, live, run_loop

if TYPE_CHECKING:
    from ._cli_prompt import Prompt

__all__ = ["HELP", "Repl", "cmd_interactive"]

T = TypeVar("T")

HELP = """\
/compact [instructions]              compact the context now (Ctrl-C cancels)
/checkpoints                         this session's checkpoints (one per prompt)
/restore <seq> [--conversation-only] back to a checkpoint: files and conversation
/undo                                undo the last restore (events and files come back)
/fork <seq>                          continue in a new session from before a checkpoint
/sessions                            the stored sessions
/resume <id>                         continue a stored session
/clear                               start a new session (the old one stays stored)
/help                                this list
/exit                                quit (also Ctrl-D, or Ctrl-C twice)
Ctrl-C during a turn or a compaction cancels it."""

_EXIT = "exit"
_SEQ = re.compile(r"[0-9]{1,18}")  # a seq as typed: ASCII digits, below 2**63

Handler = Callable[[str], Awaitable[str | None]]


class Repl:
    """The read-eval loop over one agent."""

    def __init__(
        self,
        env: CliEnv,
        agent: LiteAgent,
        interrupts: Interrupts,
        prompt: Prompt,
        console: Console,
    ) -> None:
        self.env = env
        self.agent = agent
        self.interrupts = interrupts
        self.prompt = prompt
        self.console = console
        self.commands: dict[str, Handler] = {
            "/help": self._help,
            "/exit": self._exit,
            "/quit": self._exit,
            "/clear": self.clear,
            "/sessions": self.sessions,
            "/resume": self.resume,
            "/checkpoints": self.checkpoints,
            "/restore": self.restore,
            "/undo": self.undo,
            "/fork": self.fork,
            "/compact": self.compact,
        }

    def say(self, text: str, style: str | None = None) -> None:
        """Print a line (or lines)."""
        self.console.print(text, style=style)

    async def _live(self, work: Callable[[CancelToken], T]) -> T:
        return await live(self.agent, work, LiveRenderer(self.console), self.interrupts)

    async def _help(self, _: str) -> None:
        self.say(HELP)

    async def _exit(self, _: str) -> str:
        return _EXIT

    async def clear(self, _: str) -> None:
        """/clear: a new, empty session."""
        self.say(f"new session {self.agent.clear()}")

    async def sessions(self, _: str) -> None:
        """/sessions."""
        rows = session_rows(self.env.checkpointer, self.agent.list_sessions())
        show(self.console, session_table(self.console, rows))

    async def checkpoints(self, _: str) -> None:
        """/checkpoints."""
        show(self.console, checkpoint_table(self.console, self.agent.list_checkpoints()))

    async def resume(self, rest: str) -> None:
        """/resume <id>."""
        if not rest:
            self.say("usage: /resume <id>  (/sessions lists them)")
            return
        self.agent.resume(rest)
        events = self.env.checkpointer.head(rest)
        self.say(
            f"resumed {rest} ({events} events)" if events else f"session {rest} is new and empty"
        )

    def _checkpoint(self, word: str, usage: str) -> int | None:
        """``word`` as a checkpoint of the session, or ``None`` once the refusal is said (a
        seq is ASCII digits: ``²`` is a digit to Python but not a number to ``int``)."""
        if _SEQ.fullmatch(word) is None:
            self.say(f"usage: {usage}  (/checkpoints lists them)")
            return None
        seq = int(word)
        if seq not in [c.seq for c in self.agent.list_checkpoints()]:
            self.say(
                f"  seq {seq} is not a checkpoint of this session (/checkpoints lists them)",
                style="red",
            )
            return None
        return seq

    async def restore(self, rest: str) -> None:
        """/restore <seq> [--conversation-only]."""
        words = rest.split()
        only = "--conversation-only" in words
        words = [w for w in words if w != "--conversation-only"]
        usage = "/restore <seq> [--conversation-only]"
        seq = self._checkpoint(words[0] if len(words) == 1 else "", usage)
        if seq is None:
            return
        sid = self.agent.session_id
        result = await self._live(
            lambda token: self.agent.restore(sid, seq, files=not only, cancel=token)
        )
        names = ", ".join(result.restored_files) or "no files"
        self.say(
            f"restored to before seq {seq}: {names} put back; the conversation is as it "
            "was then" + ("" if only else " (shell commands are not undone)")
        )

    async def undo(self, rest: str) -> None:
        """/undo [branch]."""
        sid = self.agent.session_id
        branch = rest or None
        result = await self._live(
            lambda token: self.agent.undo_restore(sid, branch=branch, cancel=token)
        )
        names = ", ".join(result.restored_files) or "no files"
        self.say(f"undone: {names} put back; /undo again undoes this too")

    async def fork(self, rest: str) -> None:
        """/fork <seq>: a new session from before that checkpoint, made the current one."""
        seq = self._checkpoint(rest, "/fork <seq>")
        if seq is None:
            return
        old = self.agent.session_id
        new = self.agent.fork(old, seq)
        self.agent.resume(new)
        self.say(f"forked {old} before seq {seq}: now in {new} (/resume {old} goes back)")

    async def compact(self, rest: str) -> None:
        """/compact [instructions]."""
        instructions = rest or None
        if self.env.summary_model is not None:
            self.env.summary_model.reset()
        stats = await self._live(lambda token: self.agent.compact(instructions, cancel=token))
        outcome = compaction_outcome(
            self.env, self.agent.session_id, instructions, stats, self.env.summary_model
        )
        say_compacted(self.console, stats, outcome)

    async def command(self, line: str) -> str | None:
        """Run a slash command; ``"exit"`` to quit."""
        name, _, rest = line.partition(" ")
        handler = self.commands.get(name)
        if handler is None:
            self.say(f"unknown command {name}; /help lists them")
            return None
        return await handler(rest.strip())

    async def turn(self, text: str) -> None:
        """Send one prompt, streaming the answer."""
        result = await self._live(lambda token: self.agent.send(text, cancel=token))
        u = result.usage
        self.say(
            f"  ({result.stop_reason} · {u.input_tokens} in / {u.output_tokens} out)", style="dim"
        )

    async def step(self, line: str) -> str | None:
        """Handle one input line, reporting refusals and errors readably."""
        try:
            if line.startswith("/"):
                return await self.command(line)
            await self.turn(line)
        except OperationCancelledError:
            self.say(
                "  cancelled: the log records the aborted turn; the session continues.",
                style="yellow",
            )
        except LiteAgentError as e:
            self.say(f"  {failure(e).message}", style="red")
        return None

    async def loop(self) -> int:
        """Read and run lines until /exit, Ctrl-D, or Ctrl-C twice at the prompt."""
        self.say(
            f"lite-agent · {self.env.workdir} · session {self.agent.session_id}\n"
            "Type a request, or /help. Ctrl-C cancels a turn; twice at the prompt quits."
        )
        interrupted = False
        try:
            while True:
                presses = self.interrupts.take()
                line: str | None = None
                if not presses:
                    try:
                        line = await self.prompt.read("> ")
                    except EndOfInputError:
                        self.say("")
                        return 0
                    if line is None:  # a press after it is the turn's (live cancels it)
                        presses = 1 + self.interrupts.take()
                if presses:
                    if interrupted or presses > 1:
                        self.say("")
                        return 0
                    interrupted = True
                    self.say(
                        ("" if self.prompt.ends_line else "\n") + "(Ctrl-C again to quit, or /exit)"
                    )
                    continue
                interrupted = False
                assert line is not None
                line = line.strip()
                if line and await self.step(line) == _EXIT:
                    return 0
        finally:
            close = getattr(self.prompt, "close", None)
            if close is not None:
                close()


def cmd_interactive(env: CliEnv, args: argparse.Namespace) -> int:  # noqa: ARG001
    """The interactive mode (see the module docstring)."""
    from ._cli_prompt import make_prompt  # noqa: PLC0415 -- prompt_toolkit only when asked

    agent = env.agent()
    console = make_console()

    async def main(interrupts: Interrupts) -> int:
        prompt = make_prompt(env.project / "prompt_history", interrupts, console)
        return await Repl(env, agent, interrupts, prompt, console).loop()

    return run_loop(main)
