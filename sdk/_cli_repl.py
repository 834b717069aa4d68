"""``lite-agent`` without a subcommand: an interactive session on the workdir.

The model's text streams as it comes and each tool call shows as one line. The prompt edits
lines with readline and keeps a history per project (``<home>/projects/<hash>/prompt_history``;
the up arrow recalls earlier prompts, also from earlier runs). Slash commands
(``/help`` lists them) reach the session's checkpoints, restores, compaction and the other
sessions. Ctrl-C cancels the running turn or manual compaction and returns to the prompt (the
log records the aborted turn; the next prompt continues); a second Ctrl-C at an empty prompt
exits, as do ``/exit`` and Ctrl-D.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

from liteagent.eventlog import LiteAgentError, OperationCancelledError
from liteagent.providers import ProviderAuthError

from ._agent import LiteAgent
from ._cli_env import CliEnv, run_live
from ._cli_output import LiveRenderer, checkpoint_lines, session_lines
from ._cli_terminal import counted_ctrl_c, prompt_history, read_line

__all__ = ["HELP", "Repl", "cmd_interactive"]

HELP = """\
/compact [instructions]              compact the context now (Ctrl-C cancels)
/checkpoints                         this session's checkpoints (one per prompt)
/restore <seq> [--conversation-only] back to a checkpoint: files and conversation
/sessions                            the stored sessions
/resume <id>                         continue a stored session
/clear                               start a new session (the old one stays stored)
/help                                this list
/exit                                quit (also Ctrl-D, or Ctrl-C twice)
Ctrl-C during a turn or a compaction cancels it."""

_EXIT = "exit"


class Repl:
    """The read-eval loop over one agent."""

    def __init__(self, env: CliEnv, agent: LiteAgent, out: TextIO | None = None) -> None:
        self.env = env
        self.agent = agent
        self.out = out or sys.stdout
        self.commands: dict[str, Callable[[str], str | None]] = {
            "/help": lambda _: self.say(HELP),
            "/exit": lambda _: _EXIT,
            "/quit": lambda _: _EXIT,
            "/clear": self.clear,
            "/sessions": lambda _: self.say("\n".join(session_lines(self.agent.list_sessions()))),
            "/resume": self.resume,
            "/checkpoints": lambda _: self.say("\n".join(
                checkpoint_lines(self.agent.list_checkpoints()))),
            "/restore": self.restore,
            "/compact": self.compact,
        }

    def say(self, text: str) -> None:
        """Print a line (or lines) to the session's output."""
        print(text, file=self.out, flush=True)

    def clear(self, _: str) -> None:
        """/clear: a new, empty session."""
        self.say(f"new session {self.agent.clear()}")

    def resume(self, rest: str) -> None:
        """/resume <id>."""
        if not rest:
            self.say("usage: /resume <id>  (/sessions lists them)")
            return
        self.agent.resume(rest)
        events = self.env.checkpointer.head(rest)
        self.say(f"resumed {rest} ({events} events)" if events else
                 f"session {rest} is new and empty")

    def restore(self, rest: str) -> None:
        """/restore <seq> [--conversation-only]."""
        words = rest.split()
        only = "--conversation-only" in words
        words = [w for w in words if w != "--conversation-only"]
        if len(words) != 1 or not words[0].isdigit():
            self.say("usage: /restore <seq> [--conversation-only]  (/checkpoints lists them)")
            return
        seq, sid = int(words[0]), self.agent.session_id
        result = run_live(
            self.agent,
            lambda token: self.agent.restore(sid, seq, files=not only, cancel=token),
            LiveRenderer(self.out))
        names = ", ".join(result.restored_files) or "no files"
        self.say(f"restored to before seq {seq}: {names} put back; the conversation is as it "
                 "was then" + ("" if only else " (shell commands are not undone)"))

    def compact(self, rest: str) -> None:
        """/compact [instructions]."""
        stats = run_live(self.agent,
                         lambda token: self.agent.compact(rest or None, cancel=token),
                         LiveRenderer(self.out))
        self.say(f"compacted: ~{stats.before} → ~{stats.after} tokens" if stats.changed
                 else f"nothing to reduce (~{stats.before} tokens)")

    def command(self, line: str) -> str | None:
        """Run a slash command; ``"exit"`` to quit."""
        name, _, rest = line.partition(" ")
        handler = self.commands.get(name)
        if handler is None:
            self.say(f"unknown command {name}; /help lists them")
            return None
        return handler(rest.strip())

    def turn(self, text: str) -> None:
        """Send one prompt, streaming the answer."""
        renderer = LiveRenderer(self.out)
        result = run_live(self.agent, lambda token: self.agent.send(text, cancel=token),
                          renderer)
        u = result.usage
        self.say(f"  ({result.stop_reason} · {u.input_tokens} in / {u.output_tokens} out)")

    def step(self, line: str) -> str | None:
        """Handle one input line, reporting refusals and errors readably."""
        try:
            if line.startswith("/"):
                return self.command(line)
            self.turn(line)
        except OperationCancelledError:
            self.say("  cancelled: the log records the aborted turn; the session continues.")
        except LiteAgentError as e:
            self.say(f"  {type(e).__name__}: {e}")
        return None

    def loop(self) -> int:
        """Read and run lines until /exit, Ctrl-D, or Ctrl-C twice at the prompt."""
        self.say(f"lite-agent · {self.env.workdir} · session {self.agent.session_id}\n"
                 "Type a request, or /help. Ctrl-C cancels a turn; twice at the prompt quits.")
        with counted_ctrl_c() as ctrl_c, prompt_history(self.env.project / "prompt_history"):
            interrupted = False
            while True:
                try:
                    line = read_line("> ", ctrl_c).strip()
                except EOFError:
                    self.say("")
                    return 0
                except KeyboardInterrupt:
                    if interrupted or ctrl_c.take() > 1:
                        self.say("")
                        return 0
                    interrupted = True
                    self.say("\n(Ctrl-C again to quit, or /exit)")
                    continue
                interrupted = False
                if line and self.step(line) == _EXIT:
                    return 0


def cmd_interactive(env: CliEnv, args: argparse.Namespace) -> int:  # noqa: ARG001
    """The interactive mode (see the module docstring)."""
    try:
        agent = env.agent()
    except ProviderAuthError:
        print("lite-agent: no ANTHROPIC_API_KEY set; set it to talk to Claude, or try "
              "`lite-agent demo` (offline, no key needed)", file=sys.stderr)
        return 1
    return Repl(env, agent).loop()
